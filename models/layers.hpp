// The layers of the small GPT (docs/spec.md, "The small GPT" and "Architecture variants"), each a short
// composition of ops: nothing here has a backward rule of its own. Weights arrive as vars already
// recorded on the tape (bound from parameters by the model), so the same block serves training, the
// KV-cache decoder, tests and tools: there is one copy of the forward.
//
// `fused` picks the fused ops (ops::layer_norm, ops::gelu, ops::attention, ...) or their twins composed
// from primitives (ops/composed.hpp); both compute the same function, and comparing them tests the fused
// rules. A weight the variant does not have (a bias with bias = none, say) is an empty var.
#pragma once

#include <random>

#include "models/gpt.hpp"

namespace xgrad::models
{
// y = x W with W (d_in, d_out): the row-vector convention, x (..., d_in).
template <class T>
var<T> linear(const var<T>& x, const var<T>& weight);

// y = x W + b with b (d_out,) broadcast over every row; x W when b is empty. fused: one node
// (ops::linear), else matmul then add.
template <class T>
var<T> linear(const var<T>& x, const var<T>& weight, const var<T>& bias, bool fused = false);

// LN(x) = (x - mean) / sqrt(var + 1e-5) * weight + bias over the last axis (var biased); no bias when
// `bias` is empty.
template <class T>
var<T> layer_norm(const var<T>& x, const var<T>& weight, const var<T>& bias, bool fused = true);

// RMS(x) = x / sqrt(mean(x^2) + 1e-5) * weight over the last axis.
template <class T>
var<T> rms_norm(const var<T>& x, const var<T>& weight, bool fused = true);

// GELU(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh approximation.
template <class T>
var<T> gelu(const var<T>& x, bool fused = true);

// GELU(x) = 0.5 x (1 + erf(x / sqrt 2)), exact.
template <class T>
var<T> gelu_exact(const var<T>& x, bool fused = true);

// silu(gate) * up, silu(z) = z sigmoid(z).
template <class T>
var<T> swiglu(const var<T>& gate, const var<T>& up, bool fused = true);

// QK-norm: every head vector (last axis) of x becomes x / sqrt(mean(x^2) + 1e-5), no gain. fused: the
// RMS norm op with a constant unit weight, else its composition.
template <class T>
var<T> head_rms_norm(const var<T>& x, bool fused = true);

// relu(x)^2, elementwise.
template <class T>
var<T> relu_squared(const var<T>& x);

// The logits' soft cap: c tanh(logits / c) for c > 0 (one node, ops::softcap), the logits as they are
// for c = 0.
template <class T>
var<T> soft_capped(const var<T>& logits, double cap);

// Rotary embedding of x (B, H, T, dh), dh even: pair (2i, 2i+1) of row t rotated by
// (offset + t) * base^(-2i/dh).
template <class T>
var<T> rope(const var<T>& x, double base, std::size_t position_offset, bool fused = true);

template <class T>
struct norm_weights
{
    var<T> weight, bias;  // (d,); bias empty for RMSNorm and bias = none
};

// The norm the config asks for: LayerNorm or RMSNorm.
template <class T>
var<T> norm(const var<T>& x, const norm_weights<T>& w, norm_kind kind, bool fused = true);

template <class T>
struct attention_weights
{
    var<T> W_Q, W_K, W_V, W_O;  // (d, d), (d, G dh), (d, G dh), (d, d)
    var<T> b_Q, b_K, b_V, b_O;  // bias = all
};

// How a block runs; the defaults are a training step without dropout.
struct block_options
{
    bool fused = true;
    std::size_t position_offset = 0;  // the absolute position of the first row (RoPE; decoding)
    // Inverted dropout on the attention output after W_O and on the MLP output, drawn from `generator`
    // when it is given and dropout > 0.
    double dropout = 0;
    std::mt19937_64* generator = nullptr;
    bool attention_weights = false;  // compute the softmax weights (the composed attention) and return them
    // Every activation of block_result a node of its own; false: with `fused`, the MLP's first linear and
    // its GELU are one node (ops::linear_gelu, ops::linear_gelu_exact) and mlp.hidden is empty.
    bool every_activation = true;
};

template <class T>
struct mlp_weights
{
    var<T> W_fc, b_fc, W_proj, b_proj;                  // gelu_tanh, gelu, relu2: (d, h), (h,), (h, d), (d,)
    var<T> W_gate, b_gate, W_up, b_up, W_down, b_down;  // swiglu: (d, h), (h,), (d, h), (h,), (h, d), (d,)
};

// The MLP's intermediate values, in forward order.
template <class T>
struct mlp_result
{
    var<T> hidden;     // x W_fc + b_fc, or x W_gate + b_gate        (..., h), or empty: merged into activated
    var<T> up;         // x W_up + b_up (swiglu only)                (..., h)
    var<T> activated;  // GELU(hidden), relu(hidden)^2, or silu(hidden) * up (..., h)
    var<T> output;     // activated W_proj + b_proj (W_down, b_down) (..., d)
};

// MLP(x) = act(x W_fc + b_fc) W_proj + b_proj with act GELU (tanh or exact) or relu^2, or
// (silu(x W_gate + b_gate) * (x W_up + b_up)) W_down + b_down. Reads o.fused and o.every_activation.
template <class T>
mlp_result<T> mlp(const var<T>& x, const mlp_weights<T>& w, mlp_kind kind, const block_options& o = {});

template <class T>
struct block_weights
{
    norm_weights<T> ln_1;
    attention_weights<T> attn;
    norm_weights<T> ln_2;
    mlp_weights<T> mlp;
};

// One layer's keys and values of the positions seen so far, (B, G, t, dh) each (after RoPE); empty
// arrays before the first position. The block appends the new positions' keys and values.
template <class T>
struct kv_cache_layer
{
    array<T> keys, values;
    std::size_t length() const { return keys.dimension() == 4 ? keys.shape()[2] : 0; }
};

// The block's intermediate values, in forward order; res_2 is the block's output.
template <class T>
struct block_result
{
    var<T> ln_1;     // N(x; ln_1)
    var<T> attn;     // MHA(ln_1), after W_O (+ b_O), after dropout
    var<T> weights;  // (B, H, Tq, Tk) softmax weights when block_options::attention_weights
    var<T> res_1;    // x + attn
    var<T> ln_2;     // N(res_1; ln_2)
    mlp_result<T> mlp;
    var<T> res_2;    // res_1 + mlp.output (after dropout)
};

// The pre-norm transformer block, causal self-attention:
//   x = x + MHA(N(x; ln_1));  x = x + MLP(N(x; ln_2)).
// With `cache`, the keys and values of earlier positions are read from it (causal bottom-right: query i
// sees keys j <= i + cached, and j > i + cached - w with attention_window w) and the new ones appended.
// Throws std::invalid_argument naming "gpt_block" for weights whose shapes do not fit the config.
template <class T>
block_result<T> transformer_block(const var<T>& x, const block_weights<T>& w, const gpt_config& config,
                                  const block_options& options = {}, kv_cache_layer<T>* cache = nullptr);

// The block's parameters recorded on a tape (empty vars for those the variant lacks).
template <class T>
block_weights<T> bind(tape<T>& t, const gpt_block_parameters<T>& b, const gpt_config& config);
}  // namespace xgrad::models
