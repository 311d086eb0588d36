// The hand-derived GPT. Each layer works on rows: an activation (B, T, C) is B T rows of C numbers.
// Products go through kernels::gemm (row-major, transposes as flags); everything else is a plain loop,
// written from the math in the comments and from nothing in ops/. A line marked "broken:" is a
// deliberate mistake, taken only when the caller asks for it (broken_rule, for teaching).
#include "models/gpt_manual.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "autodiff/instantiate.hpp"
#include "kernels/gemm.hpp"

namespace xgrad::models::manual
{
namespace
{
constexpr double layernorm_eps = 1e-5;

template <class T>
std::string shape_of(const array<T>& a)
{
    return shape_str(to_shape(a.shape()));
}

template <class T>
std::size_t width(const array<T>& x)  // C: the length of a row
{
    return x.dimension() == 0 ? 1 : x.shape().back();
}

template <class T>
std::size_t rows(const array<T>& x)  // B T: how many rows of C
{
    return width(x) == 0 ? 0 : x.size() / width(x);
}

// x's shape with its last axis replaced by `last`.
template <class T>
shape_t with_width(const array<T>& x, std::size_t last)
{
    shape_t s = to_shape(x.shape());
    s.back() = last;
    return s;
}

template <class T>
void require_shape(const char* op, const char* name, const array<T>& a, const shape_t& expected)
{
    if (to_shape(a.shape()) != expected)
    {
        fail(op, std::string(name) + " must be " + shape_str(expected) + ", got " + shape_of(a));
    }
}

// x is (B, T, C) for some B and T, with C = `row_width`.
template <class T>
void require_rows(const char* op, const char* name, const array<T>& x, std::size_t row_width)
{
    if (x.dimension() != 3 || x.shape()[2] != row_width)
    {
        fail(op, std::string(name) + " must be (B, T, " + std::to_string(row_width) + "), got " + shape_of(x));
    }
}

template <class T>
array<T> zeros_like(const array<T>& a)
{
    return xt::zeros<T>(a.shape());
}
}  // namespace

// ---- encoder: token and position embeddings ----------------------------------------------------------

template <class T>
array<T> encoder_forward(const array<T>& wte, const array<T>& wpe, const ids_t& tokens)
{
    if (wte.dimension() != 2 || wpe.dimension() != 2 || wpe.shape()[1] != wte.shape()[1])
    {
        fail("encoder_forward", "wte (V, d) and wpe (block_size, d) must share d, got wte " + shape_of(wte) +
                                    " and wpe " + shape_of(wpe));
    }
    if (tokens.dimension() != 2 || tokens.shape()[1] > wpe.shape()[0])
    {
        fail("encoder_forward", "tokens must be (B, T) with T <= " + std::to_string(wpe.shape()[0]) + ", got " +
                                    shape_str(to_shape(tokens.shape())));
    }
    const std::size_t batch = tokens.shape()[0], length = tokens.shape()[1], d = wte.shape()[1];
    const auto vocab = static_cast<std::int64_t>(wte.shape()[0]);
    array<T> out = array<T>::from_shape({batch, length, d});
    for (std::size_t b = 0; b < batch; ++b)
    {
        for (std::size_t t = 0; t < length; ++t)
        {
            const std::int64_t id = tokens(b, t);
            if (id < 0 || id >= vocab)
            {
                fail("encoder_forward", "token " + std::to_string(id) + " at (" + std::to_string(b) + ", " +
                                            std::to_string(t) + ") is outside [0, " + std::to_string(vocab) + ")");
            }
            const T* token_row = &wte(static_cast<std::size_t>(id), 0);
            const T* position_row = &wpe(t, 0);
            T* o = &out(b, t, 0);
            for (std::size_t i = 0; i < d; ++i)
            {
                o[i] = token_row[i] + position_row[i];  // out[b, t] = wte[tokens[b, t]] + wpe[t]
            }
        }
    }
    return out;
}

template <class T>
void encoder_backward(array<T>& d_wte, array<T>& d_wpe, const array<T>& d_out, const ids_t& tokens, bool broken)
{
    if (tokens.dimension() != 2 || d_wte.dimension() != 2 || d_wpe.dimension() != 2 ||
        d_wpe.shape()[1] != d_wte.shape()[1] || tokens.shape()[1] > d_wpe.shape()[0] ||
        std::any_of(tokens.begin(), tokens.end(),
                    [&](std::int64_t id) { return id < 0 || id >= static_cast<std::int64_t>(d_wte.shape()[0]); }))
    {
        fail("encoder_backward", "tokens (B, T) must index the rows of d_wte " + shape_of(d_wte) +
                                     " and T fit d_wpe " + shape_of(d_wpe) + ", got tokens " +
                                     shape_str(to_shape(tokens.shape())));
    }
    const std::size_t batch = tokens.shape()[0], length = tokens.shape()[1], d = d_wte.shape()[1];
    require_shape("encoder_backward", "d_out", d_out, {batch, length, d});
    for (std::size_t b = 0; b < batch; ++b)
    {
        for (std::size_t t = 0; t < length; ++t)
        {
            const T* g = &d_out(b, t, 0);
            T* token_row = &d_wte(static_cast<std::size_t>(tokens(b, t)), 0);
            T* position_row = &d_wpe(t, 0);
            for (std::size_t i = 0; i < d; ++i)
            {
                // out[b, t] = wte[tokens[b, t]] + ...  ->  d wte[tokens[b, t]] += d out[b, t]
                token_row[i] = broken ? g[i] : token_row[i] + g[i];  // broken: `=` where `+=` belongs
                // out[b, t] = ... + wpe[t]  ->  d wpe[t] += d out[b, t], summed over the batch
                position_row[i] += g[i];
            }
        }
    }
}

// ---- layer norm ---------------------------------------------------------------------------------------

template <class T>
array<T> layernorm_forward(const array<T>& x, const array<T>& weight, const array<T>& bias, layernorm_cache<T>& cache)
{
    const std::size_t c = width(x), n = rows(x);
    require_shape("layernorm_forward", "weight", weight, {c});
    require_shape("layernorm_forward", "bias", bias, {c});
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
        const T rstd = T(1) / std::sqrt(var + static_cast<T>(layernorm_eps));  // rstd = 1 / sqrt(var + eps)
        for (std::size_t i = 0; i < c; ++i)
        {
            x_hat[i] = (xr[i] - mean) * rstd;              // x_hat = (x - mean) rstd
            yr[i] = x_hat[i] * weight(i) + bias(i);        // y = x_hat weight + bias
        }
        cache.rstd.data()[r] = rstd;
    }
    return y;
}

template <class T>
layernorm_gradients<T> layernorm_backward(const array<T>& d_y, const layernorm_cache<T>& cache, const array<T>& weight,
                                          bool broken)
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
            const T variance_term = broken ? T(0) : x_hat[i] * mean_d_x_hat_x_hat;  // broken: term dropped
            dx[i] = rstd * (d_x_hat[i] - mean_d_x_hat - variance_term);
        }
    }
    return g;
}

// ---- matmul + bias --------------------------------------------------------------------------------

template <class T>
array<T> matmul_bias_forward(const array<T>& x, const array<T>& w, const array<T>& b)
{
    if (w.dimension() != 2)
    {
        fail("matmul_bias_forward", "W must be (C, OC), got " + shape_of(w));
    }
    const std::size_t c = w.shape()[0], oc = w.shape()[1], n = rows(x);
    require_rows("matmul_bias_forward", "x", x, c);
    require_shape("matmul_bias_forward", "b", b, {oc});
    array<T> out = array<T>::from_shape(with_width(x, oc));
    kernels::gemm(false, false, n, oc, c, x.data(), c, w.data(), oc, T(0), out.data(), oc);  // out = x W
    for (std::size_t r = 0; r < n; ++r)
    {
        T* o = out.data() + r * oc;
        for (std::size_t j = 0; j < oc; ++j)
        {
            o[j] += b(j);  // out += b, on every row
        }
    }
    return out;
}

template <class T>
matmul_bias_gradients<T> matmul_bias_backward(const array<T>& d_out, const array<T>& x, const array<T>& w, bool broken)
{
    const std::size_t c = w.shape()[0], oc = w.shape()[1], n = rows(x);
    require_shape("matmul_bias_backward", "d_out", d_out, with_width(x, oc));
    matmul_bias_gradients<T> g;
    g.x = array<T>::from_shape(x.shape());
    g.w = array<T>::from_shape({c, oc});
    g.b = xt::zeros<T>({oc});
    // out = x W  ->  d x = d out W^T: a sum over the OC outputs of each row
    const std::size_t summed = broken ? std::min(c, oc) : oc;  // broken: the loop stops at C, not OC
    kernels::gemm(false, true, n, c, summed, d_out.data(), oc, w.data(), oc, T(0), g.x.data(), c);
    // out = x W  ->  d W = x^T d out, summed over all B T rows
    kernels::gemm(true, false, c, oc, n, x.data(), c, d_out.data(), oc, T(0), g.w.data(), oc);
    for (std::size_t r = 0; r < n; ++r)
    {
        const T* dy = d_out.data() + r * oc;
        for (std::size_t j = 0; j < oc; ++j)
        {
            g.b(j) += dy[j];  // out += b on every row  ->  d b = sum over rows of d out
        }
    }
    return g;
}

// ---- GELU (tanh approximation) ----------------------------------------------------------------------

namespace
{
template <class T>
constexpr T gelu_k()
{
    return static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
}
template <class T>
constexpr T gelu_c()
{
    return static_cast<T>(0.044715);
}
}  // namespace

template <class T>
array<T> gelu_forward(const array<T>& x)
{
    array<T> y = array<T>::from_shape(x.shape());
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        const T v = x.data()[i];
        const T u = gelu_k<T>() * (v + gelu_c<T>() * v * v * v);  // u = k (x + c x^3)
        y.data()[i] = T(0.5) * v * (T(1) + std::tanh(u));          // y = x (1 + tanh u) / 2
    }
    return y;
}

template <class T>
array<T> gelu_backward(const array<T>& d_y, const array<T>& x, bool broken)
{
    require_shape("gelu_backward", "d_y", d_y, to_shape(x.shape()));
    array<T> d_x = array<T>::from_shape(x.shape());
    const T cube_slope = broken ? T(1) : T(3);  // broken: d(c x^3)/dx taken as c x^2
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        const T v = x.data()[i];
        const T th = std::tanh(gelu_k<T>() * (v + gelu_c<T>() * v * v * v));
        // u = k (x + c x^3)  ->  du/dx = k (1 + 3 c x^2)
        const T du = gelu_k<T>() * (T(1) + cube_slope * gelu_c<T>() * v * v);
        // y = x (1 + tanh u) / 2  ->  dy/dx = (1 + tanh u) / 2 + x (1 - tanh^2 u) du/dx / 2
        d_x.data()[i] = d_y.data()[i] * (T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * du);
    }
    return d_x;
}

// ---- causal self-attention (manual::mha_forward and mha_backward) ------------------------------------

template <class T>
mha_forward_result<T> self_attention_forward(const array<T>& x, const gpt_block_parameters<T>& block,
                                             const mha_config& config)
{
    // Q = X W_Q, K = X W_K, V = X W_V: one X for all three
    return mha_forward(x, x, x, block.W_Q.value(), block.W_K.value(), block.W_V.value(), block.W_O.value(), config,
                       {nullptr, /*causal=*/true});
}

template <class T>
self_attention_gradients<T> self_attention_backward(const array<T>& d_out, const mha_cache<T>& cache, bool broken)
{
    mha_gradients<T> g = mha_backward(d_out, cache);
    // X feeds the query, key and value projections  ->  d X = d Xq + d Xk + d Xv
    array<T> d_x = broken ? array<T>(g.xq + g.xv) : array<T>(g.xq + g.xk + g.xv);  // broken: d Xk forgotten
    return {std::move(d_x), std::move(g.w_q), std::move(g.w_k), std::move(g.w_v), std::move(g.w_o)};
}

// ---- residual -----------------------------------------------------------------------------------------

template <class T>
array<T> residual_forward(const array<T>& x, const array<T>& branch)
{
    require_shape("residual_forward", "branch", branch, to_shape(x.shape()));
    array<T> out = array<T>::from_shape(x.shape());
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        out.data()[i] = x.data()[i] + branch.data()[i];  // out = x + branch(x)
    }
    return out;
}

template <class T>
array<T> residual_backward(const array<T>& d_out, const array<T>& d_x_through_branch, bool broken)
{
    require_shape("residual_backward", "d_x_through_branch", d_x_through_branch, to_shape(d_out.shape()));
    array<T> d_x = array<T>::from_shape(d_out.shape());
    for (std::size_t i = 0; i < d_out.size(); ++i)
    {
        // out = x + branch(x)  ->  d x = d out (the skip) + d out carried back through the branch
        d_x.data()[i] = broken ? d_x_through_branch.data()[i]  // broken: the skip's d out forgotten
                               : d_out.data()[i] + d_x_through_branch.data()[i];
    }
    return d_x;
}

// ---- the tied output head -------------------------------------------------------------------------

template <class T>
array<T> tied_head_forward(const array<T>& x, const array<T>& wte)
{
    if (wte.dimension() != 2)
    {
        fail("tied_head_forward", "wte must be (V, d), got " + shape_of(wte));
    }
    const std::size_t vocab = wte.shape()[0], d = wte.shape()[1], n = rows(x);
    require_rows("tied_head_forward", "x", x, d);
    array<T> logits = array<T>::from_shape(with_width(x, vocab));
    kernels::gemm(false, true, n, vocab, d, x.data(), d, wte.data(), d, T(0), logits.data(), vocab);  // x wte^T
    return logits;
}

template <class T>
array<T> tied_head_backward(const array<T>& d_logits, const array<T>& x, const array<T>& wte, array<T>& d_wte)
{
    const std::size_t vocab = wte.shape()[0], d = wte.shape()[1], n = rows(x);
    require_shape("tied_head_backward", "d_logits", d_logits, with_width(x, vocab));
    require_shape("tied_head_backward", "d_wte", d_wte, to_shape(wte.shape()));
    array<T> d_x = array<T>::from_shape(x.shape());
    // logits = x wte^T  ->  d x = d logits wte
    kernels::gemm(false, false, n, d, vocab, d_logits.data(), vocab, wte.data(), d, T(0), d_x.data(), d);
    // logits = x wte^T  ->  d wte += d logits^T x  (added to: the encoder's part comes later)
    kernels::gemm(true, false, vocab, d, n, d_logits.data(), vocab, x.data(), d, T(1), d_wte.data(), d);
    return d_x;
}

// ---- softmax cross-entropy ------------------------------------------------------------------------

template <class T>
T softmax_cross_entropy_forward(const array<T>& logits, const ids_t& targets, cross_entropy_cache<T>& cache)
{
    const std::size_t vocab = width(logits), n = rows(logits);
    if (targets.size() != n || logits.dimension() != targets.dimension() + 1 ||
        !std::equal(targets.shape().begin(), targets.shape().end(), logits.shape().begin()))
    {
        fail("softmax_cross_entropy_forward", "targets must be logits' shape without the last axis; logits " +
                                                  shape_of(logits) + ", targets " + shape_str(to_shape(targets.shape())));
    }
    cache.probs = array<T>::from_shape(logits.shape());
    cache.targets = targets;
    cache.kept = 0;
    T total = 0;
    for (std::size_t r = 0; r < n; ++r)
    {
        const T* z = logits.data() + r * vocab;
        T* p = cache.probs.data() + r * vocab;
        const T top = *std::max_element(z, z + vocab);
        T sum = 0;
        for (std::size_t j = 0; j < vocab; ++j)
        {
            p[j] = std::exp(z[j] - top);
            sum += p[j];
        }
        for (std::size_t j = 0; j < vocab; ++j)
        {
            p[j] /= sum;  // p = softmax(z) = exp(z - max) / sum exp(z - max)
        }
        const std::int64_t target = targets.data()[r];
        if (target == -1)
        {
            continue;  // ignored position
        }
        if (target < 0 || target >= static_cast<std::int64_t>(vocab))
        {
            fail("softmax_cross_entropy_forward", "target " + std::to_string(target) + " at row " +
                                                      std::to_string(r) + " is neither -1 nor in [0, " +
                                                      std::to_string(vocab) + ")");
        }
        total += std::log(sum) + top - z[target];  // -log p[target] = log sum exp(z - max) + max - z[target]
        ++cache.kept;
    }
    return cache.kept == 0 ? T(0) : total / static_cast<T>(cache.kept);  // loss = mean over kept positions
}

template <class T>
array<T> softmax_cross_entropy_backward(const cross_entropy_cache<T>& cache, bool broken)
{
    const std::size_t vocab = width(cache.probs), n = rows(cache.probs);
    array<T> d_logits = xt::zeros<T>(cache.probs.shape());
    // loss = sum over kept rows of -log p[target], divided by the kept count: every row's share is 1 / kept
    const T share = T(1) / static_cast<T>(broken ? n : cache.kept);  // broken: divides by every row
    for (std::size_t r = 0; r < n; ++r)
    {
        const std::int64_t target = cache.targets.data()[r];
        if (target == -1)
        {
            continue;  // an ignored row adds nothing to the loss: zero gradient
        }
        const T* p = cache.probs.data() + r * vocab;
        T* dz = d_logits.data() + r * vocab;
        for (std::size_t j = 0; j < vocab; ++j)
        {
            // -log softmax(z)[target]  ->  d z_j = p_j - [j == target], times the row's share
            dz[j] = (p[j] - (static_cast<std::int64_t>(j) == target ? T(1) : T(0))) * share;
        }
    }
    return d_logits;
}

// ---- names ------------------------------------------------------------------------------------------

namespace
{
std::string block_name(std::size_t i, const std::string& rest)
{
    return "blocks." + std::to_string(i) + "." + rest;
}

// SPEC's table: every parameter's name and shape, in its order.
std::vector<std::pair<std::string, shape_t>> parameter_shapes(const gpt_config& c)
{
    const std::size_t d = c.d_model, kv = c.attention().kv_width();
    std::vector<std::pair<std::string, shape_t>> list = {{"wte", {c.vocab_size, d}}, {"wpe", {c.block_size, d}}};
    for (std::size_t i = 0; i < c.layers; ++i)
    {
        for (const auto& [rest, shape] : std::vector<std::pair<std::string, shape_t>>{
                 {"ln_1.weight", {d}}, {"ln_1.bias", {d}}, {"attn.W_Q", {d, d}}, {"attn.W_K", {d, kv}},
                 {"attn.W_V", {d, kv}}, {"attn.W_O", {d, d}}, {"ln_2.weight", {d}}, {"ln_2.bias", {d}},
                 {"mlp.W_fc", {d, 4 * d}}, {"mlp.b_fc", {4 * d}}, {"mlp.W_proj", {4 * d, d}}, {"mlp.b_proj", {d}}})
        {
            list.emplace_back(block_name(i, rest), shape);
        }
    }
    list.push_back({"ln_f.weight", {d}});
    list.push_back({"ln_f.bias", {d}});
    return list;
}
}  // namespace

std::vector<std::string> gpt_parameter_names(const gpt_config& config)
{
    std::vector<std::string> names;
    for (const auto& entry : parameter_shapes(config))
    {
        names.push_back(entry.first);
    }
    return names;
}

std::vector<std::string> gpt_activation_names(const gpt_config& config)
{
    std::vector<std::string> names = {"embed"};
    for (std::size_t i = 0; i < config.layers; ++i)
    {
        for (const char* rest : {"ln_1", "attn", "res_1", "ln_2", "mlp_hidden", "mlp_gelu", "mlp", "res_2"})
        {
            names.push_back(block_name(i, rest));
        }
    }
    names.push_back("ln_f");
    names.push_back("logits");
    return names;
}

std::vector<std::string> gpt_backward_order(const gpt_config& config)
{
    const std::size_t last = config.layers - 1;
    std::vector<std::string> names = {"logits", "ln_f", block_name(last, "res_2"), "ln_f.weight", "ln_f.bias"};
    for (std::size_t i = config.layers; i-- > 0;)
    {
        for (const char* rest : {"mlp", "mlp_gelu", "mlp.W_proj", "mlp.b_proj", "mlp_hidden", "ln_2", "mlp.W_fc",
                                 "mlp.b_fc", "res_1", "ln_2.weight", "ln_2.bias", "attn", "ln_1", "attn.W_Q",
                                 "attn.W_K", "attn.W_V", "attn.W_O"})
        {
            names.push_back(block_name(i, rest));
        }
        names.push_back(i > 0 ? block_name(i - 1, "res_2") : "embed");
        names.push_back(block_name(i, "ln_1.weight"));
        names.push_back(block_name(i, "ln_1.bias"));
    }
    names.push_back("wte");
    names.push_back("wpe");
    return names;
}

template <class T>
std::vector<std::pair<std::string, parameter<T>>> named_parameters(const gpt_parameters<T>& p)
{
    std::vector<std::pair<std::string, parameter<T>>> list = {{"wte", p.wte}, {"wpe", p.wpe}};
    for (std::size_t i = 0; i < p.blocks.size(); ++i)
    {
        const gpt_block_parameters<T>& b = p.blocks[i];
        for (const auto& [rest, handle] : std::vector<std::pair<std::string, parameter<T>>>{
                 {"ln_1.weight", b.ln_1_weight}, {"ln_1.bias", b.ln_1_bias}, {"attn.W_Q", b.W_Q},
                 {"attn.W_K", b.W_K}, {"attn.W_V", b.W_V}, {"attn.W_O", b.W_O}, {"ln_2.weight", b.ln_2_weight},
                 {"ln_2.bias", b.ln_2_bias}, {"mlp.W_fc", b.W_fc}, {"mlp.b_fc", b.b_fc}, {"mlp.W_proj", b.W_proj},
                 {"mlp.b_proj", b.b_proj}})
        {
            list.emplace_back(block_name(i, rest), handle);
        }
    }
    list.emplace_back("ln_f.weight", p.ln_f_weight);
    list.emplace_back("ln_f.bias", p.ln_f_bias);
    return list;
}

// ---- broken rules -----------------------------------------------------------------------------------

namespace
{
const std::vector<std::pair<broken_rule, const char*>>& rule_names()
{
    static const std::vector<std::pair<broken_rule, const char*>> names = {
        {broken_rule::none, "none"},           {broken_rule::encoder, "encoder"},
        {broken_rule::layer_norm, "layer_norm"}, {broken_rule::attention, "attention"},
        {broken_rule::residual, "residual"},   {broken_rule::matmul_bias, "matmul_bias"},
        {broken_rule::gelu, "gelu"},           {broken_rule::cross_entropy, "cross_entropy"}};
    return names;
}
}  // namespace

const char* to_string(broken_rule rule)
{
    for (const auto& [r, name] : rule_names())
    {
        if (r == rule)
        {
            return name;
        }
    }
    return "unknown";
}

std::optional<broken_rule> broken_rule_from_string(const std::string& name)
{
    for (const auto& [r, n] : rule_names())
    {
        if (name == n)
        {
            return r;
        }
    }
    return std::nullopt;
}

const std::vector<broken_rule>& breakable_rules()
{
    static const std::vector<broken_rule> rules = {broken_rule::encoder,  broken_rule::layer_norm,
                                                   broken_rule::attention, broken_rule::residual,
                                                   broken_rule::matmul_bias, broken_rule::gelu,
                                                   broken_rule::cross_entropy};
    return rules;
}

std::string describe(broken_rule rule, std::size_t layers)
{
    const std::string last = "blocks." + std::to_string(layers == 0 ? 0 : layers - 1) + ".";
    switch (rule)
    {
    case broken_rule::none: return "nothing broken";
    case broken_rule::encoder:
        return "encoder_backward assigns d wte[token] = d out instead of adding (repeated tokens and the head's "
               "part of d wte are lost)";
    case broken_rule::layer_norm:
        return "layernorm_backward of " + last + "ln_2 forgets the - x_hat * mean(d x_hat * x_hat) term";
    case broken_rule::attention:
        return "self_attention_backward of " + last + "attn forgets the key path: d x = d Xq + d Xv";
    case broken_rule::residual:
        return "residual_backward of " + last + "res_1 forgets the skip: d x = the branch's part only";
    case broken_rule::matmul_bias:
        return "matmul_bias_backward of " + last + "mlp.W_fc sums d x over the first d of the 4d outputs only";
    case broken_rule::gelu:
        return "gelu_backward of " + last + "mlp_gelu differentiates c x^3 as c x^2";
    case broken_rule::cross_entropy:
        return "softmax_cross_entropy_backward divides by every position, ignored ones too, not by the kept count";
    }
    return "unknown";
}

// ---- the whole model --------------------------------------------------------------------------------

namespace
{
template <class T>
void check_inputs(const gpt_parameters<T>& p, const ids_t& tokens, const ids_t* targets)
{
    const char* op = "gpt_forward";
    const gpt_config& c = p.config;
    if (c.vocab_size == 0 || c.block_size == 0 || c.layers == 0)
    {
        fail(op, "vocab_size, block_size and layers must be positive, got V=" + std::to_string(c.vocab_size) +
                     " block_size=" + std::to_string(c.block_size) + " L=" + std::to_string(c.layers));
    }
    c.attention().validate(op);
    gpt_config standard;
    standard.d_model = c.d_model;
    if (variant_metadata(c) != variant_metadata(standard))
    {
        fail(op, "the hand-derived backward covers the default model only (norm = layernorm, position = learned, "
                 "mlp = gelu_tanh, mlp_hidden = 4 d, bias = mlp, tied_head = true)");
    }
    if (p.blocks.size() != c.layers)
    {
        fail(op, "the parameters hold " + std::to_string(p.blocks.size()) + " blocks for " +
                     std::to_string(c.layers) + " layers");
    }
    const auto expected = parameter_shapes(c);
    const auto actual = named_parameters(p);
    for (std::size_t k = 0; k < expected.size(); ++k)
    {
        require_shape(op, expected[k].first.c_str(), actual[k].second.value(), expected[k].second);
    }
    const shape_t ts = to_shape(tokens.shape());
    if (ts.size() != 2 || ts[0] == 0 || ts[1] == 0 || ts[1] > c.block_size)
    {
        fail(op, "tokens must be (B, T) with B >= 1 and 1 <= T <= block_size = " + std::to_string(c.block_size) +
                     ", got " + shape_str(ts));
    }
    for (std::size_t k = 0; k < tokens.size(); ++k)
    {
        const std::int64_t id = tokens.data()[k];
        if (id < 0 || id >= static_cast<std::int64_t>(c.vocab_size))
        {
            fail(op, "token " + std::to_string(id) + " at (" + std::to_string(k / ts[1]) + ", " +
                         std::to_string(k % ts[1]) + ") is outside [0, " + std::to_string(c.vocab_size) + ")");
        }
    }
    if (targets == nullptr)
    {
        return;
    }
    if (to_shape(targets->shape()) != ts)
    {
        fail(op, "targets must have the tokens' shape " + shape_str(ts) + ", got " +
                     shape_str(to_shape(targets->shape())));
    }
    for (std::size_t k = 0; k < targets->size(); ++k)
    {
        const std::int64_t id = targets->data()[k];
        if (id < -1 || id >= static_cast<std::int64_t>(c.vocab_size))
        {
            fail(op, "target " + std::to_string(id) + " at (" + std::to_string(k / ts[1]) + ", " +
                         std::to_string(k % ts[1]) + ") is neither -1 nor in [0, " +
                         std::to_string(c.vocab_size) + ")");
        }
    }
}
}  // namespace

template <class T>
gpt_forward_result<T> gpt_forward(const gpt_parameters<T>& p, const ids_t& tokens, const ids_t* targets)
{
    check_inputs(p, tokens, targets);
    gpt_forward_result<T> r;
    gpt_cache<T>& cache = r.cache;
    cache.params = p;
    cache.tokens = tokens;
    auto named = [&r](std::string name, const array<T>& value) { r.activations.emplace_back(std::move(name), value); };

    array<T> x = encoder_forward(p.wte.value(), p.wpe.value(), tokens);  // x = wte[tokens] + wpe[0 .. T-1]
    named("embed", x);
    for (std::size_t i = 0; i < p.config.layers; ++i)
    {
        const gpt_block_parameters<T>& w = p.blocks[i];
        block_cache<T>& c = cache.blocks.emplace_back();
        // x = x + MHA(LN(x; ln_1))
        c.ln_1_out = layernorm_forward(x, w.ln_1_weight.value(), w.ln_1_bias.value(), c.ln_1);
        named(block_name(i, "ln_1"), c.ln_1_out);
        mha_forward_result<T> attn = self_attention_forward(c.ln_1_out, w, p.config.attention());
        c.attn = std::move(attn.cache);
        named(block_name(i, "attn"), attn.output);
        x = residual_forward(x, attn.output);
        named(block_name(i, "res_1"), x);
        // x = x + GELU(LN(x; ln_2) W_fc + b_fc) W_proj + b_proj
        c.ln_2_out = layernorm_forward(x, w.ln_2_weight.value(), w.ln_2_bias.value(), c.ln_2);
        named(block_name(i, "ln_2"), c.ln_2_out);
        c.hidden = matmul_bias_forward(c.ln_2_out, w.W_fc.value(), w.b_fc.value());
        named(block_name(i, "mlp_hidden"), c.hidden);
        c.gelu_out = gelu_forward(c.hidden);
        named(block_name(i, "mlp_gelu"), c.gelu_out);
        const array<T> mlp = matmul_bias_forward(c.gelu_out, w.W_proj.value(), w.b_proj.value());
        named(block_name(i, "mlp"), mlp);
        x = residual_forward(x, mlp);
        named(block_name(i, "res_2"), x);
    }
    // logits = LN(x; ln_f) wte^T
    cache.ln_f_out = layernorm_forward(x, p.ln_f_weight.value(), p.ln_f_bias.value(), cache.ln_f);
    named("ln_f", cache.ln_f_out);
    r.logits = tied_head_forward(cache.ln_f_out, p.wte.value());
    named("logits", r.logits);
    if (targets != nullptr)
    {
        cross_entropy_cache<T>& ce = cache.loss.emplace();
        r.loss = softmax_cross_entropy_forward(r.logits, *targets, ce);
        r.has_loss = true;
    }
    return r;
}

template <class T>
gpt_gradients<T> gpt_backward(const gpt_cache<T>& cache, broken_rule broken)
{
    if (!cache.loss)
    {
        fail("gpt_backward", "the forward pass was given no targets, so there is no loss to differentiate");
    }
    const gpt_parameters<T>& p = cache.params;
    const std::size_t last = p.config.layers - 1;
    gpt_gradients<T> g;
    g.config = p.config;
    auto done = [&g](std::string name, const array<T>& grad) { g.in_backward_order.emplace_back(std::move(name), grad); };
    array<T> d_wte = zeros_like(p.wte.value());
    array<T> d_wpe = zeros_like(p.wpe.value());

    // loss = cross_entropy(logits, targets)
    const array<T> d_logits = softmax_cross_entropy_backward(*cache.loss, broken == broken_rule::cross_entropy);
    done("logits", d_logits);
    // logits = ln_f wte^T
    const array<T> d_ln_f = tied_head_backward(d_logits, cache.ln_f_out, p.wte.value(), d_wte);
    done("ln_f", d_ln_f);
    // ln_f = LN(x; ln_f)
    layernorm_gradients<T> ln_f = layernorm_backward(d_ln_f, cache.ln_f, p.ln_f_weight.value());
    array<T> d_x = std::move(ln_f.x);
    done(block_name(last, "res_2"), d_x);
    done("ln_f.weight", ln_f.weight);
    done("ln_f.bias", ln_f.bias);

    for (std::size_t i = p.config.layers; i-- > 0;)
    {
        const gpt_block_parameters<T>& w = p.blocks[i];
        const block_cache<T>& c = cache.blocks[i];
        auto breaks = [&](broken_rule rule) { return broken == rule && i == last; };
        const array<T> d_res_2 = std::move(d_x);
        // res_2 = res_1 + mlp  ->  d mlp = d res_2
        done(block_name(i, "mlp"), d_res_2);
        // mlp = mlp_gelu W_proj + b_proj
        matmul_bias_gradients<T> proj = matmul_bias_backward(d_res_2, c.gelu_out, w.W_proj.value());
        done(block_name(i, "mlp_gelu"), proj.x);
        done(block_name(i, "mlp.W_proj"), proj.w);
        done(block_name(i, "mlp.b_proj"), proj.b);
        // mlp_gelu = GELU(mlp_hidden)
        const array<T> d_hidden = gelu_backward(proj.x, c.hidden, breaks(broken_rule::gelu));
        done(block_name(i, "mlp_hidden"), d_hidden);
        // mlp_hidden = ln_2 W_fc + b_fc
        matmul_bias_gradients<T> fc =
            matmul_bias_backward(d_hidden, c.ln_2_out, w.W_fc.value(), breaks(broken_rule::matmul_bias));
        done(block_name(i, "ln_2"), fc.x);
        done(block_name(i, "mlp.W_fc"), fc.w);
        done(block_name(i, "mlp.b_fc"), fc.b);
        // ln_2 = LN(res_1; ln_2), and res_2 = res_1 + mlp(ln_2)
        layernorm_gradients<T> ln_2 =
            layernorm_backward(fc.x, c.ln_2, w.ln_2_weight.value(), breaks(broken_rule::layer_norm));
        const array<T> d_res_1 = residual_backward(d_res_2, ln_2.x);
        done(block_name(i, "res_1"), d_res_1);
        done(block_name(i, "ln_2.weight"), ln_2.weight);
        done(block_name(i, "ln_2.bias"), ln_2.bias);
        // res_1 = x + attn  ->  d attn = d res_1
        done(block_name(i, "attn"), d_res_1);
        // attn = MHA(ln_1)
        self_attention_gradients<T> attn = self_attention_backward(d_res_1, c.attn, breaks(broken_rule::attention));
        done(block_name(i, "ln_1"), attn.x);
        done(block_name(i, "attn.W_Q"), attn.w_q);
        done(block_name(i, "attn.W_K"), attn.w_k);
        done(block_name(i, "attn.W_V"), attn.w_v);
        done(block_name(i, "attn.W_O"), attn.w_o);
        // ln_1 = LN(x; ln_1), and res_1 = x + attn(ln_1)
        layernorm_gradients<T> ln_1 = layernorm_backward(attn.x, c.ln_1, w.ln_1_weight.value());
        d_x = residual_backward(d_res_1, ln_1.x, breaks(broken_rule::residual));
        done(i > 0 ? block_name(i - 1, "res_2") : "embed", d_x);
        done(block_name(i, "ln_1.weight"), ln_1.weight);
        done(block_name(i, "ln_1.bias"), ln_1.bias);
    }
    // embed = wte[tokens] + wpe
    encoder_backward(d_wte, d_wpe, d_x, cache.tokens, broken == broken_rule::encoder);
    done("wte", d_wte);
    done("wpe", d_wpe);
    return g;
}

template <class T>
const array<T>& gpt_gradients<T>::of(const std::string& name) const
{
    for (const auto& [n, grad] : in_backward_order)
    {
        if (n == name)
        {
            return grad;
        }
    }
    throw std::out_of_range("gpt_gradients: no gradient named '" + name + "'");
}

template <class T>
std::vector<std::pair<std::string, array<T>>> gpt_gradients<T>::parameters() const
{
    std::vector<std::pair<std::string, array<T>>> list;
    for (const std::string& name : gpt_parameter_names(config))
    {
        list.emplace_back(name, of(name));
    }
    return list;
}

#define XGRAD_GPT_MANUAL(T)                                                                                       \
    template array<T> encoder_forward(const array<T>&, const array<T>&, const ids_t&);                           \
    template void encoder_backward(array<T>&, array<T>&, const array<T>&, const ids_t&, bool);                   \
    template array<T> layernorm_forward(const array<T>&, const array<T>&, const array<T>&, layernorm_cache<T>&); \
    template layernorm_gradients<T> layernorm_backward(const array<T>&, const layernorm_cache<T>&,                \
                                                       const array<T>&, bool);                                   \
    template array<T> matmul_bias_forward(const array<T>&, const array<T>&, const array<T>&);                    \
    template matmul_bias_gradients<T> matmul_bias_backward(const array<T>&, const array<T>&, const array<T>&,    \
                                                           bool);                                                \
    template array<T> gelu_forward(const array<T>&);                                                             \
    template array<T> gelu_backward(const array<T>&, const array<T>&, bool);                                     \
    template mha_forward_result<T> self_attention_forward(const array<T>&, const gpt_block_parameters<T>&,       \
                                                          const mha_config&);                                    \
    template self_attention_gradients<T> self_attention_backward(const array<T>&, const mha_cache<T>&, bool);    \
    template array<T> residual_forward(const array<T>&, const array<T>&);                                        \
    template array<T> residual_backward(const array<T>&, const array<T>&, bool);                                 \
    template array<T> tied_head_forward(const array<T>&, const array<T>&);                                       \
    template array<T> tied_head_backward(const array<T>&, const array<T>&, const array<T>&, array<T>&);          \
    template T softmax_cross_entropy_forward(const array<T>&, const ids_t&, cross_entropy_cache<T>&);            \
    template array<T> softmax_cross_entropy_backward(const cross_entropy_cache<T>&, bool);                       \
    template gpt_forward_result<T> gpt_forward(const gpt_parameters<T>&, const ids_t&, const ids_t*);            \
    template gpt_gradients<T> gpt_backward(const gpt_cache<T>&, broken_rule);                                    \
    template struct gpt_gradients<T>;                                                                            \
    template std::vector<std::pair<std::string, parameter<T>>> named_parameters(const gpt_parameters<T>&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_GPT_MANUAL)
}  // namespace xgrad::models::manual
