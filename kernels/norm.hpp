// Row kernels of the fused norms, ops::layer_norm and ops::rms_norm (ops/norms.cpp), on
// xsimd batches: forward, one sweep over a row for its statistics and one for its output; backward, one
// sweep for the row's sums, one for dx and the row's shares of dw (and db). Internal to ops/*.cpp; a row
// is n contiguous entries, the weights (and bias) n entries too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/simd.hpp"

namespace xgrad::kernels::norm
{
template <class T>
using batch = xsimd::batch<T>;

template <class T>
struct row_stats
{
    T mean;  // LayerNorm's mean (0 for RMSNorm)
    T rstd;  // 1 / sqrt(var + eps), or 1 / sqrt(mean(x^2) + eps) for RMSNorm
};

// The one-sweep variance's rounding error is 1 + (mean - K)^2 / var times the two-pass one's (K the
// shift); above this ratio the row is summed a second time, centred, so it stays within 2x of two-pass.
constexpr double most_shift_ratio = 1.0;

// The mean of the row's first min(n, batch size) entries (0 for n = 0): the shift of layer_norm_stats.
template <class T>
T first_mean(const T* x, std::size_t n)
{
    const std::size_t m = std::min(n, batch<T>::size);
    T sum = 0;
    for (std::size_t j = 0; j < m; ++j)
    {
        sum += x[j];
    }
    return m > 0 ? sum / static_cast<T>(m) : T(0);
}

// LayerNorm's statistics of one row: mean, and rstd = 1 / sqrt(var + eps), var = mean((x - mean)^2).
// One sweep sums x - K and (x - K)^2, K the mean of the row's first entries (first_mean): var =
// mean((x - K)^2) - (mean - K)^2. Shifted by the row's own level, a large mean costs no digits (the plain
// sum of squares' cancellation); where K lies far from the mean ((mean - K)^2 > most_shift_ratio var,
// an outlier among the first entries) a second sweep sums (x - mean)^2.
template <class T>
row_stats<T> layer_norm_stats(const T* x, std::size_t n, T eps)
{
    constexpr std::size_t w = batch<T>::size;
    const T shift = first_mean(x, n);
    const batch<T> k(shift);
    batch<T> s1a(T(0)), s1b(T(0)), s2a(T(0)), s2b(T(0));  // two of each: two dependency chains
    std::size_t j = 0;
    for (; j + 2 * w <= n; j += 2 * w)
    {
        const batch<T> a = batch<T>::load_unaligned(x + j) - k;
        const batch<T> b = batch<T>::load_unaligned(x + j + w) - k;
        s1a += a;
        s1b += b;
        s2a = xsimd::fma(a, a, s2a);
        s2b = xsimd::fma(b, b, s2b);
    }
    for (; j + w <= n; j += w)
    {
        const batch<T> a = batch<T>::load_unaligned(x + j) - k;
        s1a += a;
        s2a = xsimd::fma(a, a, s2a);
    }
    T s1 = xsimd::hadd(s1a + s1b), s2 = xsimd::hadd(s2a + s2b);
    for (; j < n; ++j)
    {
        const T a = x[j] - shift;
        s1 += a;
        s2 += a * a;
    }
    const T count = static_cast<T>(n);
    const T offset = s1 / count;  // mean - K
    const T mean = shift + offset;
    T var = s2 / count - offset * offset;
    if (!(offset * offset <= T(most_shift_ratio) * var))  // also var < 0, and NaN
    {
        var = simd::centred_dot(x, mean, x, mean, n) / count;
    }
    return {mean, T(1) / std::sqrt(var + eps)};
}

// y = (x - mean) rstd w + b over one row.
template <class T>
void layer_norm_row(const T* x, const T* w, const T* b, T* y, std::size_t n, row_stats<T> s)
{
    constexpr std::size_t width = batch<T>::size;
    const batch<T> mean(s.mean), rstd(s.rstd);
    std::size_t j = 0;
    for (; j + width <= n; j += width)
    {
        const batch<T> xhat = (batch<T>::load_unaligned(x + j) - mean) * rstd;
        const batch<T> yj = xsimd::fma(xhat, batch<T>::load_unaligned(w + j), batch<T>::load_unaligned(b + j));
        yj.store_unaligned(y + j);
    }
    for (; j < n; ++j)
    {
        y[j] = std::fma((x[j] - s.mean) * s.rstd, w[j], b[j]);
    }
}

// dxhat = g w into `dxhat`, and the sums of dxhat and of dxhat (x - shift), from the stored values (so
// that dxhat - mean(dxhat) is exactly 0 for n = 1). Two dependency chains for each sum.
template <class T>
void store_dxhat(const T* x, const T* g, const T* w, std::size_t n, T shift, T* dxhat, T& sum, T& shifted_sum)
{
    constexpr std::size_t width = batch<T>::size;
    const batch<T> k(shift);
    batch<T> a1(T(0)), a2(T(0)), b1(T(0)), b2(T(0));
    std::size_t j = 0;
    for (; j + 2 * width <= n; j += 2 * width)
    {
        const batch<T> d1 = batch<T>::load_unaligned(g + j) * batch<T>::load_unaligned(w + j);
        const batch<T> d2 = batch<T>::load_unaligned(g + j + width) * batch<T>::load_unaligned(w + j + width);
        d1.store_unaligned(dxhat + j);
        d2.store_unaligned(dxhat + j + width);
        a1 += d1;
        a2 += d2;
        b1 = xsimd::fma(d1, batch<T>::load_unaligned(x + j) - k, b1);
        b2 = xsimd::fma(d2, batch<T>::load_unaligned(x + j + width) - k, b2);
    }
    for (; j + width <= n; j += width)
    {
        const batch<T> d1 = batch<T>::load_unaligned(g + j) * batch<T>::load_unaligned(w + j);
        d1.store_unaligned(dxhat + j);
        a1 += d1;
        b1 = xsimd::fma(d1, batch<T>::load_unaligned(x + j) - k, b1);
    }
    sum = xsimd::hadd(a1 + a2);
    shifted_sum = xsimd::hadd(b1 + b2);
    for (; j < n; ++j)
    {
        dxhat[j] = g[j] * w[j];
        sum += dxhat[j];
        shifted_sum += dxhat[j] * (x[j] - shift);
    }
}

// One row of LayerNorm's backward, with dxhat = g w and xhat = (x - mean) rstd:
//   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),   dw += g xhat,   db += g.
// dx, dw or db null: not wanted. dxhat goes into dx first (one sweep, with its two sums), then dx, dw
// and db in a second sweep.
template <class T>
void layer_norm_row_backward(const T* x, const T* g, const T* w, std::size_t n, row_stats<T> s, T* dx, T* dw,
                             T* db)
{
    T dxhat_mean = 0, dxhat_xhat_mean = 0;
    if (dx)
    {
        T sum = 0, centred_sum = 0;
        store_dxhat(x, g, w, n, s.mean, dx, sum, centred_sum);
        dxhat_mean = sum / static_cast<T>(n);
        dxhat_xhat_mean = s.rstd * centred_sum / static_cast<T>(n);  // rstd mean(dxhat (x - mean))
    }
    constexpr std::size_t width = batch<T>::size;
    const batch<T> mean(s.mean), rstd(s.rstd), m1(dxhat_mean), m2(dxhat_xhat_mean);
    std::size_t j = 0;
    for (; j + width <= n; j += width)
    {
        const batch<T> gj = batch<T>::load_unaligned(g + j);
        const batch<T> xhat = (batch<T>::load_unaligned(x + j) - mean) * rstd;
        if (dx)
        {
            (rstd * (batch<T>::load_unaligned(dx + j) - m1 - xhat * m2)).store_unaligned(dx + j);
        }
        if (dw)
        {
            xsimd::fma(gj, xhat, batch<T>::load_unaligned(dw + j)).store_unaligned(dw + j);
        }
        if (db)
        {
            (batch<T>::load_unaligned(db + j) + gj).store_unaligned(db + j);
        }
    }
    for (; j < n; ++j)
    {
        const T xhat = (x[j] - s.mean) * s.rstd;
        if (dx)
        {
            dx[j] = s.rstd * (dx[j] - dxhat_mean - xhat * dxhat_xhat_mean);
        }
        if (dw)
        {
            dw[j] = std::fma(g[j], xhat, dw[j]);
        }
        if (db)
        {
            db[j] += g[j];
        }
    }
}

// RMSNorm's 1 / sqrt(mean(x^2) + eps) of one row, one sweep (no mean to subtract: no cancellation).
template <class T>
T rms_norm_rstd(const T* x, std::size_t n, T eps)
{
    constexpr std::size_t width = batch<T>::size;
    batch<T> a(T(0)), b(T(0));
    std::size_t j = 0;
    for (; j + 2 * width <= n; j += 2 * width)
    {
        const batch<T> x1 = batch<T>::load_unaligned(x + j), x2 = batch<T>::load_unaligned(x + j + width);
        a = xsimd::fma(x1, x1, a);
        b = xsimd::fma(x2, x2, b);
    }
    for (; j + width <= n; j += width)
    {
        const batch<T> x1 = batch<T>::load_unaligned(x + j);
        a = xsimd::fma(x1, x1, a);
    }
    T squares = xsimd::hadd(a + b);
    for (; j < n; ++j)
    {
        squares += x[j] * x[j];
    }
    return T(1) / std::sqrt(squares / static_cast<T>(n) + eps);
}

// y = x r w over one row.
template <class T>
void rms_norm_row(const T* x, const T* w, T* y, std::size_t n, T r)
{
    constexpr std::size_t width = batch<T>::size;
    const batch<T> vr(r);
    std::size_t j = 0;
    for (; j + width <= n; j += width)
    {
        (batch<T>::load_unaligned(x + j) * vr * batch<T>::load_unaligned(w + j)).store_unaligned(y + j);
    }
    for (; j < n; ++j)
    {
        y[j] = x[j] * r * w[j];
    }
}

// sum_j g_j w_j x_j r: one sweep, two dependency chains.
template <class T>
T dxhat_xhat_sum(const T* x, const T* g, const T* w, std::size_t n, T r)
{
    constexpr std::size_t width = batch<T>::size;
    const batch<T> vr(r);
    batch<T> a(T(0)), b(T(0));
    std::size_t j = 0;
    for (; j + 2 * width <= n; j += 2 * width)
    {
        const batch<T> g1 = batch<T>::load_unaligned(g + j), g2 = batch<T>::load_unaligned(g + j + width);
        a += g1 * batch<T>::load_unaligned(w + j) * batch<T>::load_unaligned(x + j) * vr;
        b += g2 * batch<T>::load_unaligned(w + j + width) * batch<T>::load_unaligned(x + j + width) * vr;
    }
    for (; j + width <= n; j += width)
    {
        const batch<T> gw = batch<T>::load_unaligned(g + j) * batch<T>::load_unaligned(w + j);
        a += gw * batch<T>::load_unaligned(x + j) * vr;
    }
    T sum = xsimd::hadd(a + b);
    for (; j < n; ++j)
    {
        sum += g[j] * w[j] * x[j] * r;
    }
    return sum;
}

// One row of RMSNorm's backward, with dxhat = g w and xhat = x r:
//   dx = r (dxhat - xhat mean(dxhat xhat)),   dw += g xhat.
// dx or dw null: not wanted. For n = 1, dx = r g w eps / (x^2 + eps) comes out of a cancellation; the
// products are taken in hand-derived RMSNorm's order (models/manual_layers.cpp), which it is tested
// against.
template <class T>
void rms_norm_row_backward(const T* x, const T* g, const T* w, std::size_t n, T r, T* dx, T* dw)
{
    const T dxhat_xhat_mean = dx ? dxhat_xhat_sum(x, g, w, n, r) / static_cast<T>(n) : T(0);
    constexpr std::size_t width = batch<T>::size;
    const batch<T> vr(r), m(dxhat_xhat_mean);
    std::size_t j = 0;
    for (; j + width <= n; j += width)
    {
        const batch<T> gj = batch<T>::load_unaligned(g + j), xj = batch<T>::load_unaligned(x + j);
        if (dx)
        {
            (vr * (gj * batch<T>::load_unaligned(w + j) - xj * vr * m)).store_unaligned(dx + j);
        }
        if (dw)
        {
            (batch<T>::load_unaligned(dw + j) + gj * xj * vr).store_unaligned(dw + j);
        }
    }
    for (; j < n; ++j)
    {
        if (dx)
        {
            dx[j] = r * (g[j] * w[j] - x[j] * r * dxhat_xhat_mean);
        }
        if (dw)
        {
            dw[j] += g[j] * x[j] * r;
        }
    }
}
}  // namespace xgrad::kernels::norm
