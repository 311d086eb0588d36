// Multi-head attention with its backward derived by hand (Listings 20.1-20.3 and Chapter 19's
// single-head attention), on plain arrays, no tape. Written llm.c-style: every line of a backward says
// which forward line it reverses. It exists to be compared with the tape (models/mha.hpp) and with
// finite differences; both must agree to rounding.
#pragma once

#include <optional>

#include "models/mha.hpp"

namespace xgrad::models::manual
{
template <class T>
std::string shape_of(const array<T>& a)
{
    return shape_str(to_shape(a.shape()));
}

// std::invalid_argument "<op>: <name> must be <expected>, got <shape>" unless a has that shape.
template <class T>
void require_shape(const char* op, const char* name, const array<T>& a, const shape_t& expected)
{
    if (to_shape(a.shape()) != expected)
    {
        fail(op, std::string(name) + " must be " + shape_str(expected) + ", got " + shape_of(a));
    }
}

// Everything the backward needs, saved by the forward.
template <class T>
struct mha_cache
{
    mha_config config;
    array<T> xq, xk, xv;              // (B, Tq, d), (B, Tk, d), (B, Tk, d)
    array<T> w_q, w_k, w_v, w_o;      // (d, d), (d, G dh), (d, G dh), (d, d)
    std::optional<mask_t> mask;       // combined (user AND causal), broadcast to (B, H, Tq, Tk)
    array<T> q, k, v;                 // split heads: (B, H, Tq, dh), (B, G, Tk, dh), (B, G, Tk, dh)
    array<T> weights;                 // softmax P: (B, H, Tq, Tk)
    array<T> joined;                  // combined heads: (B, Tq, d)
};

template <class T>
struct mha_gradients
{
    array<T> xq, xk, xv;          // for self-attention the caller sums the three
    array<T> w_q, w_k, w_v, w_o;
};

template <class T>
struct mha_forward_result
{
    array<T> output;  // (B, Tq, d)
    mha_cache<T> cache;
};

// Listing 20.2.
template <class T>
mha_forward_result<T> mha_forward(const array<T>& xq, const array<T>& xk, const array<T>& xv, const array<T>& w_q,
                                  const array<T>& w_k, const array<T>& w_v, const array<T>& w_o,
                                  const mha_config& config, const mha_options& options = {});

// Listing 20.3.
template <class T>
mha_gradients<T> mha_backward(const array<T>& grad_output, const mha_cache<T>& cache);

// The attention of split heads (Chapter 19, one head at a time): q (B, H, Tq, dh); k, v (B, G, Tk, dh),
// query head h reading key/value head h / (H / G); mask nullptr or broadcast to (B, H, Tq, Tk). Writes the
// weights p = softmax(q k^T / sqrt(dh)) (B, H, Tq, Tk), 0 on rows the mask empties, and o = p v.
template <class T>
void attention_forward(const array<T>& q, const array<T>& k, const array<T>& v, const mask_t* mask, array<T>& p,
                       array<T>& o);
// Reverses attention_forward from the saved q, k, v and p: writes grad_q, grad_k, grad_v (a key/value
// head sums the gradients of the query heads that read it).
template <class T>
void attention_backward(const array<T>& grad_o, const array<T>& q, const array<T>& k, const array<T>& v,
                        const array<T>& p, array<T>& grad_q, array<T>& grad_k, array<T>& grad_v);

// Listing 20.1 on plain arrays.
template <class T>
array<T> split_heads(const array<T>& x, std::size_t heads);
template <class T>
array<T> combine_heads(const array<T>& x);
}  // namespace xgrad::models::manual
