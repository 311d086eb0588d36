// The rotary embedding's table and row loop (ops/positions.cpp) on plain arrays, rows split across
// threads. No tape here. Internal to ops/*.cpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "autodiff/xtensor.hpp"
#include "kernels/parallel.hpp"
#include "kernels/rows.hpp"

namespace xgrad::kernels::rope
{
// cos and sin of the rotary angles, (T, dh/2) row-major: angle[t][i] = (offset + t) * base^(-2i/dh),
// computed in double and rounded once to T.
template <class T>
struct rope_table
{
    std::vector<T> cos, sin;

    rope_table(std::size_t length, std::size_t dh, double base, std::size_t offset)
        : cos(length * (dh / 2)), sin(length * (dh / 2))
    {
        for (std::size_t t = 0; t < length; ++t)
        {
            for (std::size_t i = 0; i < dh / 2; ++i)
            {
                const double frequency = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(dh));
                const double angle = static_cast<double>(offset + t) * frequency;
                cos[t * (dh / 2) + i] = static_cast<T>(std::cos(angle));
                sin[t * (dh / 2) + i] = static_cast<T>(std::sin(angle));
            }
        }
    }
};

// Rotates every pair (2i, 2i+1) of each row of (B, H, T, dh) by its angle, or by minus it (`inverse`).
template <class T>
array<T> rotate_pairs(const array<T>& x, const rope_table<T>& table, bool inverse)
{
    const shape_t shape = to_shape(x.shape());
    const std::size_t length = shape[2], dh = shape[3], half = dh / 2;
    const rows_of rows(shape);
    array<T> y = array<T>::from_shape(shape);
    const T* in = x.data();
    for_rows(rows.count, dh, [&](std::size_t r) {
        const std::size_t t = r % length;
        const T* c = table.cos.data() + t * half;
        const T* s = table.sin.data() + t * half;
        const T* xr = in + r * dh;
        T* yr = y.data() + r * dh;
        for (std::size_t i = 0; i < half; ++i)
        {
            const T sin_i = inverse ? -s[i] : s[i];
            const T a = xr[2 * i], b = xr[2 * i + 1];
            yr[2 * i] = a * c[i] - b * sin_i;
            yr[2 * i + 1] = a * sin_i + b * c[i];
        }
    });
    return y;
}
}  // namespace xgrad::kernels::rope
