// The GPT's layers composed from ops (see layers.hpp); each function is its own forward's math.
#include "models/layers.hpp"

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
var<T> linear(const var<T>& x, const var<T>& weight, const var<T>& bias)
{
    return ops::add(ops::matmul(x, weight), bias);
}

// (x - mean) / sqrt(var + 1e-5) * weight + bias
template <class T>
var<T> layer_norm(const var<T>& x, const var<T>& weight, const var<T>& bias, bool fused)
{
    return fused ? ops::layer_norm(x, weight, bias) : ops::composed::layer_norm(x, weight, bias);
}

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class T>
var<T> gelu(const var<T>& x, bool fused)
{
    return fused ? ops::gelu(x) : ops::composed::gelu(x);
}

// GELU(x W_fc + b_fc) W_proj + b_proj
template <class T>
mlp_result<T> mlp(const var<T>& x, const mlp_weights<T>& w, bool fused)
{
    mlp_result<T> r;
    r.hidden = linear(x, w.W_fc, w.b_fc);
    r.activated = gelu(r.hidden, fused);
    r.output = linear(r.activated, w.W_proj, w.b_proj);
    return r;
}

// x + MHA(LN(x; ln_1)), then + MLP(LN(.; ln_2))
template <class T>
block_result<T> transformer_block(const var<T>& x, const block_weights<T>& w, const mha_config& config, bool fused)
{
    block_result<T> r;
    r.ln_1 = layer_norm(x, w.ln_1.weight, w.ln_1.bias, fused);
    r.attn = self_attention(r.ln_1, w.attn, config, {nullptr, /*causal=*/true}).output;
    r.res_1 = ops::add(x, r.attn);
    r.ln_2 = layer_norm(r.res_1, w.ln_2.weight, w.ln_2.bias, fused);
    r.mlp = mlp(r.ln_2, w.mlp, fused);
    r.res_2 = ops::add(r.res_1, r.mlp.output);
    return r;
}

#define XGRAD_LAYERS(T)                                                                                   \
    template var<T> linear(const var<T>&, const var<T>&);                                                 \
    template var<T> linear(const var<T>&, const var<T>&, const var<T>&);                                  \
    template var<T> layer_norm(const var<T>&, const var<T>&, const var<T>&, bool);                        \
    template var<T> gelu(const var<T>&, bool);                                                            \
    template mlp_result<T> mlp(const var<T>&, const mlp_weights<T>&, bool);                               \
    template block_result<T> transformer_block(const var<T>&, const block_weights<T>&, const mha_config&, \
                                               bool);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_LAYERS)
}  // namespace xgrad::models
