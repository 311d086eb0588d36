// Vectorised row kernels (xsimd) for the softmax: the few loops where per-element cost shows.
// Internal to ops/*.cpp; everything is on raw contiguous rows of length n.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

// GCC 12 reports -Wuninitialized / -Wmaybe-uninitialized from its own avx512fintrin.h wherever xsimd's
// AVX-512 code is inlined (_mm256_undefined_pd() is `__m256d __Y = __Y;` on purpose): hundreds of lines
// of a known false positive on an AVX-512 machine. The two warnings are off for the xsimd headers only
// (GCC judges them where the xsimd function is written); xgrad's own code keeps them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <xsimd/xsimd.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

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
    for (; j < n; ++j)
    {
        x[j] = std::exp(std::fma(s, x[j], -shift));
        total += x[j];
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

template <class T>
T dot(const T* a, const T* b, std::size_t n)
{
    constexpr std::size_t w = batch<T>::size;
    batch<T> acc(T(0));
    std::size_t j = 0;
    for (; j + w <= n; j += w)
    {
        acc = xsimd::fma(batch<T>::load_unaligned(a + j), batch<T>::load_unaligned(b + j), acc);
    }
    T total = xsimd::hadd(acc);
    for (; j < n; ++j)
    {
        total += a[j] * b[j];
    }
    return total;
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
}  // namespace xgrad::kernels::simd
