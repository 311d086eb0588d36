// The layers of the small GPT (../shared/SPEC.md, "The small GPT"), each a short composition of ops:
// nothing here has a backward rule of its own. Weights arrive as vars already recorded on the tape
// (bound from parameters by the model), so the same layer serves training, tests and tools.
//
// `fused` picks the fused ops (ops::layer_norm, ops::gelu) or their twins composed from primitives
// (ops/composed.hpp); both compute the same function, and comparing them tests the fused rules.
#pragma once

#include "models/mha.hpp"

namespace xgrad::models
{
// y = x W with W (d_in, d_out): the row-vector convention, x (..., d_in).
template <class T>
var<T> linear(const var<T>& x, const var<T>& weight);

// y = x W + b with b (d_out,) broadcast over every row.
template <class T>
var<T> linear(const var<T>& x, const var<T>& weight, const var<T>& bias);

// LN(x) = (x - mean) / sqrt(var + 1e-5) * weight + bias over the last axis (var biased).
template <class T>
var<T> layer_norm(const var<T>& x, const var<T>& weight, const var<T>& bias, bool fused = true);

// GELU(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh approximation.
template <class T>
var<T> gelu(const var<T>& x, bool fused = true);

template <class T>
struct layer_norm_weights
{
    var<T> weight, bias;  // (d,)
};

template <class T>
struct mlp_weights
{
    var<T> W_fc, b_fc;      // (d, 4d), (4d,)
    var<T> W_proj, b_proj;  // (4d, d), (d,)
};

// The MLP's intermediate values, in forward order.
template <class T>
struct mlp_result
{
    var<T> hidden;     // x W_fc + b_fc           (..., 4d)
    var<T> activated;  // GELU(hidden)            (..., 4d)
    var<T> output;     // activated W_proj + b_proj  (..., d)
};

// MLP(x) = GELU(x W_fc + b_fc) W_proj + b_proj.
template <class T>
mlp_result<T> mlp(const var<T>& x, const mlp_weights<T>& w, bool fused = true);

template <class T>
struct block_weights
{
    layer_norm_weights<T> ln_1;
    mha_weights<T> attn;  // no biases
    layer_norm_weights<T> ln_2;
    mlp_weights<T> mlp;
};

// The block's intermediate values, in forward order; res_2 is the block's output.
template <class T>
struct block_result
{
    var<T> ln_1;   // LN(x; ln_1)
    var<T> attn;   // MHA(ln_1), after W_O
    var<T> res_1;  // x + attn
    var<T> ln_2;   // LN(res_1; ln_2)
    mlp_result<T> mlp;
    var<T> res_2;  // res_1 + mlp.output
};

// The pre-LN transformer block, causal self-attention:
//   x = x + MHA(LN(x; ln_1));  x = x + MLP(LN(x; ln_2)).
template <class T>
block_result<T> transformer_block(const var<T>& x, const block_weights<T>& w, const mha_config& config,
                                  bool fused = true);
}  // namespace xgrad::models
