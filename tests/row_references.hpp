// Loop references over the last axis ("rows"), in long double: log-sum-exp, log_softmax, cross-entropy with
// ignored targets (-1) and its gradient, LayerNorm. The ops' tests judge the fused ops (ops/softmax.cpp,
// ops/norms.cpp) and their composed twins (ops/composed.hpp) against these, not against each other.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "test_util.hpp"

namespace xgrad::test
{
inline std::size_t row_length(const f64& x)
{
    return x.shape().back();
}

// log sum_j e^{x_j} of one row, in long double.
inline long double ref_log_sum_exp(const f64& x, std::size_t row)
{
    const std::size_t n = row_length(x);
    long double top = -std::numeric_limits<long double>::infinity();
    for (std::size_t j = 0; j < n; ++j)
    {
        top = std::max(top, static_cast<long double>(x.flat(row * n + j)));
    }
    long double total = 0;
    for (std::size_t j = 0; j < n; ++j)
    {
        total += std::exp(static_cast<long double>(x.flat(row * n + j)) - top);
    }
    return top + std::log(total);
}

inline f64 ref_log_softmax(const f64& x)
{
    const std::size_t n = row_length(x);
    f64 out = f64::from_shape(x.shape());
    for (std::size_t r = 0; r < x.size() / n; ++r)
    {
        const long double lse = ref_log_sum_exp(x, r);
        for (std::size_t j = 0; j < n; ++j)
        {
            out.flat(r * n + j) = static_cast<double>(x.flat(r * n + j) - lse);
        }
    }
    return out;
}

// Mean over rows whose target is not -1 of lse - x[target]; 0 when every row is ignored.
inline double ref_cross_entropy(const f64& logits, const ids_t& targets)
{
    const std::size_t n = row_length(logits);
    long double total = 0;
    std::size_t kept = 0;
    for (std::size_t r = 0; r < targets.size(); ++r)
    {
        if (targets.flat(r) == -1)
        {
            continue;
        }
        total += ref_log_sum_exp(logits, r) - logits.flat(r * n + static_cast<std::size_t>(targets.flat(r)));
        ++kept;
    }
    return kept ? static_cast<double>(total / kept) : 0.0;
}

// (softmax(x_r) - onehot(t_r)) / n_kept on kept rows, 0 on ignored rows: the gradient of the mean loss.
inline f64 ref_cross_entropy_grad(const f64& logits, const ids_t& targets)
{
    const std::size_t n = row_length(logits);
    f64 out = filled<double>(to_shape(logits.shape()), 0.0);
    std::size_t kept = 0;
    for (std::size_t r = 0; r < targets.size(); ++r)
    {
        kept += targets.flat(r) != -1;
    }
    for (std::size_t r = 0; r < targets.size(); ++r)
    {
        const std::int64_t t = targets.flat(r);
        if (t == -1)
        {
            continue;
        }
        const long double lse = ref_log_sum_exp(logits, r);
        for (std::size_t j = 0; j < n; ++j)
        {
            const long double p = std::exp(logits.flat(r * n + j) - lse);
            out.flat(r * n + j) = static_cast<double>((p - (static_cast<std::int64_t>(j) == t)) / kept);
        }
    }
    return out;
}

// (x - mean) / sqrt(var + eps) * w + b over the last axis, var biased, in long double.
inline f64 ref_layer_norm(const f64& x, const f64& w, const f64& b, double eps)
{
    const std::size_t d = row_length(x);
    f64 out = f64::from_shape(x.shape());
    for (std::size_t r = 0; r < x.size() / d; ++r)
    {
        long double mean = 0, var = 0;
        for (std::size_t j = 0; j < d; ++j)
        {
            mean += x.flat(r * d + j);
        }
        mean /= d;
        for (std::size_t j = 0; j < d; ++j)
        {
            const long double c = x.flat(r * d + j) - mean;
            var += c * c;
        }
        var /= d;
        for (std::size_t j = 0; j < d; ++j)
        {
            const long double xhat = (x.flat(r * d + j) - mean) / std::sqrt(var + eps);
            out.flat(r * d + j) = static_cast<double>(xhat * w.flat(j) + b.flat(j));
        }
    }
    return out;
}
}  // namespace xgrad::test
