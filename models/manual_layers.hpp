// The hand-derived layers, by family (docs/spec.md, "The small GPT" and "Architecture variants"),
// llm.c-style *_forward / *_backward pairs on plain arrays, no tape: the norms (LayerNorm, RMSNorm), the
// rotary embedding, QK-norm, the exact GELU, ReLU squared, SwiGLU, the logits' soft cap, a bias's
// backward, and causal self-attention with optional biases, QK-norm, rotary embedding and a sliding
// window. Each backward names the forward it reverses and carries its math; they share no code with ops/
// (only the GEMM and the per-head attention of models/mha_manual.hpp), so that agreeing with the tape is
// evidence. models/gpt_manual.hpp builds the whole model's twin from these and
// the layers it declares itself.
#pragma once

#include <cstddef>

#include "models/mha_manual.hpp"

namespace xgrad::models::manual
{
// The row view every layer below takes of an array: rows of C numbers along the last axis.
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

// The eps of LayerNorm and RMSNorm (docs/spec.md, "The small GPT"; "Architecture variants").
constexpr double norm_eps = 1e-5;

// Activations are (B, T, C): every row of C numbers is one position of one sequence.

// ---- LayerNorm: y = (x - mean) / sqrt(var + 1e-5) * weight (+ bias) over the last axis -----------------

// What layernorm_backward needs: the normalised rows and 1 / sqrt(var + eps) per row.
template <class T>
struct layernorm_cache
{
    array<T> x_hat;  // (B, T, C)
    array<T> rstd;   // (B, T)
};

// y = (x - mean) / sqrt(var + 1e-5) * weight (+ bias when given) over the last axis (var biased).
template <class T>
array<T> layernorm_forward(const array<T>& x, const array<T>& weight, const array<T>* bias,
                           layernorm_cache<T>& cache);

template <class T>
struct layernorm_gradients
{
    array<T> x, weight, bias;
};
template <class T>
layernorm_gradients<T> layernorm_backward(const array<T>& d_y, const layernorm_cache<T>& cache,
                                          const array<T>& weight);

// ---- RMSNorm: y = x / sqrt(mean(x^2) + 1e-5) * weight over the last axis --------------------------------

template <class T>
struct rmsnorm_cache
{
    array<T> x_hat;  // x / rms, (B, T, C)
    array<T> rrms;   // 1 / sqrt(mean(x^2) + eps) per row, (B, T)
};

template <class T>
array<T> rmsnorm_forward(const array<T>& x, const array<T>& weight, rmsnorm_cache<T>& cache);

template <class T>
struct rmsnorm_gradients
{
    array<T> x, weight;
};
// Reverses rmsnorm_forward: d weight = sum over rows of d y x_hat; with d x_hat = d y weight,
// d x = rrms (d x_hat - x_hat mean(d x_hat x_hat)).
template <class T>
rmsnorm_gradients<T> rmsnorm_backward(const array<T>& d_y, const rmsnorm_cache<T>& cache, const array<T>& weight);

// ---- rotary embedding of split heads (B, H, T, dh), dh even --------------------------------------------

// Pair (2i, 2i+1) of row t turned by a = (offset + t) base^(-2i/dh): (x_2i cos a - x_2i+1 sin a,
// x_2i sin a + x_2i+1 cos a).
template <class T>
array<T> rope_forward(const array<T>& x, double base, std::size_t offset);
// Reverses rope_forward: the transpose of a rotation is the rotation by -a.
template <class T>
array<T> rope_backward(const array<T>& d_y, double base, std::size_t offset);

// ---- the exact GELU: y = 0.5 x (1 + erf(x / sqrt 2)) = x Phi(x), elementwise ---------------------------

template <class T>
array<T> gelu_exact_forward(const array<T>& x);
// Reverses gelu_exact_forward: d x = d y (Phi(x) + x phi(x)), phi the standard normal density.
template <class T>
array<T> gelu_exact_backward(const array<T>& d_y, const array<T>& x);

// ---- SwiGLU's product: y = silu(gate) up, silu(z) = z sigmoid(z), elementwise ---------------------------

template <class T>
array<T> swiglu_forward(const array<T>& gate, const array<T>& up);

template <class T>
struct swiglu_gradients
{
    array<T> gate, up;
};
// Reverses swiglu_forward: d up = d y silu(gate), d gate = d y up s (1 + gate (1 - s)), s = sigmoid(gate).
template <class T>
swiglu_gradients<T> swiglu_backward(const array<T>& d_y, const array<T>& gate, const array<T>& up);

// ---- QK-norm: every head vector h of dh numbers becomes h / sqrt(mean(h^2) + 1e-5), no gain -----------

template <class T>
struct head_rms_cache
{
    array<T> y;     // the normalised heads, (B, H, T, dh)
    array<T> rrms;  // 1 / sqrt(mean(h^2) + eps) per head vector, (B, H, T)
};
// y = h rrms, rrms = (mean(h^2) + 1e-5)^(-1/2), over the last axis of x (B, H, T, dh).
template <class T>
array<T> head_rms_forward(const array<T>& x, head_rms_cache<T>& cache);
// Reverses head_rms_forward: d h = rrms (d y - y mean(d y y)) per head vector.
template <class T>
array<T> head_rms_backward(const array<T>& d_y, const head_rms_cache<T>& cache);

// ---- ReLU squared: y = relu(x)^2, elementwise ----------------------------------------------------------

template <class T>
array<T> relu2_forward(const array<T>& x);
// Reverses relu2_forward: d x = d y 2 relu(x).
template <class T>
array<T> relu2_backward(const array<T>& d_y, const array<T>& x);

// ---- the logits' soft cap: y = c tanh(x / c), c > 0, elementwise --------------------------------------

template <class T>
array<T> softcap_forward(const array<T>& x, double cap);
// Reverses softcap_forward from its output: d x = d y (1 - tanh^2(x / c)) = d y (1 - (y / c)^2).
template <class T>
array<T> softcap_backward(const array<T>& d_y, const array<T>& y, double cap);

// ---- products and biases ------------------------------------------------------------------------------

// out = x @ W, plus b on every row when b is given: x (B, T, C), W (C, OC), b (OC,) or nullptr.
template <class T>
array<T> linear_forward(const array<T>& x, const array<T>& w, const array<T>* b);

template <class T>
struct linear_gradients
{
    array<T> x, w, b;  // b not computed (a default, 0-d array) when the forward had no bias
};
// Reverses linear_forward: d x = d out W^T, d W = sum over rows x^T d out, d b = bias_backward(d out).
template <class T>
linear_gradients<T> linear_backward(const array<T>& d_out, const array<T>& x, const array<T>& w, bool has_bias);

// out[r] = x[r] + b reverses to d b = sum over rows r of d out[r]: (B, T, C) -> (C,).
template <class T>
array<T> bias_backward(const array<T>& d_out);

// ---- causal self-attention with optional biases and rotary embedding ---------------------------------

// The attention's parameters (shapes of docs/spec.md); a bias pointer is nullptr when the variant has none.
template <class T>
struct attention_weights
{
    const array<T>* w_q = nullptr;  // (d, d)
    const array<T>* w_k = nullptr;  // (d, G dh)
    const array<T>* w_v = nullptr;  // (d, G dh)
    const array<T>* w_o = nullptr;  // (d, d)
    const array<T>* b_q = nullptr;  // (d,)
    const array<T>* b_k = nullptr;  // (G dh,)
    const array<T>* b_v = nullptr;  // (G dh,)
    const array<T>* b_o = nullptr;  // (d,)
};

struct attention_variant
{
    bool rope = false;        // rotate every query and key head (position = rope)
    double rope_base = 10000;
    std::size_t position_offset = 0;  // the absolute position of row 0
    std::size_t window = 0;           // attention_window: query t sees keys t - w < s <= t (0: every s <= t)
    bool qk_norm = false;     // RMS-normalise every query and key head before the rotation (qk_norm = rms)
};

template <class T>
struct attention_cache
{
    mha_config config;
    attention_variant variant;
    bool has_bias = false;
    array<T> x;        // (B, T, d), the input of all three projections
    array<T> q, k, v;  // split heads after the rotation: (B, H, T, dh), (B, G, T, dh), (B, G, T, dh)
    head_rms_cache<T> q_norm, k_norm;  // qk_norm: what head_rms_backward needs
    array<T> weights;  // softmax P, (B, H, T, T)
    array<T> joined;   // combined heads, the input of W_O: (B, T, d)
};

// Q = split(x W_Q + b_Q), K = split(x W_K + b_K), V = split(x W_V + b_V); with qk_norm, Q = head_rms(Q)
// and K = head_rms(K); with rope, Q = rope(Q) and K = rope(K); O = attention(Q, K, V), causal (within
// the window); y = combine(O) W_O + b_O. Throws std::invalid_argument naming
// "causal_self_attention_forward" for shapes that disagree with `config` or a missing bias.
template <class T>
array<T> causal_self_attention_forward(const array<T>& x, const attention_weights<T>& weights,
                                       const mha_config& config, const attention_variant& variant,
                                       attention_cache<T>& cache);

template <class T>
struct attention_gradients
{
    array<T> x, w_q, w_k, w_v, w_o;
    array<T> b_q, b_k, b_v, b_o;  // not computed (default, 0-d arrays) without biases
};
// The rules causal_self_attention_backward calls for its QK-norm, rotary embedding and biases: the
// correct ones unless a fault hook swapped one for a deliberate mistake (models/manual_faults.hpp).
template <class T>
struct attention_rules
{
    array<T> (*qk_norm)(const array<T>&, const head_rms_cache<T>&) = head_rms_backward<T>;
    array<T> (*rope)(const array<T>&, double, std::size_t) = rope_backward<T>;
    array<T> (*bias)(const array<T>&) = bias_backward<T>;
};

// Reverses causal_self_attention_forward, line by line.
template <class T>
attention_gradients<T> causal_self_attention_backward(const array<T>& d_y, const attention_cache<T>& cache,
                                                      const attention_weights<T>& weights,
                                                      const attention_rules<T>& rules = {});
}  // namespace xgrad::models::manual
