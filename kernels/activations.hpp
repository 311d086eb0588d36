// The activations' elementwise functors (ops/activations.cpp): sigmoid, silu, SwiGLU and erf, each
// mapping (x, other) to a value, with `other` the second operand (the incoming gradient in a backward,
// `up` in SwiGLU) or 0 when absent; kernels/map.hpp maps them over arrays. The GELU's two forms are in
// kernels/gelu.hpp. Internal to ops/*.cpp.
#pragma once

#include <cmath>

#include "kernels/map.hpp"

namespace xgrad::kernels::activations
{
constexpr double two_over_sqrt_pi = 1.1283791670955126;  // 2 / sqrt(pi)

// 1 / (1 + e^-x), with e^x / (1 + e^x) for x < 0: the exponential never exceeds 1, so no overflow.
// One value at a time (ops::sigmoid).
template <class T>
T stable_sigmoid(T x)
{
    if (x >= T(0))
    {
        return T(1) / (T(1) + std::exp(-x));
    }
    const T e = std::exp(x);  // also the branch NaN takes: NaN propagates
    return e / (T(1) + e);
}

// sigmoid(x) = 1 / (1 + e^-x) on a batch; for x -> -inf, e^-x -> inf and the quotient -> 0 (no NaN).
template <class V>
V sigmoid_of(V x)
{
    using T = typename scalar_of<V>::type;
    return V(T(1)) / (V(T(1)) + xsimd::exp(-x));
}

// d silu / dx = s (1 + x (1 - s)), s = sigmoid(x)
template <class V>
V silu_slope(V x)
{
    using T = typename scalar_of<V>::type;
    const V s = sigmoid_of(x);
    return s * (V(T(1)) + x * (V(T(1)) - s));
}

struct silu_forward
{
    template <class V>
    V operator()(V x, V) const
    {
        return x * sigmoid_of(x);
    }
};

struct silu_backward
{
    template <class V>
    V operator()(V x, V g) const
    {
        return g * silu_slope(x);
    }
};

struct swiglu_forward
{
    template <class V>
    V operator()(V gate, V up) const
    {
        return gate * sigmoid_of(gate) * up;
    }
};

// erf uses libm one value at a time, as does the exact GELU's tail (kernels/gelu.hpp): xsimd's erfc is
// off by up to 4e-12 relative in double (and 4e-6 in float) for x > 2, where GELU's x << 0 reads it.
struct erf_forward
{
    template <class T>
    T operator()(T x, T) const
    {
        return std::erf(x);
    }
};

struct erf_backward
{
    template <class T>
    T operator()(T x, T g) const
    {
        return g * T(two_over_sqrt_pi) * std::exp(-x * x);
    }
};
}  // namespace xgrad::kernels::activations
