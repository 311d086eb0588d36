// The hand-derived layers, by family, on rows: an activation (B, T, C) is B T rows of C numbers. Products go
// through kernels::matmul_into; everything else is a plain loop written from the math in the comments.
// Every line of a backward names the forward line it reverses.
#include "models/manual_layers.hpp"

#include <cmath>
#include <vector>

#include "autodiff/instantiate.hpp"
#include "kernels/kernels.hpp"
#include "models/masks.hpp"

namespace xgrad::models::manual
{
namespace
{
template <class T>
void require_same_shape(const char* op, const char* a_name, const array<T>& a, const char* b_name, const array<T>& b)
{
    if (a.shape() != b.shape())
    {
        fail(op, std::string(a_name) + " " + shape_of(a) + " and " + b_name + " " + shape_of(b) +
                     " must have the same shape");
    }
}

// sigmoid(z) = 1 / (1 + e^-z), with e^z / (1 + e^z) for z < 0 so that no exponential overflows.
template <class T>
T sigmoid(T z)
{
    if (z >= T(0))
    {
        return T(1) / (T(1) + std::exp(-z));
    }
    const T e = std::exp(z);
    return e / (T(1) + e);
}

// The rotation of rope_forward, by +a (sign = 1) or -a (sign = -1), on (B, H, T, dh).
template <class T>
array<T> rotate(const char* op, const array<T>& x, double base, std::size_t offset, T sign)
{
    if (x.dimension() != 4 || x.shape()[3] % 2 != 0)
    {
        fail(op, "input must be (B, H, T, dh) with dh even, got " + shape_of(x));
    }
    const std::size_t length = x.shape()[2], dh = x.shape()[3];
    array<T> y = array<T>::from_shape(x.shape());
    for (std::size_t r = 0; r < rows(x); ++r)
    {
        const double position = static_cast<double>(offset + r % length);  // row r is position t = r mod T
        const T* xr = x.data() + r * dh;
        T* yr = y.data() + r * dh;
        for (std::size_t i = 0; i < dh / 2; ++i)
        {
            const double angle = position * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(dh));
            const T c = static_cast<T>(std::cos(angle)), s = sign * static_cast<T>(std::sin(angle));
            yr[2 * i] = xr[2 * i] * c - xr[2 * i + 1] * s;
            yr[2 * i + 1] = xr[2 * i] * s + xr[2 * i + 1] * c;
        }
    }
    return y;
}

// (B, T, C) @ (C, OC) with W^T or x^T as flags: the three products of a linear layer.
template <class T>
array<T> rows_times(const array<T>& x, const array<T>& w, bool transpose_w)
{
    const std::size_t out = transpose_w ? w.shape()[0] : w.shape()[1];
    array<T> y = array<T>::from_shape({x.shape()[0], x.shape()[1], out});
    kernels::matmul_into(x, false, w, transpose_w, y);
    return y;
}

template <class T>
array<T> rows_transposed_times(const array<T>& x, const array<T>& d_out)  // sum over b of x_b^T d_out_b
{
    array<T> w = array<T>::from_shape({x.shape()[2], d_out.shape()[2]});
    kernels::matmul_into(x, true, d_out, false, w);
    return w;
}

template <class T>
void add_bias_rows(array<T>& y, const array<T>& b)
{
    const std::size_t c = width(y);
    for (std::size_t r = 0; r < rows(y); ++r)
    {
        for (std::size_t j = 0; j < c; ++j)
        {
            y.data()[r * c + j] += b.data()[j];
        }
    }
}
}  // namespace

// ---- layer norm ---------------------------------------------------------------------------------------

template <class T>
array<T> layernorm_forward(const array<T>& x, const array<T>& weight, const array<T>* bias, layernorm_cache<T>& cache)
{
    const std::size_t c = width(x), n = rows(x);
    require_shape("layernorm_forward", "weight", weight, {c});
    if (bias)
    {
        require_shape("layernorm_forward", "bias", *bias, {c});
    }
    array<T> y = array<T>::from_shape(x.shape());
    cache.x_hat = array<T>::from_shape(x.shape());
    cache.rstd = array<T>::from_shape(shape_t(x.shape().begin(), x.shape().end() - 1));
    for (std::size_t r = 0; r < n; ++r)
    {
        const T* xr = x.data() + r * c;
        T* x_hat = cache.x_hat.data() + r * c;
        T* yr = y.data() + r * c;
        T mean = 0;
        for (std::size_t i = 0; i < c; ++i)
        {
            mean += xr[i];
        }
        mean /= static_cast<T>(c);  // mean = sum_i x_i / C
        T var = 0;
        for (std::size_t i = 0; i < c; ++i)
        {
            var += (xr[i] - mean) * (xr[i] - mean);
        }
        var /= static_cast<T>(c);  // var = sum_i (x_i - mean)^2 / C   (biased)
        const T rstd = T(1) / std::sqrt(var + static_cast<T>(norm_eps));  // rstd = 1 / sqrt(var + eps)
        for (std::size_t i = 0; i < c; ++i)
        {
            x_hat[i] = (xr[i] - mean) * rstd;              // x_hat = (x - mean) rstd
            yr[i] = x_hat[i] * weight(i) + (bias ? (*bias)(i) : T(0));  // y = x_hat weight + bias
        }
        cache.rstd.data()[r] = rstd;
    }
    return y;
}

template <class T>
layernorm_gradients<T> layernorm_backward(const array<T>& d_y, const layernorm_cache<T>& cache, const array<T>& weight)
{
    const std::size_t c = width(cache.x_hat), n = rows(cache.x_hat);
    require_shape("layernorm_backward", "d_y", d_y, to_shape(cache.x_hat.shape()));
    layernorm_gradients<T> g;
    g.x = array<T>::from_shape(d_y.shape());
    g.weight = xt::zeros<T>({c});
    g.bias = xt::zeros<T>({c});
    std::vector<T> d_x_hat(c);
    for (std::size_t r = 0; r < n; ++r)
    {
        const T* dy = d_y.data() + r * c;
        const T* x_hat = cache.x_hat.data() + r * c;
        T* dx = g.x.data() + r * c;
        const T rstd = cache.rstd.data()[r];
        T mean_d_x_hat = 0, mean_d_x_hat_x_hat = 0;
        for (std::size_t i = 0; i < c; ++i)
        {
            // y = x_hat weight + bias  ->  d weight += d y x_hat,  d bias += d y,  d x_hat = d y weight
            g.weight(i) += dy[i] * x_hat[i];
            g.bias(i) += dy[i];
            d_x_hat[i] = dy[i] * weight(i);
            mean_d_x_hat += d_x_hat[i];
            mean_d_x_hat_x_hat += d_x_hat[i] * x_hat[i];
        }
        mean_d_x_hat /= static_cast<T>(c);
        mean_d_x_hat_x_hat /= static_cast<T>(c);
        for (std::size_t i = 0; i < c; ++i)
        {
            // x_hat = (x - mean) rstd, with mean and rstd functions of the whole row  ->
            //   d x = rstd (d x_hat - mean(d x_hat) - x_hat mean(d x_hat x_hat))
            dx[i] = rstd * (d_x_hat[i] - mean_d_x_hat - x_hat[i] * mean_d_x_hat_x_hat);
        }
    }
    return g;
}

// ---- RMSNorm ----------------------------------------------------------------------------------------

template <class T>
array<T> rmsnorm_forward(const array<T>& x, const array<T>& weight, rmsnorm_cache<T>& cache)
{
    const std::size_t c = width(x), n = rows(x);
    require_shape("rmsnorm_forward", "weight", weight, {c});
    array<T> y = array<T>::from_shape(x.shape());
    cache.x_hat = array<T>::from_shape(x.shape());
    cache.rrms = array<T>::from_shape(shape_t(x.shape().begin(), x.shape().end() - 1));
    for (std::size_t r = 0; r < n; ++r)
    {
        const T* xr = x.data() + r * c;
        T* x_hat = cache.x_hat.data() + r * c;
        T* yr = y.data() + r * c;
        T squares = 0;
        for (std::size_t i = 0; i < c; ++i)
        {
            squares += xr[i] * xr[i];
        }
        const T rrms = T(1) / std::sqrt(squares / static_cast<T>(c) + static_cast<T>(norm_eps));  // 1 / rms
        for (std::size_t i = 0; i < c; ++i)
        {
            x_hat[i] = xr[i] * rrms;         // x_hat = x / rms
            yr[i] = x_hat[i] * weight(i);    // y = x_hat weight
        }
        cache.rrms.data()[r] = rrms;
    }
    return y;
}

template <class T>
rmsnorm_gradients<T> rmsnorm_backward(const array<T>& d_y, const rmsnorm_cache<T>& cache, const array<T>& weight)
{
    const std::size_t c = width(cache.x_hat), n = rows(cache.x_hat);
    require_shape("rmsnorm_backward", "d_y", d_y, to_shape(cache.x_hat.shape()));
    rmsnorm_gradients<T> g;
    g.x = array<T>::from_shape(d_y.shape());
    g.weight = xt::zeros<T>({c});
    for (std::size_t r = 0; r < n; ++r)
    {
        const T* dy = d_y.data() + r * c;
        const T* x_hat = cache.x_hat.data() + r * c;
        T* dx = g.x.data() + r * c;
        T dot = 0;  // sum_i d x_hat_i x_hat_i
        for (std::size_t i = 0; i < c; ++i)
        {
            g.weight(i) += dy[i] * x_hat[i];  // y = x_hat weight  ->  d weight += d y x_hat
            dot += dy[i] * weight(i) * x_hat[i];
        }
        // x_hat = x rrms, rrms = (mean(x^2) + eps)^(-1/2), d rrms / d x_k = -rrms^3 x_k / C
        //   ->  d x_k = rrms (d x_hat_k - x_hat_k (1/C) sum_i d x_hat_i x_hat_i)
        const T rrms = cache.rrms.data()[r];
        for (std::size_t i = 0; i < c; ++i)
        {
            dx[i] = rrms * (dy[i] * weight(i) - x_hat[i] * dot / static_cast<T>(c));
        }
    }
    return g;
}

// ---- rotary embedding --------------------------------------------------------------------------------

template <class T>
array<T> rope_forward(const array<T>& x, double base, std::size_t offset)
{
    return rotate("rope_forward", x, base, offset, T(1));  // y = R(a) x, pair by pair
}

template <class T>
array<T> rope_backward(const array<T>& d_y, double base, std::size_t offset)
{
    // y = R(a) x  ->  d x = R(a)^T d y = R(-a) d y:
    //   d x_2i = d y_2i cos a + d y_2i+1 sin a,  d x_2i+1 = -d y_2i sin a + d y_2i+1 cos a
    return rotate("rope_backward", d_y, base, offset, T(-1));
}

// ---- the exact GELU ----------------------------------------------------------------------------------

template <class T>
array<T> gelu_exact_forward(const array<T>& x)
{
    array<T> y = array<T>::from_shape(x.shape());
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        // y = 0.5 x (1 + erf(x / sqrt 2)), with 1 + erf(u) = erfc(-u), which keeps its digits for x << 0
        y.data()[i] = T(0.5) * x.data()[i] * std::erfc(-x.data()[i] / std::sqrt(T(2)));
    }
    return y;
}

template <class T>
array<T> gelu_exact_backward(const array<T>& d_y, const array<T>& x)
{
    require_same_shape("gelu_exact_backward", "d_y", d_y, "x", x);
    array<T> dx = array<T>::from_shape(x.shape());
    const T inv_sqrt_2pi = T(0.39894228040143268);
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        const T v = x.data()[i];
        const T cdf = T(0.5) * std::erfc(-v / std::sqrt(T(2)));   // Phi(x)
        const T pdf = inv_sqrt_2pi * std::exp(T(-0.5) * v * v);   // phi(x) = Phi'(x)
        dx.data()[i] = d_y.data()[i] * (cdf + v * pdf);          // y = x Phi(x)  ->  d x = d y (Phi + x phi)
    }
    return dx;
}

// ---- SwiGLU ------------------------------------------------------------------------------------------

template <class T>
array<T> swiglu_forward(const array<T>& gate, const array<T>& up)
{
    require_same_shape("swiglu_forward", "gate", gate, "up", up);
    array<T> y = array<T>::from_shape(gate.shape());
    for (std::size_t i = 0; i < gate.size(); ++i)
    {
        const T a = gate.data()[i];
        y.data()[i] = a * sigmoid(a) * up.data()[i];  // y = silu(gate) up
    }
    return y;
}

template <class T>
swiglu_gradients<T> swiglu_backward(const array<T>& d_y, const array<T>& gate, const array<T>& up)
{
    require_same_shape("swiglu_backward", "gate", gate, "up", up);
    require_same_shape("swiglu_backward", "d_y", d_y, "gate", gate);
    swiglu_gradients<T> g{array<T>::from_shape(gate.shape()), array<T>::from_shape(gate.shape())};
    for (std::size_t i = 0; i < gate.size(); ++i)
    {
        const T a = gate.data()[i], dy = d_y.data()[i];
        const T s = sigmoid(a);
        g.up.data()[i] = dy * a * s;  // y = silu(a) up  ->  d up = d y silu(a)
        // silu'(a) = s + a s (1 - s) = s (1 + a (1 - s))  ->  d gate = d y up silu'(a)
        g.gate.data()[i] = dy * up.data()[i] * s * (T(1) + a * (T(1) - s));
    }
    return g;
}

// ---- products and biases -----------------------------------------------------------------------------

template <class T>
array<T> linear_forward(const array<T>& x, const array<T>& w, const array<T>* b)
{
    if (x.dimension() != 3 || w.dimension() != 2 || x.shape()[2] != w.shape()[0] ||
        (b && to_shape(b->shape()) != shape_t{w.shape()[1]}))
    {
        fail("linear_forward", "x (B, T, C), W (C, OC) and b (OC,) must agree, got x " + shape_of(x) + ", W " +
                                   shape_of(w) + (b ? ", b " + shape_of(*b) : std::string(", no b")));
    }
    array<T> y = rows_times(x, w, false);  // out = x W
    if (b)
    {
        add_bias_rows(y, *b);  // out += b on every row
    }
    return y;
}

template <class T>
linear_gradients<T> linear_backward(const array<T>& d_out, const array<T>& x, const array<T>& w, bool has_bias)
{
    require_shape("linear_backward", "d_out", d_out, {x.shape()[0], x.shape()[1], w.shape()[1]});
    linear_gradients<T> g;
    g.x = rows_times(d_out, w, true);           // out = x W  ->  d x = d out W^T
    g.w = rows_transposed_times(x, d_out);      //            ->  d W = sum over rows x^T d out
    if (has_bias)
    {
        g.b = bias_backward(d_out);             // out += b   ->  d b = sum over rows d out
    }
    return g;
}

template <class T>
array<T> bias_backward(const array<T>& d_out)
{
    const std::size_t c = width(d_out);
    array<T> d_b = xt::zeros<T>({c});
    for (std::size_t r = 0; r < rows(d_out); ++r)
    {
        for (std::size_t j = 0; j < c; ++j)
        {
            d_b.data()[j] += d_out.data()[r * c + j];  // out[r] = x[r] + b  ->  d b += d out[r]
        }
    }
    return d_b;
}

// ---- causal self-attention ---------------------------------------------------------------------------

namespace
{
template <class T>
void check_attention(const array<T>& x, const attention_weights<T>& w, const mha_config& config)
{
    const char* op = "causal_self_attention_forward";
    if (!w.w_q || !w.w_k || !w.w_v || !w.w_o)
    {
        fail(op, "W_Q, W_K, W_V and W_O are all required");
    }
    const bool any_bias = w.b_q || w.b_k || w.b_v || w.b_o;
    if (any_bias && !(w.b_q && w.b_k && w.b_v && w.b_o))
    {
        fail(op, "b_Q, b_K, b_V and b_O come together (bias = all) or not at all");
    }
    check_mha_shapes(op, config, to_shape(x.shape()), to_shape(x.shape()), to_shape(x.shape()),
                     to_shape(w.w_q->shape()), to_shape(w.w_k->shape()), to_shape(w.w_v->shape()),
                     to_shape(w.w_o->shape()));
    if (any_bias)
    {
        const std::size_t d = config.d_model, kv = config.kv_head_count() * (d / config.heads);
        require_shape(op, "b_Q", *w.b_q, {d});
        require_shape(op, "b_K", *w.b_k, {kv});
        require_shape(op, "b_V", *w.b_v, {kv});
        require_shape(op, "b_O", *w.b_o, {d});
    }
}
}  // namespace

template <class T>
array<T> causal_self_attention_forward(const array<T>& x, const attention_weights<T>& w, const mha_config& config,
                                       const attention_variant& variant, attention_cache<T>& c)
{
    check_attention(x, w, config);
    c.config = config;
    c.variant = variant;
    c.has_bias = w.b_q != nullptr;
    c.x = x;
    const std::size_t groups = config.kv_head_count(), length = x.shape()[1];
    c.q = split_heads(linear_forward(x, *w.w_q, w.b_q), config.heads);  // Q = split(x W_Q + b_Q)
    c.k = split_heads(linear_forward(x, *w.w_k, w.b_k), groups);        // K = split(x W_K + b_K)
    c.v = split_heads(linear_forward(x, *w.w_v, w.b_v), groups);        // V = split(x W_V + b_V)
    if (variant.rope)
    {
        c.q = rope_forward(c.q, variant.rope_base, variant.position_offset);  // Q = rope(Q)
        c.k = rope_forward(c.k, variant.rope_base, variant.position_offset);  // K = rope(K)
    }
    const mask_t causal = causal_mask(length, length);
    array<T> heads_out;
    attention_forward(c.q, c.k, c.v, &causal, c.weights, heads_out);  // O = softmax(Q K^T / sqrt(dh)) V
    c.joined = combine_heads(heads_out);                               // joined = concat(O_1 .. O_H)
    return linear_forward(c.joined, *w.w_o, w.b_o);                    // y = joined W_O + b_O
}

template <class T>
attention_gradients<T> causal_self_attention_backward(const array<T>& d_y, const attention_cache<T>& c,
                                                      const attention_weights<T>& w, const attention_rules<T>& rules)
{
    attention_gradients<T> g;
    // y = joined W_O + b_O  ->  d joined = d y W_O^T,  d W_O = joined^T d y,  d b_O = sum over rows d y
    linear_gradients<T> out = linear_backward(d_y, c.joined, *w.w_o, false);
    g.w_o = std::move(out.w);
    if (c.has_bias)
    {
        g.b_o = rules.bias(d_y);
    }
    // joined = combine_heads(O)  ->  d O = split_heads(d joined)
    const array<T> d_heads = split_heads(out.x, c.config.heads);
    // O = attention(Q, K, V)  ->  Chapter 19's backward
    array<T> d_q, d_k, d_v;
    attention_backward(d_heads, c.q, c.k, c.v, c.weights, d_q, d_k, d_v);
    if (c.variant.rope)
    {
        d_q = rules.rope(d_q, c.variant.rope_base, c.variant.position_offset);  // Q = rope(Q)  ->  R(-a) d Q
        d_k = rules.rope(d_k, c.variant.rope_base, c.variant.position_offset);  // K = rope(K)  ->  R(-a) d K
    }
    // Q = split(x W_Q + b_Q)  ->  d (x W_Q + b_Q) = combine(d Q), then as linear_forward; likewise K and V
    const array<T> d_q_lin = combine_heads(d_q), d_k_lin = combine_heads(d_k), d_v_lin = combine_heads(d_v);
    linear_gradients<T> q = linear_backward(d_q_lin, c.x, *w.w_q, false);
    linear_gradients<T> k = linear_backward(d_k_lin, c.x, *w.w_k, false);
    linear_gradients<T> v = linear_backward(d_v_lin, c.x, *w.w_v, false);
    if (c.has_bias)
    {
        g.b_q = rules.bias(d_q_lin), g.b_k = rules.bias(d_k_lin), g.b_v = rules.bias(d_v_lin);
    }
    // x feeds all three projections  ->  d x = the sum of their parts
    g.x = q.x + k.x + v.x;
    g.w_q = std::move(q.w), g.w_k = std::move(k.w), g.w_v = std::move(v.w);
    return g;
}

#define XGRAD_MANUAL_LAYERS(T)                                                                                    \
    template array<T> layernorm_forward(const array<T>&, const array<T>&, const array<T>*, layernorm_cache<T>&); \
    template layernorm_gradients<T> layernorm_backward(const array<T>&, const layernorm_cache<T>&,                \
                                                       const array<T>&);                                         \
    template array<T> rmsnorm_forward(const array<T>&, const array<T>&, rmsnorm_cache<T>&);                       \
    template rmsnorm_gradients<T> rmsnorm_backward(const array<T>&, const rmsnorm_cache<T>&, const array<T>&);    \
    template array<T> rope_forward(const array<T>&, double, std::size_t);                                         \
    template array<T> rope_backward(const array<T>&, double, std::size_t);                                        \
    template array<T> gelu_exact_forward(const array<T>&);                                                        \
    template array<T> gelu_exact_backward(const array<T>&, const array<T>&);                                      \
    template array<T> swiglu_forward(const array<T>&, const array<T>&);                                           \
    template swiglu_gradients<T> swiglu_backward(const array<T>&, const array<T>&, const array<T>&);              \
    template array<T> linear_forward(const array<T>&, const array<T>&, const array<T>*);                          \
    template linear_gradients<T> linear_backward(const array<T>&, const array<T>&, const array<T>&, bool);        \
    template array<T> bias_backward(const array<T>&);                                                             \
    template array<T> causal_self_attention_forward(const array<T>&, const attention_weights<T>&,                 \
                                                    const mha_config&, const attention_variant&,                  \
                                                    attention_cache<T>&);                                         \
    template attention_gradients<T> causal_self_attention_backward(const array<T>&, const attention_cache<T>&,    \
                                                                   const attention_weights<T>&,                  \
                                                                   const attention_rules<T>&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_MANUAL_LAYERS)
}  // namespace xgrad::models::manual
