// The GPT's layers composed from ops (see layers.hpp); each function is its own forward's math.
#include "models/layers.hpp"

#include <cmath>

#include "autodiff/instantiate.hpp"
#include "ops/composed.hpp"

namespace xgrad::models
{
// x W
template <class T>
var<T> linear(const var<T>& x, const var<T>& weight)
{
    return ops::matmul(x, weight);
}

// x W + b
template <class T>
var<T> linear(const var<T>& x, const var<T>& weight, const var<T>& bias, bool fused)
{
    if (!bias.valid())
    {
        return ops::matmul(x, weight);
    }
    return fused ? ops::linear(x, weight, bias) : ops::composed::linear(x, weight, bias);
}

// (x - mean) / sqrt(var + 1e-5) * weight + bias
template <class T>
var<T> layer_norm(const var<T>& x, const var<T>& weight, const var<T>& bias, bool fused)
{
    if (bias.valid())
    {
        return fused ? ops::layer_norm(x, weight, bias) : ops::composed::layer_norm(x, weight, bias);
    }
    // No bias: LayerNorm with a zero bias, which the tape records as a constant.
    array<T> zero = xt::zeros<T>(weight.shape());
    const var<T> none = constant_like(weight, std::move(zero), "no_bias");
    return fused ? ops::layer_norm(x, weight, none) : ops::composed::layer_norm(x, weight, none);
}

// x / sqrt(mean(x^2) + 1e-5) * weight
template <class T>
var<T> rms_norm(const var<T>& x, const var<T>& weight, bool fused)
{
    return fused ? ops::rms_norm(x, weight) : ops::composed::rms_norm(x, weight);
}

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class T>
var<T> gelu(const var<T>& x, bool fused)
{
    return fused ? ops::gelu(x) : ops::composed::gelu(x);
}

// 0.5 x (1 + erf(x / sqrt 2))
template <class T>
var<T> gelu_exact(const var<T>& x, bool fused)
{
    return fused ? ops::gelu_exact(x) : ops::composed::gelu_exact(x);
}

// silu(gate) * up
template <class T>
var<T> swiglu(const var<T>& gate, const var<T>& up, bool fused)
{
    return fused ? ops::swiglu(gate, up) : ops::composed::swiglu(gate, up);
}

// x / sqrt(mean(x^2) + 1e-5) over each head vector
template <class T>
var<T> head_rms_norm(const var<T>& x, bool fused)
{
    const var<T> unit = constant_like(x, array<T>(xt::ones<T>({x.shape().back()})), "unit_gain");
    return fused ? ops::rms_norm(x, unit) : ops::composed::rms_norm(x, unit);
}

// relu(x)^2
template <class T>
var<T> relu_squared(const var<T>& x)
{
    const var<T> r = ops::relu(x);
    return ops::mul(r, r);
}

// c tanh(logits / c)
template <class T>
var<T> soft_capped(const var<T>& logits, double cap)
{
    return cap > 0 ? ops::softcap(logits, cap) : logits;
}

// (x_2i, x_2i+1) -> (x_2i cos - x_2i+1 sin, x_2i sin + x_2i+1 cos), angle (offset + t) base^(-2i/dh)
template <class T>
var<T> rope(const var<T>& x, double base, std::size_t offset, bool fused)
{
    return fused ? ops::rope(x, base, offset) : ops::composed::rope(x, base, offset);
}

template <class T>
var<T> norm(const var<T>& x, const norm_weights<T>& w, norm_kind kind, bool fused)
{
    return kind == norm_kind::rmsnorm ? rms_norm(x, w.weight, fused) : layer_norm(x, w.weight, w.bias, fused);
}

// act(x W_fc + b_fc) W_proj + b_proj, or (silu(x W_gate + b_gate) * (x W_up + b_up)) W_down + b_down
template <class T>
mlp_result<T> mlp(const var<T>& x, const mlp_weights<T>& w, mlp_kind kind, const block_options& o)
{
    const bool fused = o.fused;
    // GELU(x W_fc + b_fc) in one node when nobody reads x W_fc + b_fc
    const bool merged = fused && !o.every_activation && w.b_fc.valid();
    mlp_result<T> r;
    switch (kind)
    {
    case mlp_kind::swiglu:
        r.hidden = linear(x, w.W_gate, w.b_gate, fused);
        r.up = linear(x, w.W_up, w.b_up, fused);
        r.activated = swiglu(r.hidden, r.up, fused);
        r.output = linear(r.activated, w.W_down, w.b_down, fused);
        return r;
    case mlp_kind::gelu_tanh:
        r.hidden = merged ? var<T>() : linear(x, w.W_fc, w.b_fc, fused);
        r.activated = merged ? ops::linear_gelu(x, w.W_fc, w.b_fc) : gelu(r.hidden, fused);
        break;
    case mlp_kind::gelu:
        r.hidden = merged ? var<T>() : linear(x, w.W_fc, w.b_fc, fused);
        r.activated = merged ? ops::linear_gelu_exact(x, w.W_fc, w.b_fc) : gelu_exact(r.hidden, fused);
        break;
    case mlp_kind::relu2:
        r.hidden = linear(x, w.W_fc, w.b_fc, fused);
        r.activated = relu_squared(r.hidden);
        break;
    }
    r.output = linear(r.activated, w.W_proj, w.b_proj, fused);
    return r;
}

namespace
{
template <class T>
var<T> dropped(const var<T>& x, const block_options& o)
{
    return o.generator && o.dropout > 0 ? ops::dropout(x, static_cast<T>(o.dropout), *o.generator) : x;
}

// Causal self-attention (within the sliding window, when there is one) with the variant's biases,
// QK-norm and rotary embedding, over the cached positions too.
template <class T>
std::pair<var<T>, var<T>> causal_attention(const var<T>& x, const attention_weights<T>& w, const gpt_config& c,
                                           const block_options& o, kv_cache_layer<T>* cache)
{
    const mha_config mc = c.attention();
    check_mha_shapes("gpt_block", mc, x.shape(), x.shape(), x.shape(), w.W_Q.shape(), w.W_K.shape(),
                     w.W_V.shape(), w.W_O.shape());
    var<T> q_linear = linear(x, w.W_Q, w.b_Q, o.fused).named("Q_linear");
    var<T> k_linear = linear(x, w.W_K, w.b_K, o.fused).named("K_linear");
    var<T> v_linear = linear(x, w.W_V, w.b_V, o.fused).named("V_linear");
    const bool qk_norm = c.qk_norm == qk_norm_kind::rms;
    if (o.fused && !o.attention_weights && !cache && c.position != position_kind::rope && !qk_norm)
    {
        // The projections' (B, T, H dh) rows are read in place: no split into heads, no join after.
        var<T> joined = ops::attention_token_major(q_linear, k_linear, v_linear, mc.heads, mc.kv_head_count(),
                                                   nullptr, /*causal=*/true, c.attention_window)
                            .named("joined");
        return {linear(joined, w.W_O, w.b_O, o.fused).named("output"), var<T>()};
    }
    var<T> q = split_heads(q_linear, mc.heads).named("Q");
    var<T> k = split_heads(k_linear, mc.kv_head_count()).named("K");
    var<T> v = split_heads(v_linear, mc.kv_head_count()).named("V");
    if (qk_norm)
    {
        q = head_rms_norm(q, o.fused).named("Q_norm");
        k = head_rms_norm(k, o.fused).named("K_norm");
    }
    if (c.position == position_kind::rope)
    {
        q = rope(q, c.rope_base, o.position_offset, o.fused).named("Q_rope");
        k = rope(k, c.rope_base, o.position_offset, o.fused).named("K_rope");
    }
    if (cache)
    {
        if (cache->length() > 0)
        {
            k = ops::concat<T>({constant_like(k, cache->keys, "cached_K"), k}, 2);
            v = ops::concat<T>({constant_like(v, cache->values, "cached_V"), v}, 2);
        }
        cache->keys = k.value();
        cache->values = v.value();
    }
    var<T> heads, weights;
    if (o.fused && !o.attention_weights)
    {
        heads = ops::attention(q, k, v, nullptr, /*causal=*/true, c.attention_window).named("head_output");
    }
    else
    {
        // bottom-right aligned, the last attention_window keys of each query's prefix (all when 0)
        const mask_t causal = causal_mask(q.shape()[2], k.shape()[2], c.attention_window);
        std::tie(heads, weights) = attention(q, k, v, &causal);
    }
    var<T> joined = combine_heads(heads).named("joined");
    return {linear(joined, w.W_O, w.b_O, o.fused).named("output"), weights};
}
}  // namespace

// x + MHA(N(x; ln_1)), then + MLP(N(.; ln_2))
template <class T>
block_result<T> transformer_block(const var<T>& x, const block_weights<T>& w, const gpt_config& c,
                                  const block_options& o, kv_cache_layer<T>* cache)
{
    block_result<T> r;
    r.ln_1 = norm(x, w.ln_1, c.norm, o.fused);
    auto [attn, weights] = causal_attention(r.ln_1, w.attn, c, o, cache);
    r.attn = dropped(attn, o);
    r.weights = weights;
    r.res_1 = ops::add(x, r.attn);
    r.ln_2 = norm(r.res_1, w.ln_2, c.norm, o.fused);
    r.mlp = mlp(r.ln_2, w.mlp, c.mlp, o);
    r.mlp.output = dropped(r.mlp.output, o);
    r.res_2 = ops::add(r.res_1, r.mlp.output);
    return r;
}

template <class T>
block_weights<T> bind(tape<T>& t, const gpt_block_parameters<T>& b, const gpt_config& c)
{
    auto bind_if = [&t](bool present, const parameter<T>& p) { return present ? t.param(p) : var<T>(); };
    const bool nb = c.norm_has_bias(), ab = c.attention_has_bias(), mb = c.mlp_has_bias();
    const bool swi = c.mlp == mlp_kind::swiglu;
    block_weights<T> w;
    w.ln_1 = {t.param(b.ln_1_weight), bind_if(nb, b.ln_1_bias)};
    w.attn = {t.param(b.W_Q),       t.param(b.W_K),       t.param(b.W_V),       t.param(b.W_O),
              bind_if(ab, b.b_Q), bind_if(ab, b.b_K), bind_if(ab, b.b_V), bind_if(ab, b.b_O)};
    w.ln_2 = {t.param(b.ln_2_weight), bind_if(nb, b.ln_2_bias)};
    w.mlp.W_fc = bind_if(!swi, b.W_fc);
    w.mlp.b_fc = bind_if(!swi && mb, b.b_fc);
    w.mlp.W_proj = bind_if(!swi, b.W_proj);
    w.mlp.b_proj = bind_if(!swi && mb, b.b_proj);
    w.mlp.W_gate = bind_if(swi, b.W_gate);
    w.mlp.b_gate = bind_if(swi && mb, b.b_gate);
    w.mlp.W_up = bind_if(swi, b.W_up);
    w.mlp.b_up = bind_if(swi && mb, b.b_up);
    w.mlp.W_down = bind_if(swi, b.W_down);
    w.mlp.b_down = bind_if(swi && mb, b.b_down);
    return w;
}

#define XGRAD_LAYERS(T)                                                                                    \
    template var<T> linear(const var<T>&, const var<T>&);                                                  \
    template var<T> linear(const var<T>&, const var<T>&, const var<T>&, bool);                             \
    template var<T> layer_norm(const var<T>&, const var<T>&, const var<T>&, bool);                         \
    template var<T> rms_norm(const var<T>&, const var<T>&, bool);                                          \
    template var<T> gelu(const var<T>&, bool);                                                             \
    template var<T> gelu_exact(const var<T>&, bool);                                                       \
    template var<T> swiglu(const var<T>&, const var<T>&, bool);                                            \
    template var<T> head_rms_norm(const var<T>&, bool);                                                    \
    template var<T> relu_squared(const var<T>&);                                                           \
    template var<T> soft_capped(const var<T>&, double);                                                    \
    template var<T> rope(const var<T>&, double, std::size_t, bool);                                        \
    template var<T> norm(const var<T>&, const norm_weights<T>&, norm_kind, bool);                          \
    template mlp_result<T> mlp(const var<T>&, const mlp_weights<T>&, mlp_kind, const block_options&);      \
    template block_result<T> transformer_block(const var<T>&, const block_weights<T>&, const gpt_config&, \
                                               const block_options&, kv_cache_layer<T>*);                 \
    template block_weights<T> bind(tape<T>&, const gpt_block_parameters<T>&, const gpt_config&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_LAYERS)
}  // namespace xgrad::models
