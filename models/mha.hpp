// Multi-head attention composed from primitive ops (Chapter 20, Listings 20.1-20.2). Nothing here has
// a backward rule of its own: the backward of section 20.3 emerges from matmul, reshape, permute and
// masked_softmax. Row-vector convention: Q = Xq W_Q with inputs (B, T, d) and weights (d_in, d_out).
#pragma once

#include <cstdint>

#include "models/masks.hpp"
#include "models/mha_config.hpp"
#include "ops/ops.hpp"

namespace xgrad::models
{
// W_Q (d, d), W_K (d, G dh), W_V (d, G dh), W_O (d, d), seeded N(0, 1/d).
template <class T>
struct mha_parameters
{
    mha_config config;
    parameter<T> W_Q, W_K, W_V, W_O;

    static mha_parameters init(const mha_config& config, unsigned seed);
    void zero_grad();
};

// The four weights recorded on one tape (a fresh tape per step; the gradients land in the parameters).
template <class T>
struct mha_weights
{
    var<T> W_Q, W_K, W_V, W_O;
};

template <class T>
mha_weights<T> bind(tape<T>& t, const mha_parameters<T>& p);

struct mha_options
{
    const mask_t* mask = nullptr;  // broadcast to (B, H, Tq, Tk); true = attend
    bool causal = false;           // bottom-right aligned; ANDed with mask
    // Attention as the one fused op ops::attention (online softmax, tile by tile, saving O(B H Tq) numbers
    // instead of the (B, H, Tq, Tk) weights) in place of the composed graph of matmul and masked_softmax,
    // which stays the default: it is the chapter's computation. Fused, mha_result::attention is empty.
    bool fused = false;
};

template <class T>
struct mha_result
{
    var<T> output;     // (B, Tq, d)
    var<T> attention;  // (B, H, Tq, Tk): the softmax weights (an empty handle with options.fused)
};

// Throws std::invalid_argument naming `op` (d % H, H % G, and each shape that does not fit) unless
// Xq (B, Tq, d), Xk = Xv (B, Tk, d), W_Q, W_O (d, d) and W_K, W_V (d, G dh).
void check_mha_shapes(const char* op, const mha_config& config, const shape_t& xq, const shape_t& xk,
                      const shape_t& xv, const shape_t& w_q, const shape_t& w_k, const shape_t& w_v,
                      const shape_t& w_o);

// (B, T, d) -> reshape (B, T, H, dh) -> permute (B, H, T, dh).
template <class T>
var<T> split_heads(const var<T>& x, std::size_t heads);

// (B, H, T, dh) -> permute (B, T, H, dh) -> reshape (B, T, H dh).
template <class T>
var<T> combine_heads(const var<T>& x);

// Chapter 19's attention for every head at once: softmax(Q K^T / sqrt(dh), mask) V, with Q (B, H, Tq, dh)
// and K, V (B, G, Tk, dh); query head h reads key/value head h / (H / G). Returns (output, weights).
template <class T>
std::pair<var<T>, var<T>> attention(const var<T>& q, const var<T>& k, const var<T>& v, const mask_t* mask);

// Cross-attention: queries from Xq (B, Tq, d), keys and values from Xk, Xv (B, Tk, d).
template <class T>
mha_result<T> multi_head_attention(const var<T>& xq, const var<T>& xk, const var<T>& xv, const mha_weights<T>& w,
                                   const mha_config& config, const mha_options& options = {});

// Self-attention: one X feeds all three projections, so its gradient is the sum of the three paths.
template <class T>
mha_result<T> self_attention(const var<T>& x, const mha_weights<T>& w, const mha_config& config,
                             const mha_options& options = {})
{
    return multi_head_attention(x, x, x, w, config, options);
}

// ---- counting (section 20.4), in multiply-adds: one multiply plus one add = 1; FLOPs are twice this ----

// 4 d^2, or 2 d^2 + 2 d (G dh) with G key/value heads.
std::uint64_t parameter_count(std::size_t d_model);
std::uint64_t parameter_count(const mha_config& config);

// Equation (20.5): 4 B T d^2 + 2 B T^2 d multiply-adds for the forward pass of self-attention.
std::uint64_t self_attention_multiply_adds(std::size_t batch, std::size_t length, std::size_t d_model);
// 2 B Tq d^2 + 2 B Tk d^2 + 2 B Tq Tk d (with G key/value heads the K, V projections are d x G dh).
std::uint64_t cross_attention_multiply_adds(std::size_t batch, std::size_t tq, std::size_t tk,
                                            const mha_config& config);
}  // namespace xgrad::models
