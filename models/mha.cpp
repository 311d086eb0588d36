#include "models/mha.hpp"

#include <cmath>
#include <random>

#include "autodiff/instantiate.hpp"

namespace xgrad::models
{
void mha_config::validate(const char* op) const
{
    if (d_model == 0 || heads == 0)
    {
        fail(op, "d_model and heads must be positive, got d=" + std::to_string(d_model) +
                     " H=" + std::to_string(heads));
    }
    if (d_model % heads != 0)
    {
        fail(op, "d_model " + std::to_string(d_model) + " is not divisible by heads " + std::to_string(heads));
    }
    if (heads % kv_head_count() != 0)
    {
        fail(op, "heads " + std::to_string(heads) + " is not divisible by kv_heads " +
                     std::to_string(kv_head_count()));
    }
}

template <class T>
mha_parameters<T> mha_parameters<T>::init(const mha_config& config, unsigned seed)
{
    config.validate("mha_parameters::init");
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0 / std::sqrt(static_cast<double>(config.d_model)));
    auto matrix = [&](std::size_t cols, const char* name) {
        array<T> w = array<T>::from_shape({config.d_model, cols});
        for (auto& x : w)
        {
            x = static_cast<T>(normal(rng));
        }
        return parameter<T>(std::move(w), name);
    };
    mha_parameters p;
    p.config = config;
    p.W_Q = matrix(config.d_model, "W_Q");
    p.W_K = matrix(config.kv_width(), "W_K");
    p.W_V = matrix(config.kv_width(), "W_V");
    p.W_O = matrix(config.d_model, "W_O");
    return p;
}

template <class T>
void mha_parameters<T>::zero_grad()
{
    for (auto* p : {&W_Q, &W_K, &W_V, &W_O})
    {
        p->zero_grad();
    }
}

template <class T>
mha_weights<T> bind(tape<T>& t, const mha_parameters<T>& p)
{
    return {t.param(p.W_Q), t.param(p.W_K), t.param(p.W_V), t.param(p.W_O)};
}

template <class T>
var<T> split_heads(const var<T>& x, std::size_t heads)
{
    const shape_t s = x.shape();
    if (s.size() != 3 || heads == 0 || s[2] % heads != 0)
    {
        fail("split_heads", "need (B, T, d) with d divisible by heads=" + std::to_string(heads) + ", got " +
                                shape_str(s));
    }
    const long b = static_cast<long>(s[0]), t = static_cast<long>(s[1]), h = static_cast<long>(heads);
    return ops::permute(ops::reshape(x, {b, t, h, static_cast<long>(s[2] / heads)}), {0, 2, 1, 3});
}

template <class T>
var<T> combine_heads(const var<T>& x)
{
    const shape_t s = x.shape();
    if (s.size() != 4)
    {
        fail("combine_heads", "need (B, H, T, dh), got " + shape_str(s));
    }
    const long b = static_cast<long>(s[0]), t = static_cast<long>(s[2]), d = static_cast<long>(s[1] * s[3]);
    return ops::reshape(ops::permute(x, {0, 2, 1, 3}), {b, t, d});
}

template <class T>
std::pair<var<T>, var<T>> attention(const var<T>& q, const var<T>& k, const var<T>& v, const mask_t* mask)
{
    const shape_t qs = q.shape(), ks = k.shape();
    const std::size_t batch = qs[0], heads = qs[1], tq = qs[2], dh = qs[3], groups = ks[1], tk = ks[2];
    const T scale = T(1) / std::sqrt(static_cast<T>(dh));
    auto softmax = [&](const var<T>& scores) {
        return mask ? ops::masked_softmax(scores, *mask, scale) : ops::softmax(scores, scale);
    };
    if (groups == heads)
    {
        var<T> scores = ops::matmul(q, k, false, true).named("scores");       // (B, H, Tq, Tk)
        var<T> weights = softmax(scores).named("attention");                   // (B, H, Tq, Tk)
        return {ops::matmul(weights, v).named("head_output"), weights};       // (B, H, Tq, dh)
    }
    // Grouped-query: view the H query heads as (G, H/G) so that each key/value head broadcasts over its
    // group in a batched matmul; the matmul's backward sums the group's gradients into it.
    const long B = static_cast<long>(batch), G = static_cast<long>(groups), R = static_cast<long>(heads / groups);
    const long Tq = static_cast<long>(tq), Tk = static_cast<long>(tk), Dh = static_cast<long>(dh);
    var<T> q5 = ops::reshape(q, {B, G, R, Tq, Dh});
    var<T> k5 = ops::reshape(k, {B, G, 1, Tk, Dh});
    var<T> v5 = ops::reshape(v, {B, G, 1, Tk, Dh});
    var<T> scores = ops::reshape(ops::matmul(q5, k5, false, true), {B, G * R, Tq, Tk}).named("scores");
    var<T> weights = softmax(scores).named("attention");
    var<T> out = ops::matmul(ops::reshape(weights, {B, G, R, Tq, Tk}), v5);
    return {ops::reshape(out, {B, G * R, Tq, Dh}).named("head_output"), weights};
}

namespace
{
void check_input(const char* op, const char* name, const shape_t& s, std::size_t d)
{
    if (s.size() != 3 || s[2] != d)
    {
        fail(op, std::string(name) + " must be (B, T, d) with d = " + std::to_string(d) + ", got " + shape_str(s));
    }
}

void check_weight(const char* op, const char* name, const shape_t& s, std::size_t rows, std::size_t cols)
{
    if (s != shape_t{rows, cols})
    {
        fail(op, std::string(name) + " must be " + shape_str({rows, cols}) + ", got " + shape_str(s));
    }
}
}  // namespace

void check_mha_shapes(const char* op, const mha_config& config, const shape_t& xq, const shape_t& xk,
                      const shape_t& xv, const shape_t& w_q, const shape_t& w_k, const shape_t& w_v,
                      const shape_t& w_o)
{
    config.validate(op);
    const std::size_t d = config.d_model;
    check_input(op, "Xq", xq, d);
    check_input(op, "Xk", xk, d);
    check_input(op, "Xv", xv, d);
    if (xk[0] != xq[0] || xv != xk)
    {
        fail(op, "Xq " + shape_str(xq) + ", Xk " + shape_str(xk) + " and Xv " + shape_str(xv) +
                     " must share B, and Xk, Xv must have the same shape");
    }
    check_weight(op, "W_Q", w_q, d, d);
    check_weight(op, "W_K", w_k, d, config.kv_width());
    check_weight(op, "W_V", w_v, d, config.kv_width());
    check_weight(op, "W_O", w_o, d, d);
}

template <class T>
mha_result<T> multi_head_attention(const var<T>& xq, const var<T>& xk, const var<T>& xv, const mha_weights<T>& w,
                                   const mha_config& config, const mha_options& options)
{
    const char* op = "multi_head_attention";
    check_mha_shapes(op, config, xq.shape(), xk.shape(), xv.shape(), w.W_Q.shape(), w.W_K.shape(), w.W_V.shape(),
                     w.W_O.shape());
    const std::size_t batch = xq.shape()[0], tq = xq.shape()[1], tk = xk.shape()[1];
    std::optional<mask_t> mask;
    if (options.fused)
    {
        check_mask(op, options.mask, batch, config.heads, tq, tk);  // ops::attention applies mask and causal
    }
    else
    {
        mask = combined_mask(op, options.mask, options.causal, batch, config.heads, tq, tk);
    }

    // (20.1) projections: (B, T, d) @ (d, d_out)
    var<T> q_linear = ops::matmul(xq, w.W_Q).named("Q_linear");
    var<T> k_linear = ops::matmul(xk, w.W_K).named("K_linear");
    var<T> v_linear = ops::matmul(xv, w.W_V).named("V_linear");
    if (options.fused)
    {
        // The fused op reads the projections' (B, T, H dh) rows in place: no split into heads, no join.
        var<T> joined = ops::attention_token_major(q_linear, k_linear, v_linear, config.heads,
                                                   config.kv_head_count(), options.mask, options.causal)
                            .named("joined");
        return {ops::matmul(joined, w.W_O).named("output"), var<T>()};
    }
    // Listing 20.1: heads are a reshape and a permute
    var<T> q = split_heads(q_linear, config.heads).named("Q");
    var<T> k = split_heads(k_linear, config.kv_head_count()).named("K");
    var<T> v = split_heads(v_linear, config.kv_head_count()).named("V");
    // Chapter 19 per head, all heads in one batched product
    auto [heads, weights] = attention(q, k, v, mask ? &*mask : nullptr);
    var<T> joined = combine_heads(heads).named("joined");
    var<T> output = ops::matmul(joined, w.W_O).named("output");
    return {output, weights};
}

std::uint64_t parameter_count(std::size_t d_model)
{
    return 4ull * d_model * d_model;
}

std::uint64_t parameter_count(const mha_config& c)
{
    c.validate("parameter_count");
    return 2ull * c.d_model * c.d_model + 2ull * c.d_model * c.kv_width();
}

std::uint64_t self_attention_multiply_adds(std::size_t batch, std::size_t length, std::size_t d)
{
    const std::uint64_t b = batch, t = length, dd = d;
    return 4 * b * t * dd * dd + 2 * b * t * t * dd;
}

std::uint64_t cross_attention_multiply_adds(std::size_t batch, std::size_t tq, std::size_t tk, const mha_config& c)
{
    c.validate("cross_attention_multiply_adds");
    const std::uint64_t b = batch, d = c.d_model, kv = c.kv_width();
    return 2 * b * tq * d * d + 2 * b * tk * d * kv + 2 * b * tq * tk * d;
}

#define XGRAD_MHA(T)                                                                                           \
    template struct mha_parameters<T>;                                                                         \
    template mha_weights<T> bind(tape<T>&, const mha_parameters<T>&);                                          \
    template var<T> split_heads(const var<T>&, std::size_t);                                                   \
    template var<T> combine_heads(const var<T>&);                                                              \
    template std::pair<var<T>, var<T>> attention(const var<T>&, const var<T>&, const var<T>&, const mask_t*); \
    template mha_result<T> multi_head_attention(const var<T>&, const var<T>&, const var<T>&,                  \
                                                const mha_weights<T>&, const mha_config&, const mha_options&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_MHA)
}  // namespace xgrad::models
