// The primitive ops. Each records its forward value and its backward rule in one place (ops/*.cpp);
// everything else in xgrad (MHA, layers) is composed from these and gets its backward for free.
// Every op checks its arguments and throws std::invalid_argument naming the op and the shapes.
#pragma once

#include <random>

#include "autodiff/tape.hpp"
#include "ops/scalar_operators.hpp"

namespace xgrad
{
namespace ops
{
// Elementwise, with NumPy broadcasting (ops/elementwise.cpp).
template <class T> var<T> add(const var<T>& a, const var<T>& b);
template <class T> var<T> sub(const var<T>& a, const var<T>& b);
template <class T> var<T> mul(const var<T>& a, const var<T>& b);
template <class T> var<T> scale(const var<T>& x, T factor);
template <class T> var<T> neg(const var<T>& x);
template <class T> var<T> exp(const var<T>& x);
template <class T> var<T> log(const var<T>& x);
template <class T> var<T> tanh(const var<T>& x);
template <class T> var<T> div(const var<T>& a, const var<T>& b);
template <class T> var<T> add_scalar(const var<T>& x, T c);     // x + c
template <class T> var<T> sqrt(const var<T>& x);
template <class T> var<T> rsqrt(const var<T>& x);               // 1 / sqrt(x)
template <class T> var<T> pow(const var<T>& x, T exponent);

// Activations, elementwise, each a fused op with a hand-derived rule (ops/activations.cpp).
template <class T> var<T> relu(const var<T>& x);
template <class T> var<T> sigmoid(const var<T>& x);
// GELU, tanh approximation (docs/spec.md): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), one fused op.
template <class T> var<T> gelu(const var<T>& x);
// The exact GELU, 0.5 x (1 + erf(x / sqrt 2)) (torch.nn.GELU()), elementwise.
template <class T> var<T> gelu_exact(const var<T>& x);
// erf(x), elementwise: dL/dx = g (2 / sqrt(pi)) e^{-x^2}.
template <class T> var<T> erf(const var<T>& x);
// x sigmoid(x), elementwise.
template <class T> var<T> silu(const var<T>& x);
// silu(gate) * up; gate and up of the same shape.
template <class T> var<T> swiglu(const var<T>& gate, const var<T>& up);

// Reductions (ops/reduce.cpp): over all axes, or the given axes, optionally keeping them as size 1.
template <class T> var<T> sum(const var<T>& x);
template <class T> var<T> sum(const var<T>& x, const std::vector<std::size_t>& axes, bool keep_dims = false);
template <class T> var<T> mean(const var<T>& x);
template <class T> var<T> mean(const var<T>& x, const std::vector<std::size_t>& axes, bool keep_dims = false);
// Largest entry along one axis; the gradient goes to the first largest entry (as torch.max(dim)).
template <class T> var<T> max(const var<T>& x, std::size_t axis, bool keep_dims = false);
// Biased (population) variance over the given axes: mean((x - mean(x))^2).
template <class T> var<T> variance(const var<T>& x, const std::vector<std::size_t>& axes, bool keep_dims = false);

// Shape ops (ops/shape.cpp). reshape accepts one -1 for an inferred axis.
template <class T> var<T> reshape(const var<T>& x, const std::vector<long>& shape);
template <class T> var<T> permute(const var<T>& x, const std::vector<std::size_t>& axes);
template <class T> var<T> transpose(const var<T>& x, std::size_t axis1, std::size_t axis2);
// Entries [begin, end) of one axis (ops/index.cpp).
template <class T> var<T> slice(const var<T>& x, std::size_t axis, std::size_t begin, std::size_t end);
// Joins tensors along one axis; every other axis must agree. Any number of parts (ops/index.cpp).
template <class T> var<T> concat(const std::vector<var<T>>& parts, std::size_t axis);

// Row gather: out[..., :] = weight[ids[...], :], shape ids.shape + (d,). Backward scatter-adds, so
// repeated ids accumulate. An id outside [0, V) throws naming the id and its position (ops/index.cpp).
template <class T> var<T> embedding(const var<T>& weight, const ids_t& ids);

// Matrix product over the last two axes; leading (batch) axes broadcast. transpose_a/b use an operand's
// last two axes swapped, passed to the GEMM as a flag instead of copied (ops/matmul.cpp).
template <class T>
var<T> matmul(const var<T>& a, const var<T>& b, bool transpose_a = false, bool transpose_b = false);

// Linear layers, fused, each with a hand-derived rule (ops/linear.cpp).
// y = x W + b in one node, x (..., d), W (d, n), b (n): equal to add(matmul(x, W), b), without the second array.
template <class T> var<T> linear(const var<T>& x, const var<T>& weight, const var<T>& bias);
// gelu(x W + b) and gelu_exact(x W + b) in one node each (an MLP's first layer): the bias and the GELU in
// one pass over the product, which keeps gelu'(x W + b) for the backward instead of x W + b.
template <class T> var<T> linear_gelu(const var<T>& x, const var<T>& weight, const var<T>& bias);
template <class T> var<T> linear_gelu_exact(const var<T>& x, const var<T>& weight, const var<T>& bias);

// The softmax family over the last axis (ops/softmax.cpp).
// softmax(scale * x) over the last axis, where only entries with mask == true compete. The mask
// broadcasts to x's shape; a row with no true entry gives zeros (and a zero gradient), never NaN.
template <class T> var<T> masked_softmax(const var<T>& x, const mask_t& mask, T scale = T(1));
template <class T> var<T> softmax(const var<T>& x, T scale = T(1));
// log softmax over the last axis.
template <class T> var<T> log_softmax(const var<T>& x);
// Mean over positions whose target is not -1 of -log softmax(logits)[target]: logits (..., V), targets
// of logits' shape without the last axis, values in [0, V) or -1. All ignored: 0, and a zero gradient.
template <class T> var<T> cross_entropy(const var<T>& logits, const ids_t& targets);

// Fused scaled dot-product attention, softmax(Q K^T / sqrt(dh), mask) V, computed tile by tile with an
// online softmax (ops/attention.cpp, kernels/attention.cpp): it saves only the per-row log-sum-exp
// (O(B H Tq) numbers, not the (B, H, Tq, Tk) weights), skips the key tiles a causal mask removes, and
// its backward recomputes the weights tile by tile. q (B, H, Tq, dh); k, v (B, G, Tk, dh), H % G == 0,
// query head h reading key/value head h / (H / G). mask: nullptr or broadcast to (B, H, Tq, Tk), true =
// attend; causal bottom-right aligned, ANDed with the mask. A row with no visible key gives 0 and no
// gradient. Returns (B, H, Tq, dh). The mask gets no gradient and is copied into the op.
template <class T>
var<T> attention(const var<T>& q, const var<T>& k, const var<T>& v, const mask_t* mask = nullptr, bool causal = false);
// The same op on the projections' token-major layout, with no split into heads or join after: q
// (B, Tq, H dh), k and v (B, Tk, G dh), returns (B, Tq, H dh), equal to
// combine_heads(attention(split_heads(q, H), split_heads(k, G), split_heads(v, G), mask, causal)).
template <class T>
var<T> attention_token_major(const var<T>& q, const var<T>& k, const var<T>& v, std::size_t heads,
                             std::size_t kv_heads, const mask_t* mask = nullptr, bool causal = false);

// Norms over the last axis, fused, each with a hand-derived rule (ops/norms.cpp).
// (x - mean) / sqrt(var + eps) * weight + bias over the last axis (var biased); weight, bias (d,).
template <class T> var<T> layer_norm(const var<T>& x, const var<T>& weight, const var<T>& bias, T eps = T(1e-5));
// x / sqrt(mean(x^2) + eps) * weight over the last axis; weight (d,).
template <class T> var<T> rms_norm(const var<T>& x, const var<T>& weight, double eps = 1e-5);

// Positional encodings (ops/positions.cpp).
// Rotary embedding of x (B, H, T, dh), dh even: pair (2i, 2i+1) of row t turned by the angle
// (position_offset + t) * base^(-2i/dh): (a, b) -> (a cos - b sin, a sin + b cos).
template <class T> var<T> rope(const var<T>& x, double base, std::size_t position_offset);

// Regularisation (ops/dropout.cpp).
// Inverted dropout: zeroes each entry with probability p and scales the rest by 1 / (1 - p). The identity
// (the same node, nothing recorded) when p == 0 or !training. p in [0, 1) else std::invalid_argument.
template <class T>
var<T> dropout(const var<T>& x, T p, std::mt19937_64& generator, bool training = true);

// NumPy's elementwise ops beyond the arithmetic above (ops/elementwise_numpy.cpp): |x| (no gradient at 0),
// sin, cos, and a^b with a var exponent (broadcasting; d/db = a^b ln a, 0 where a = 0 and b >= 0).
template <class T> var<T> abs(const var<T>& x);
template <class T> var<T> sin(const var<T>& x);
template <class T> var<T> cos(const var<T>& x);
template <class T> var<T> pow(const var<T>& a, const var<T>& b);

// Selection, broadcasting (ops/select.cpp): mask ? a : b (the mask a constant); maximum and minimum
// (a tie sends the gradient to a); clip to [lo, hi] (gradient where lo <= x <= hi, as torch.clamp).
template <class T> var<T> where(const mask_t& mask, const var<T>& a, const var<T>& b);
template <class T> var<T> maximum(const var<T>& a, const var<T>& b);
template <class T> var<T> minimum(const var<T>& a, const var<T>& b);
template <class T> var<T> clip(const var<T>& x, T lo, T hi);

// Gather on flat positions (ops/gather.cpp): take(x, p) = x.flat[p], of p's shape (NumPy's take without
// an axis; every NumPy index and take_along_axis reduce to it); scatter_add(v, p, shape) adds v into
// zeros(shape) at p (NumPy's add.at), take's adjoint. A position outside [0, size) throws naming it.
template <class T> var<T> take(const var<T>& x, const ids_t& indices);
template <class T> var<T> scatter_add(const var<T>& values, const ids_t& indices, const shape_t& shape);
}  // namespace ops

template <class T> var<T> operator+(const var<T>& a, const var<T>& b) { return ops::add(a, b); }
template <class T> var<T> operator-(const var<T>& a, const var<T>& b) { return ops::sub(a, b); }
template <class T> var<T> operator*(const var<T>& a, const var<T>& b) { return ops::mul(a, b); }
template <class T> var<T> operator-(const var<T>& x) { return ops::neg(x); }
template <class T> var<T> operator/(const var<T>& a, const var<T>& b) { return ops::div(a, b); }
}  // namespace xgrad
