// One multi-head attention problem, shared by the composed-MHA tests (test_mha.cpp) and the fused ones
// (test_attention.cpp): inputs, weights, the upstream gradient G (loss = sum(Y * G)) and the options.
#pragma once

#include <cmath>
#include <optional>
#include <vector>

#include "models/mha.hpp"
#include "test_util.hpp"

namespace xgrad::test
{
template <class T>
struct mha_problem
{
    models::mha_config config;
    array<T> xq, xk, xv, w_q, w_k, w_v, w_o, grad_y;
    std::optional<mask_t> mask;
    bool causal = false;
    bool self = false;  // xq, xk, xv are the same array and are fed as ONE input

    models::mha_options options(bool fused = false) const { return {mask ? &*mask : nullptr, causal, fused}; }
    // The seven differentiable tensors, in the gradients' order.
    std::vector<array<T>*> tensors() { return {&xq, &xk, &xv, &w_q, &w_k, &w_v, &w_o}; }
    std::vector<const array<T>*> tensors() const { return {&xq, &xk, &xv, &w_q, &w_k, &w_v, &w_o}; }
};

// Cross-attention of (batch, tq, d) queries over (batch, tk, d) keys and values; weights ~ N(0, 1/d).
template <class T>
mha_problem<T> make_mha_problem(std::size_t batch, std::size_t tq, std::size_t tk, std::size_t d, std::size_t heads,
                                std::size_t kv_heads = 0, unsigned seed = 1, double input_scale = 1.0)
{
    mha_problem<T> p;
    p.config = {d, heads, kv_heads};
    p.xq = normal_array<T>({batch, tq, d}, seed, input_scale);
    p.xk = normal_array<T>({batch, tk, d}, seed + 1, input_scale);
    p.xv = normal_array<T>({batch, tk, d}, seed + 2, input_scale);
    const double w = 1.0 / std::sqrt(double(d));
    p.w_q = normal_array<T>({d, d}, seed + 3, w);
    p.w_k = normal_array<T>({d, p.config.kv_width()}, seed + 4, w);
    p.w_v = normal_array<T>({d, p.config.kv_width()}, seed + 5, w);
    p.w_o = normal_array<T>({d, d}, seed + 6, w);
    p.grad_y = normal_array<T>({batch, tq, d}, seed + 7);
    return p;
}

// Self-attention: one X fed as queries, keys and values.
template <class T>
mha_problem<T> make_self_mha_problem(std::size_t batch, std::size_t t, std::size_t d, std::size_t heads,
                                     unsigned seed = 1)
{
    mha_problem<T> p = make_mha_problem<T>(batch, t, t, d, heads, 0, seed);
    p.xk = p.xq;
    p.xv = p.xq;
    p.self = true;
    return p;
}

// The same problem in another float type (every tensor rounded, the options kept).
template <class U>
mha_problem<U> cast_problem(const mha_problem<double>& p)
{
    mha_problem<U> out;
    out.config = p.config;
    out.mask = p.mask;
    out.causal = p.causal;
    out.self = p.self;
    const auto from = p.tensors();
    const auto to = out.tensors();
    for (std::size_t k = 0; k < from.size(); ++k)
    {
        *to[k] = to_float_type<U>(*from[k]);
    }
    out.grad_y = to_float_type<U>(p.grad_y);
    return out;
}
}  // namespace xgrad::test
