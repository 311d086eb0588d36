// Hand-derived multi-head attention. The projections use kernels::matmul_into (a batched GEMM); the
// per-head attention is written out head by head with one GEMM per product, so that this path shares
// no attention code with the tape's composition.
#include "models/mha_manual.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "autodiff/instantiate.hpp"
#include "autodiff/shape.hpp"
#include "kernels/gemm.hpp"
#include "kernels/kernels.hpp"

namespace xgrad::models::manual
{
namespace
{
// C (m x n) = op(A) op(B) + beta C on row-major blocks, leading dimensions = stored row lengths.
template <class T>
void product(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, T beta, T* c)
{
    kernels::gemm(ta, tb, m, n, k, a, ta ? m : k, b, tb ? k : n, beta, c, n);
}

template <class T>
array<T> project(const array<T>& x, const array<T>& w)  // (B, T, d_in) @ (d_in, d_out)
{
    array<T> out = array<T>::from_shape({x.shape()[0], x.shape()[1], w.shape()[1]});
    kernels::matmul_into(x, false, w, false, out);
    return out;
}

template <class T>
array<T> project_back(const array<T>& grad, const array<T>& w)  // (B, T, d_out) @ W^T
{
    array<T> out = array<T>::from_shape({grad.shape()[0], grad.shape()[1], w.shape()[0]});
    kernels::matmul_into(grad, false, w, true, out);
    return out;
}

template <class T>
array<T> weight_grad(const array<T>& x, const array<T>& grad)  // sum over b of X_b^T G_b
{
    array<T> out = array<T>::from_shape({x.shape()[2], grad.shape()[2]});
    kernels::matmul_into(x, true, grad, false, out);
    return out;
}

// Sizes of one attention problem: Q (B, H, Tq, dh), K and V (B, G, Tk, dh).
struct dims
{
    std::size_t batch, heads, groups, tq, tk, dh;
    std::size_t kv_head(std::size_t h) const { return h / (heads / groups); }
};

template <class T>
dims dims_of(const array<T>& q, const array<T>& k)
{
    return {q.shape()[0], q.shape()[1], k.shape()[1], q.shape()[2], k.shape()[2], q.shape()[3]};
}

// The backward's inputs must be the forward's: q, k, v, p as attention_forward made them, and a
// gradient of the output's shape.
template <class T>
void check_attention_backward_shapes(const array<T>& grad_o, const array<T>& q, const array<T>& k,
                                     const array<T>& v, const array<T>& p)
{
    const char* op = "attention_backward";
    if (q.dimension() != 4 || k.dimension() != 4)
    {
        throw std::invalid_argument(std::string(op) + ": q and k must be 4-D (B, H, T, dh), got " +
                                    shape_str(to_shape(q.shape())) + " and " +
                                    shape_str(to_shape(k.shape())));
    }
    const dims s = dims_of(q, k);
    if (s.groups == 0 || s.heads % s.groups != 0)
    {
        throw std::invalid_argument(std::string(op) + ": " + std::to_string(s.heads) +
                                    " query heads cannot share " + std::to_string(s.groups) +
                                    " key/value heads");
    }
    require_shape(op, "k", k, {s.batch, s.groups, s.tk, s.dh});
    require_shape(op, "v", v, {s.batch, s.groups, s.tk, s.dh});
    require_shape(op, "p", p, {s.batch, s.heads, s.tq, s.tk});
    require_shape(op, "grad_o", grad_o, {s.batch, s.heads, s.tq, s.dh});
}
}  // namespace

// Chapter 19 forward, one head at a time:
//   S = Q_h K_g^T,  P = softmax(S / sqrt(dh)) over the keys the mask keeps (0 on fully masked rows),
//   O_h = P V_g.
template <class T>
void attention_forward(const array<T>& q, const array<T>& k, const array<T>& v, const mask_t* mask, array<T>& p,
                       array<T>& o)
{
    const dims s = dims_of(q, k);
    const T scale = T(1) / std::sqrt(static_cast<T>(s.dh));
    const mask_t keep = mask ? mask_t(xt::broadcast(*mask, shape_t{s.batch, s.heads, s.tq, s.tk}))
                             : mask_t(xt::ones<bool>(shape_t{s.batch, s.heads, s.tq, s.tk}));
    p = array<T>::from_shape({s.batch, s.heads, s.tq, s.tk});
    o = array<T>::from_shape({s.batch, s.heads, s.tq, s.dh});
    for (std::size_t b = 0; b < s.batch; ++b)
    {
        for (std::size_t h = 0; h < s.heads; ++h)
        {
            const std::size_t g = s.kv_head(h);
            const T* qh = &q(b, h, 0, 0);
            const T* kg = &k(b, g, 0, 0);
            const T* vg = &v(b, g, 0, 0);
            T* ph = &p(b, h, 0, 0);
            product(false, true, s.tq, s.tk, s.dh, qh, kg, T(0), ph);  // S = Q K^T, stored in P
            for (std::size_t i = 0; i < s.tq; ++i)
            {
                T* row = ph + i * s.tk;
                const bool* kept = &keep(b, h, i, 0);
                T top = -INFINITY;
                for (std::size_t j = 0; j < s.tk; ++j)
                {
                    top = kept[j] ? std::max(top, scale * row[j]) : top;
                }
                const bool any_kept = std::find(kept, kept + s.tk, true) != kept + s.tk;
                T total = 0;
                for (std::size_t j = 0; j < s.tk; ++j)
                {
                    row[j] = kept[j] ? std::exp(scale * row[j] - top) : T(0);
                    total += row[j];
                }
                for (std::size_t j = 0; j < s.tk; ++j)
                {
                    // no kept key (decided by the mask): weights 0; otherwise NaN or Inf scores propagate
                    row[j] = any_kept ? row[j] / total : T(0);
                }
            }
            product(false, false, s.tq, s.dh, s.tk, ph, vg, T(0), &o(b, h, 0, 0));  // O = P V
        }
    }
}

// Chapter 19 backward, reversing attention_forward line by line.
template <class T>
void attention_backward(const array<T>& grad_o, const array<T>& q, const array<T>& k, const array<T>& v,
                        const array<T>& p, array<T>& grad_q, array<T>& grad_k, array<T>& grad_v)
{
    check_attention_backward_shapes(grad_o, q, k, v, p);
    const dims s = dims_of(q, k);
    const T scale = T(1) / std::sqrt(static_cast<T>(s.dh));
    grad_q = array<T>::from_shape(q.shape());
    grad_k = xt::zeros<T>(k.shape());  // a key/value head shared by a group sums its heads' gradients
    grad_v = xt::zeros<T>(v.shape());
    array<T> grad_p = array<T>::from_shape({s.tq, s.tk});
    for (std::size_t b = 0; b < s.batch; ++b)
    {
        for (std::size_t h = 0; h < s.heads; ++h)
        {
            const std::size_t g = s.kv_head(h);
            const T* go = &grad_o(b, h, 0, 0);
            const T* ph = &p(b, h, 0, 0);
            // O = P V  ->  dP = dO V^T,  dV += P^T dO
            product(false, true, s.tq, s.tk, s.dh, go, &v(b, g, 0, 0), T(0), grad_p.data());
            product(true, false, s.tk, s.dh, s.tq, ph, go, T(1), &grad_v(b, g, 0, 0));
            // P = softmax(scale S)  ->  dS = scale P * (dP - rowsum(dP * P)); masked entries have P = 0
            for (std::size_t i = 0; i < s.tq; ++i)
            {
                T* row = grad_p.data() + i * s.tk;
                const T* prow = ph + i * s.tk;
                T dot = 0;
                for (std::size_t j = 0; j < s.tk; ++j)
                {
                    dot += row[j] * prow[j];
                }
                for (std::size_t j = 0; j < s.tk; ++j)
                {
                    row[j] = scale * prow[j] * (row[j] - dot);
                }
            }
            // S = Q K^T  ->  dQ = dS K,  dK += dS^T Q
            product(false, false, s.tq, s.dh, s.tk, grad_p.data(), &k(b, g, 0, 0), T(0), &grad_q(b, h, 0, 0));
            product(true, false, s.tk, s.dh, s.tq, grad_p.data(), &q(b, h, 0, 0), T(1), &grad_k(b, g, 0, 0));
        }
    }
}

// Listing 20.1: (B, T, d) -> (B, T, H, dh) -> (B, H, T, dh)
template <class T>
array<T> split_heads(const array<T>& x, std::size_t heads)
{
    array<T> r = x;
    r.reshape({x.shape()[0], x.shape()[1], heads, x.shape()[2] / heads});
    return kernels::permute(r, {0, 2, 1, 3});
}

// (B, H, T, dh) -> (B, T, H, dh) -> (B, T, H dh)
template <class T>
array<T> combine_heads(const array<T>& x)
{
    array<T> r = kernels::permute(x, {0, 2, 1, 3});
    r.reshape({x.shape()[0], x.shape()[2], x.shape()[1] * x.shape()[3]});
    return r;
}

// Listing 20.2
template <class T>
mha_forward_result<T> mha_forward(const array<T>& xq, const array<T>& xk, const array<T>& xv, const array<T>& w_q,
                                  const array<T>& w_k, const array<T>& w_v, const array<T>& w_o,
                                  const mha_config& config, const mha_options& options)
{
    check_mha_shapes("mha_forward", config, to_shape(xq.shape()), to_shape(xk.shape()), to_shape(xv.shape()),
                     to_shape(w_q.shape()), to_shape(w_k.shape()), to_shape(w_v.shape()), to_shape(w_o.shape()));
    mha_forward_result<T> r;
    mha_cache<T>& c = r.cache;
    c.config = config;
    c.xq = xq, c.xk = xk, c.xv = xv;
    c.w_q = w_q, c.w_k = w_k, c.w_v = w_v, c.w_o = w_o;
    const std::size_t batch = xq.shape()[0], tq = xq.shape()[1], tk = xk.shape()[1];
    c.mask = combined_mask("mha_forward", options.mask, options.causal, batch, config.heads, tq, tk);

    c.q = split_heads(project(xq, w_q), config.heads);           // Q = split(Xq W_Q)
    c.k = split_heads(project(xk, w_k), config.kv_head_count());  // K = split(Xk W_K)
    c.v = split_heads(project(xv, w_v), config.kv_head_count());  // V = split(Xv W_V)
    array<T> head_output;
    attention_forward(c.q, c.k, c.v, c.mask ? &*c.mask : nullptr, c.weights, head_output);
    c.joined = combine_heads(head_output);                        // joined = concat(O_1 .. O_H)
    r.output = project(c.joined, w_o);                            // Y = joined W_O
    return r;
}

// Listing 20.3
template <class T>
mha_gradients<T> mha_backward(const array<T>& grad_output, const mha_cache<T>& c)
{
    // dY has the output's shape (B, Tq, d): the forward's batch and queries, W_O's columns.
    require_shape("mha_backward", "grad_output", grad_output,
                  {c.xq.shape()[0], c.xq.shape()[1], c.w_o.shape()[1]});
    mha_gradients<T> g;
    // Y = joined W_O  ->  dW_O = joined^T dY,  d joined = dY W_O^T
    g.w_o = weight_grad(c.joined, grad_output);
    const array<T> grad_joined = project_back(grad_output, c.w_o);
    // joined = combine_heads(O)  ->  dO = split_heads(d joined)
    const array<T> grad_heads = split_heads(grad_joined, c.config.heads);
    // O = attention(Q, K, V)  ->  Chapter 19 backward
    array<T> grad_q, grad_k, grad_v;
    attention_backward(grad_heads, c.q, c.k, c.v, c.weights, grad_q, grad_k, grad_v);
    // Q = split_heads(Q_linear)  ->  dQ_linear = combine_heads(dQ), likewise K and V
    const array<T> grad_q_linear = combine_heads(grad_q);
    const array<T> grad_k_linear = combine_heads(grad_k);
    const array<T> grad_v_linear = combine_heads(grad_v);
    // Q_linear = Xq W_Q  ->  dXq = dQ_linear W_Q^T,  dW_Q = Xq^T dQ_linear  (20.3), likewise K and V
    g.xq = project_back(grad_q_linear, c.w_q);
    g.xk = project_back(grad_k_linear, c.w_k);
    g.xv = project_back(grad_v_linear, c.w_v);
    g.w_q = weight_grad(c.xq, grad_q_linear);
    g.w_k = weight_grad(c.xk, grad_k_linear);
    g.w_v = weight_grad(c.xv, grad_v_linear);
    return g;
}

#define XGRAD_MHA_MANUAL(T)                                                                                        \
    template array<T> split_heads(const array<T>&, std::size_t);                                                   \
    template array<T> combine_heads(const array<T>&);                                                              \
    template mha_forward_result<T> mha_forward(const array<T>&, const array<T>&, const array<T>&, const array<T>&, \
                                               const array<T>&, const array<T>&, const array<T>&,                  \
                                               const mha_config&, const mha_options&);                             \
    template mha_gradients<T> mha_backward(const array<T>&, const mha_cache<T>&);                                  \
    template void attention_forward(const array<T>&, const array<T>&, const array<T>&, const mask_t*, array<T>&,   \
                                    array<T>&);                                                                    \
    template void attention_backward(const array<T>&, const array<T>&, const array<T>&, const array<T>&,           \
                                     const array<T>&, array<T>&, array<T>&, array<T>&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_MHA_MANUAL)
}  // namespace xgrad::models::manual
