// Fused scaled dot-product attention on plain arrays (FlashAttention's schedule, on the CPU): the
// scores are computed one tile of queries x keys at a time, softmax-normalised on the fly (an online
// softmax: a running row maximum and sum), and never stored whole. The forward keeps only the per-row
// log-sum-exp; the backward recomputes each tile's probabilities from it. ops/attention.cpp wraps these
// in the differentiable op.
//
// Shapes: q (B, H, Tq, dh); k, v (B, G, Tk, dh) with H % G == 0, query head h reading key/value head
// h / (H / G). mask: nullptr or a boolean array that broadcasts to (B, H, Tq, Tk), true = attend. causal:
// bottom-right aligned, query i sees key j iff j <= i + (Tk - Tq); ANDed with the mask. Scale 1/sqrt(dh).
// A query row with no visible key gives output 0 and log-sum-exp -inf, and sends no gradient anywhere.
#pragma once

#include <cstdint>

#include "autodiff/xtensor.hpp"

namespace xgrad::kernels
{
template <class T>
struct attention_forward_result
{
    array<T> output;               // (B, H, Tq, dh)
    array<T> log_sum_exp;          // (B, H, Tq): log sum_j exp(s_ij) over visible keys; -inf if none
    std::uint64_t multiply_adds = 0;  // work actually done: tiles the causal mask removes are skipped
};

template <class T>
attention_forward_result<T> attention_forward(const array<T>& q, const array<T>& k, const array<T>& v,
                                              const mask_t* mask, bool causal);

template <class T>
struct attention_gradients
{
    array<T> q, k, v;
};

// dL/dq, dL/dk, dL/dv from dL/d(output), given the forward's inputs, output and log-sum-exp.
template <class T>
attention_gradients<T> attention_backward(const array<T>& q, const array<T>& k, const array<T>& v,
                                          const array<T>& output, const array<T>& log_sum_exp,
                                          const array<T>& grad_output, const mask_t* mask, bool causal);

// The same on the projections' token-major layout, with no split into heads: q (B, Tq, H dh), k and v
// (B, Tk, G dh), the output (B, Tq, H dh) and its gradient likewise; log_sum_exp stays (B, H, Tq), and the
// mask broadcasts to (B, H, Tq, Tk) as above. The caller checks that H dh and G dh divide exactly.
template <class T>
attention_forward_result<T> attention_forward_token_major(const array<T>& q, const array<T>& k, const array<T>& v,
                                                          std::size_t heads, std::size_t kv_heads,
                                                          const mask_t* mask, bool causal);

template <class T>
attention_gradients<T> attention_backward_token_major(const array<T>& q, const array<T>& k, const array<T>& v,
                                                      const array<T>& output, const array<T>& log_sum_exp,
                                                      const array<T>& grad_output, std::size_t heads,
                                                      std::size_t kv_heads, const mask_t* mask, bool causal);
}  // namespace xgrad::kernels
