// Vectorised row kernels (xsimd) for the softmax and the fused ops of ops/*.cpp: the few loops where
// per-element cost shows.
// Internal to ops/*.cpp; everything is on raw contiguous rows of length n.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "kernels/quiet_intrinsics.hpp"
XGRAD_INTRINSIC_HEADERS_BEGIN
#include <xsimd/xsimd.hpp>
XGRAD_INTRINSIC_HEADERS_END

namespace xgrad::kernels::simd
{
template <class T>
using batch = xsimd::batch<T>;

template <class T>
T max_of(const T* x, std::size_t n)
{
    constexpr std::size_t w = batch<T>::size;
    T top = -std::numeric_limits<T>::infinity();
    std::size_t j = 0;
    if (n >= w)
    {
        batch<T> acc = batch<T>::load_unaligned(x);
        for (j = w; j + w <= n; j += w)
        {
            acc = xsimd::max(acc, batch<T>::load_unaligned(x + j));
        }
        alignas(64) T lanes[w];
        acc.store_aligned(lanes);
        top = *std::max_element(lanes, lanes + w);
    }
    for (; j < n; ++j)
    {
        top = std::max(top, x[j]);
    }
    return top;
}

// x[j] = exp(s x[j] - shift) in place, with s x[j] - shift in one fused multiply-add (no rounding of
// s x[j] on its own: it matters for logits of 1e3); returns the sum. Masked entries hold -inf -> 0.
// The tail (n mod the batch width entries: most rows of a causal tile have one) goes through the same
// batch exp in a zero-padded buffer, whose padding lanes are left out of the sum: one exp per batch,
// not one libm call per entry, and the same arithmetic for every entry.
template <class T>
T exp_sum(T* x, std::size_t n, T s, T shift)
{
    constexpr std::size_t w = batch<T>::size;
    const batch<T> vs(s), vshift(-shift);
    batch<T> acc(T(0));
    std::size_t j = 0;
    for (; j + w <= n; j += w)
    {
        const batch<T> e = xsimd::exp(xsimd::fma(vs, batch<T>::load_unaligned(x + j), vshift));
        e.store_unaligned(x + j);
        acc += e;
    }
    T total = xsimd::hadd(acc);
    if (j < n)
    {
        alignas(64) T tail[w] = {};
        std::copy(x + j, x + n, tail);
        xsimd::exp(xsimd::fma(vs, batch<T>::load_aligned(tail), vshift)).store_aligned(tail);
        for (std::size_t c = 0; c < n - j; ++c)
        {
            x[j + c] = tail[c];
            total += tail[c];
        }
    }
    return total;
}

template <class T>
void scale_in_place(T* x, std::size_t n, T factor)
{
    constexpr std::size_t w = batch<T>::size;
    const batch<T> f(factor);
    std::size_t j = 0;
    for (; j + w <= n; j += w)
    {
        (batch<T>::load_unaligned(x + j) * f).store_unaligned(x + j);
    }
    for (; j < n; ++j)
    {
        x[j] *= factor;
    }
}

// out[j] = s y[j] (g[j] - d): the softmax backward of one row.
template <class T>
void softmax_row_backward(T* out, const T* y, const T* g, std::size_t n, T s, T d)
{
    constexpr std::size_t w = batch<T>::size;
    const batch<T> vs(s), vd(d);
    std::size_t j = 0;
    for (; j + w <= n; j += w)
    {
        const batch<T> yj = batch<T>::load_unaligned(y + j);
        (vs * yj * (batch<T>::load_unaligned(g + j) - vd)).store_unaligned(out + j);
    }
    for (; j < n; ++j)
    {
        out[j] = s * y[j] * (g[j] - d);
    }
}
// ---- the fused ops' row loops: log_softmax, cross_entropy (kernels/log_softmax.hpp), layer_norm ---

template <class T>
constexpr std::size_t width = batch<T>::size;

// sum_j x_j
template <class T>
T sum_of(const T* x, std::size_t n)
{
    batch<T> acc(T(0));
    std::size_t j = 0;
    for (; j + width<T> <= n; j += width<T>)
    {
        acc += batch<T>::load_unaligned(x + j);
    }
    T total = xsimd::hadd(acc);
    for (; j < n; ++j)
    {
        total += x[j];
    }
    return total;
}

// sum_j (a_j - shift_a) (b_j - shift_b): centred before multiplying, so a large mean costs no digits.
// With both shifts 0 it is the plain dot product, bit for bit (x - 0 is exact).
template <class T>
T centred_dot(const T* a, T shift_a, const T* b, T shift_b, std::size_t n)
{
    const batch<T> va(shift_a), vb(shift_b);
    batch<T> acc(T(0));
    std::size_t j = 0;
    for (; j + width<T> <= n; j += width<T>)
    {
        acc = xsimd::fma(batch<T>::load_unaligned(a + j) - va, batch<T>::load_unaligned(b + j) - vb, acc);
    }
    T total = xsimd::hadd(acc);
    for (; j < n; ++j)
    {
        total += (a[j] - shift_a) * (b[j] - shift_b);
    }
    return total;
}

// sum_j e^{x_j - shift}
template <class T>
T sum_exp_shifted(const T* x, std::size_t n, T shift)
{
    const batch<T> vshift(shift);
    batch<T> acc(T(0));
    std::size_t j = 0;
    for (; j + width<T> <= n; j += width<T>)
    {
        acc += xsimd::exp(batch<T>::load_unaligned(x + j) - vshift);
    }
    T total = xsimd::hadd(acc);
    for (; j < n; ++j)
    {
        total += std::exp(x[j] - shift);
    }
    return total;
}

// out_j = factor e^{x_j - shift}
template <class T>
void scaled_exp_shifted(T* out, const T* x, std::size_t n, T factor, T shift)
{
    const batch<T> vfactor(factor), vshift(shift);
    std::size_t j = 0;
    for (; j + width<T> <= n; j += width<T>)
    {
        (vfactor * xsimd::exp(batch<T>::load_unaligned(x + j) - vshift)).store_unaligned(out + j);
    }
    for (; j < n; ++j)
    {
        out[j] = factor * std::exp(x[j] - shift);
    }
}

// g_j -= e^{y_j} s in place: the log_softmax backward of one row, s = sum_j g_j.
template <class T>
void subtract_exp_times(T* g, const T* y, std::size_t n, T s)
{
    const batch<T> vs(s);
    std::size_t j = 0;
    for (; j + width<T> <= n; j += width<T>)
    {
        const batch<T> gj = batch<T>::load_unaligned(g + j);
        xsimd::fnma(xsimd::exp(batch<T>::load_unaligned(y + j)), vs, gj).store_unaligned(g + j);
    }
    for (; j < n; ++j)
    {
        g[j] -= std::exp(y[j]) * s;
    }
}

template <class T>
T dot(const T* a, const T* b, std::size_t n)
{
    return centred_dot(a, T(0), b, T(0), n);
}
}  // namespace xgrad::kernels::simd
