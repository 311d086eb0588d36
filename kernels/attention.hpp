// Fused scaled dot-product attention on plain arrays (FlashAttention's schedule, on the CPU): the
// scores are computed one tile of queries x a panel of keys at a time, softmax-normalised on the fly (an
// online softmax: a running row maximum and sum), and never stored whole. The forward keeps only the
// per-row log-sum-exp; the backward recomputes each panel's probabilities from it. ops/attention.cpp wraps these
// in the differentiable op.
//
// Shapes: q (B, H, Tq, dh); k, v (B, G, Tk, dh) with H % G == 0, query head h reading key/value head
// h / (H / G). mask: nullptr or a boolean array that broadcasts to (B, H, Tq, Tk), true = attend. causal and
// window: the keys visible_keys() gives, ANDed with the mask (window > 0 needs causal, else
// std::invalid_argument). Scale 1/sqrt(dh). A query row with no visible key gives output 0 and
// log-sum-exp -inf, and sends no gradient anywhere.
#pragma once

#include <algorithm>
#include <cstdint>

#include "autodiff/xtensor.hpp"

namespace xgrad::kernels
{
// The keys query i (of Tq) may see among Tk keys, [begin, end), before any mask. Causal, bottom-right
// aligned with the offset off = Tk - Tq: key j iff j <= i + off; a sliding window w > 0 also needs
// j > i + off - w (the w keys ending at the query's own position). Not causal: every key.
struct key_range
{
    std::size_t begin, end;
    bool empty() const { return begin >= end; }
    std::size_t size() const { return empty() ? 0 : end - begin; }
    bool contains(std::size_t j) const { return begin <= j && j < end; }
};

inline key_range visible_keys(std::size_t i, std::size_t tq, std::size_t tk, bool causal, std::size_t window)
{
    if (!causal)
    {
        return {0, tk};
    }
    const std::size_t end = i + tk + 1 <= tq ? 0 : std::min(tk, i + tk + 1 - tq);  // i + off + 1, clipped
    return {window > 0 && end > window ? end - window : 0, end};
}

// Throws std::invalid_argument naming `op` unless window == 0 or causal (a window is a band of the causal
// mask).
void check_window(const char* op, bool causal, std::size_t window);

template <class T>
struct attention_forward_result
{
    array<T> output;               // (B, H, Tq, dh)
    array<T> log_sum_exp;          // (B, H, Tq): log sum_j exp(s_ij) over visible keys; -inf if none
    std::uint64_t multiply_adds = 0;  // work actually done: tiles the causal mask removes are skipped
};

template <class T>
attention_forward_result<T> attention_forward(const array<T>& q, const array<T>& k, const array<T>& v,
                                              const mask_t* mask, bool causal, std::size_t window = 0);

template <class T>
struct attention_gradients
{
    array<T> q, k, v;
};

// dL/dq, dL/dk, dL/dv from dL/d(output), given the forward's inputs, output and log-sum-exp.
template <class T>
attention_gradients<T> attention_backward(const array<T>& q, const array<T>& k, const array<T>& v,
                                          const array<T>& output, const array<T>& log_sum_exp,
                                          const array<T>& grad_output, const mask_t* mask, bool causal,
                                          std::size_t window = 0);

// The same on the projections' token-major layout, with no split into heads: q (B, Tq, H dh), k and v
// (B, Tk, G dh), the output (B, Tq, H dh) and its gradient likewise; log_sum_exp stays (B, H, Tq), and the
// mask broadcasts to (B, H, Tq, Tk) as above. The caller checks that H dh and G dh divide exactly.
template <class T>
attention_forward_result<T> attention_forward_token_major(const array<T>& q, const array<T>& k, const array<T>& v,
                                                          std::size_t heads, std::size_t kv_heads,
                                                          const mask_t* mask, bool causal,
                                                          std::size_t window = 0);

template <class T>
attention_gradients<T> attention_backward_token_major(const array<T>& q, const array<T>& k, const array<T>& v,
                                                      const array<T>& output, const array<T>& log_sum_exp,
                                                      const array<T>& grad_output, std::size_t heads,
                                                      std::size_t kv_heads, const mask_t* mask, bool causal,
                                                      std::size_t window = 0);
}  // namespace xgrad::kernels
