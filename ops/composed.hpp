// The fused ops of ops/*.cpp written again from primitives only, so that the
// fused rules can be tested against what the tape derives by itself (and to teach how they are built).
#pragma once

#include "ops/ops.hpp"

namespace xgrad::ops::composed
{
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) from mul, add_scalar, scale and tanh.
template <class T> var<T> gelu(const var<T>& x);
// x W + b from matmul and a broadcast add.
template <class T> var<T> linear(const var<T>& x, const var<T>& weight, const var<T>& bias);
// (x - mean) * rsqrt(variance + eps) * weight + bias from mean, sub, mul, add and rsqrt.
template <class T> var<T> layer_norm(const var<T>& x, const var<T>& weight, const var<T>& bias, T eps = T(1e-5));
// x - max - log(sum(exp(x - max))) over the last axis, from max, sub, exp, sum and log.
template <class T> var<T> log_softmax(const var<T>& x);
// log_softmax, a gather of the target entries (a mul by a constant one-hot mask) and a mean over kept rows.
template <class T> var<T> cross_entropy(const var<T>& logits, const ids_t& targets);
// The variants' ops (ops/activations.cpp, ops/norms.cpp, ops/positions.cpp) from primitives:
// x * sigmoid(x).
template <class T> var<T> silu(const var<T>& x);
// 0.5 x (1 + erf(x / sqrt 2)) from scale, erf, add_scalar and mul.
template <class T> var<T> gelu_exact(const var<T>& x);
// silu(gate) * up, with composed::silu.
template <class T> var<T> swiglu(const var<T>& gate, const var<T>& up);
// x * rsqrt(mean(x * x) + eps) * weight over the last axis.
template <class T> var<T> rms_norm(const var<T>& x, const var<T>& weight, double eps = 1e-5);
// x * C + (x @ P) * S: C, S the constant cos and sin of each coordinate's angle, P the constant
// (dh, dh) matrix taking each pair (a, b) to (-b, a).
template <class T> var<T> rope(const var<T>& x, double base, std::size_t position_offset);
// The twins of the softmax and attention ops (what a backward that records itself differentiates):
// e m / (sum e m + r) with e = exp(scale x - c), m the mask, c a constant shift, r = 1 on rows the mask
// empties (which give 0); mask may be null.
template <class T> var<T> masked_softmax(const var<T>& x, const mask_t* mask, T scale);
// masked_softmax(Q K^T, mask and causal, 1 / sqrt(dh)) V, each key/value head repeated for its H / G
// query heads; and the same on the token-major layout.
template <class T>
var<T> attention(const var<T>& q, const var<T>& k, const var<T>& v, const mask_t* mask, bool causal);
template <class T>
var<T> attention_token_major(const var<T>& q, const var<T>& k, const var<T>& v, std::size_t heads,
                             std::size_t kv_heads, const mask_t* mask, bool causal);
}  // namespace xgrad::ops::composed
