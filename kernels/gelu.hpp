// The GELU in its two forms (docs/spec.md) on xsimd batches: the value, the slope d gelu / dx, and one
// row of the fused bias + GELU (ops::linear_gelu). One copy, read by ops/activations.cpp (gelu,
// gelu_exact) and ops/linear.cpp (linear_gelu, linear_gelu_exact).
// Internal to ops/*.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "kernels/map.hpp"

namespace xgrad::kernels::gelu
{
// The tanh approximation, gelu(x) = 0.5 x (1 + tanh(u)), u = k (x + a x^3), k = sqrt(2/pi), computed as
// gelu(x) = x s with s = 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + e^{-2u}): one exponential instead of
// tanh's polynomial, exponential and select (30% less time here), and no cancellation in 1 + tanh(u)
// for x << 0 (float32's relative error near gelu = -1e-3 falls from 8e-5 to 1e-6).
// gelu'(x) = s + 2 x s (1 - s) k (1 + 3 a x^2), since 0.5 (1 - tanh^2(u)) = 2 s (1 - s). Where s (1 - s)
// rounds to 0 the second term is 0, also when x^3 overflows (no 0 * inf).
struct tanh_form
{
    static constexpr double k = 0.7978845608028654;  // sqrt(2/pi)
    static constexpr double a = 0.044715;

    template <class V>
    static V sigmoid_of_2u(V x)
    {
        using T = typename scalar_of<V>::type;
        const V minus_2u = V(T(-2 * k)) * (x + V(T(a)) * (x * x * x));
        return V(T(1)) / (V(T(1)) + xsimd::exp(minus_2u));
    }
    template <class V>
    static V slope(V x, V s)
    {
        using T = typename scalar_of<V>::type;
        const V spread = s * (V(T(1)) - s);
        const V curve = V(T(2 * k)) * x * spread * (V(T(1)) + V(T(3 * a)) * x * x);
        return s + xsimd::select(spread == V(T(0)), V(T(0)), curve);
    }
    template <class V>
    static V value(V x)
    {
        return x * sigmoid_of_2u(x);
    }
    template <class V>
    static V slope(V x)
    {
        return slope(x, sigmoid_of_2u(x));
    }
    template <class V>
    static void value_and_slope(V x, V& value_out, V& slope_out)
    {
        const V s = sigmoid_of_2u(x);
        value_out = x * s;
        slope_out = slope(x, s);
    }
};

// The exact form: gelu(x) = x Phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2)); gelu'(x) = Phi(x) + x phi(x),
// phi(x) = e^{-x^2/2} / sqrt(2 pi).
// For x >= -1, 1 + erf >= 0.31 keeps its digits and xsimd's erf (within 2e-15 of libm's) runs on whole
// batches; below, 1 + erf cancels (at x = -6 it is 2e-9, and 0 in float32), and erfc takes over: in
// float32 xsimd's, in its batches (within 1e-6 relative of the exact value, far below float32's other
// rounding), in float64 libm's, one value at a time (xsimd's is off by up to 4e-12 relative there).
struct exact_form
{
    static constexpr double tail = -1.0;
    static constexpr double one_over_sqrt_2 = 0.70710678118654752;
    static constexpr double one_over_sqrt_2pi = 0.39894228040143268;

    template <class V>
    static V cdf(V x)
    {
        using T = typename scalar_of<V>::type;
        const V body = V(T(0.5)) * (V(T(1)) + xsimd::erf(x * V(T(one_over_sqrt_2))));
        if constexpr (std::is_same_v<T, float>)
        {
            return xsimd::select(x < V(T(tail)), V(T(0.5)) * xsimd::erfc(x * V(T(-one_over_sqrt_2))), body);
        }
        return body;
    }
    template <class T>
    static T cdf_tail(T x)
    {
        return T(0.5) * std::erfc(x * T(-one_over_sqrt_2));
    }
    template <class V>
    static V slope_from(V x, V cdf_of_x)
    {
        using T = typename scalar_of<V>::type;
        return cdf_of_x + x * V(T(one_over_sqrt_2pi)) * xsimd::exp(V(T(-0.5)) * x * x);
    }
    template <class T>
    static T slope_tail(T x)
    {
        return cdf_tail(x) + x * T(one_over_sqrt_2pi) * std::exp(T(-0.5) * x * x);
    }

    // In float64 the lanes below the tail are redone one value at a time with libm (NaN stays with the
    // batch: it is not < tail).
    template <class V, class F>
    static V with_tail(V x, V batch_result, F scalar)
    {
        using T = typename scalar_of<V>::type;
        if constexpr (std::is_same_v<T, double>)
        {
            if (xsimd::any(x < V(T(tail))))
            {
                alignas(64) T xs[V::size], out[V::size];
                x.store_aligned(xs);
                batch_result.store_aligned(out);
                for (std::size_t i = 0; i < V::size; ++i)
                {
                    out[i] = xs[i] < T(tail) ? scalar(xs[i]) : out[i];
                }
                return V::load_aligned(out);
            }
        }
        return batch_result;
    }
    template <class V>
    static V value(V x)
    {
        return with_tail(x, x * cdf(x), [](auto v) { return v * cdf_tail(v); });
    }
    template <class V>
    static V slope(V x)
    {
        return with_tail(x, slope_from(x, cdf(x)), [](auto v) { return slope_tail(v); });
    }
    template <class V>
    static void value_and_slope(V x, V& value_out, V& slope_out)
    {
        const V cdf_of_x = cdf(x);
        value_out = with_tail(x, x * cdf_of_x, [](auto v) { return v * cdf_tail(v); });
        slope_out = with_tail(x, slope_from(x, cdf_of_x), [](auto v) { return slope_tail(v); });
    }
};

// The map_into functors of the elementwise ops: y = gelu(x), and dL/dx = g gelu'(x).
template <class Form>
struct forward
{
    template <class V>
    V operator()(V x, V) const
    {
        return Form::value(x);
    }
};

template <class Form>
struct backward
{
    template <class V>
    V operator()(V x, V g) const
    {
        return g * Form::slope(x);
    }
};

// One row of the fused bias + GELU, n entries: h = pre + bias, out = gelu(h), and, unless `slope` is
// null (no backward will read it), slope := gelu'(h); the fused node passes slope = pre, so the product's
// own buffer holds the slope in place of h. The tail goes through the same batch code in a zero-padded
// buffer, as map_into's does.
template <class Form, class T>
void bias_gelu_row(const T* pre, const T* bias, T* out, T* slope, std::size_t n)
{
    using V = xsimd::batch<T>;
    constexpr std::size_t w = V::size;
    auto one = [slope](const T* p, const T* b, T* o, T* s) {
        const V h = V::load_unaligned(p) + V::load_unaligned(b);
        if (!slope)
        {
            Form::value(h).store_unaligned(o);
            return;
        }
        V value, slope_of_h;
        Form::value_and_slope(h, value, slope_of_h);
        value.store_unaligned(o);
        slope_of_h.store_unaligned(s);
    };
    std::size_t j = 0;
    for (; j + w <= n; j += w)
    {
        one(pre + j, bias + j, out + j, slope ? slope + j : nullptr);
    }
    if (j < n)
    {
        alignas(64) T p[w] = {}, b[w] = {}, o[w], s[w];
        std::copy(pre + j, pre + n, p);
        std::copy(bias + j, bias + n, b);
        one(p, b, o, s);
        std::copy(o, o + (n - j), out + j);
        if (slope)
        {
            std::copy(s, s + (n - j), slope + j);
        }
    }
}

// One row of its backward, n entries: g := g slope (dL/dh, in place), and sums += dL/dh (the bias's
// gradient, summed over rows).
template <class T>
void scale_by_slope_row(T* g, const T* slope, T* sums, std::size_t n)
{
    using V = xsimd::batch<T>;
    constexpr std::size_t w = V::size;
    std::size_t j = 0;
    for (; j + w <= n; j += w)
    {
        const V dh = V::load_unaligned(g + j) * V::load_unaligned(slope + j);
        dh.store_unaligned(g + j);
        (V::load_unaligned(sums + j) + dh).store_unaligned(sums + j);
    }
    for (; j < n; ++j)
    {
        g[j] *= slope[j];
        sums[j] += g[j];
    }
}
}  // namespace xgrad::kernels::gelu
