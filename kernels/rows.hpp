// Rows of the last axis, and the row loops of the fused linear ops (ops/linear.cpp): the bias added to
// every row of a product, and a gradient's column sums (the bias's gradient). Internal to ops/*.cpp.
#pragma once

#include <cstddef>

#include "autodiff/xtensor.hpp"

namespace xgrad::kernels
{
// Rows of the last axis: `count` rows of `length` elements. The row count comes from the leading axes,
// so an empty last axis still has its rows.
struct rows_of
{
    std::size_t count = 1;
    std::size_t length = 0;

    explicit rows_of(const shape_t& shape)
    {
        for (std::size_t ax = 0; ax + 1 < shape.size(); ++ax)
        {
            count *= shape[ax];
        }
        length = shape.back();
    }
};

// b_j added to every row of y, in place.
template <class T>
void add_bias_rows(array<T>& y, const array<T>& b)
{
    const std::size_t n = b.size(), rows = y.size() / n;
    const T* bias = b.data();
    for (std::size_t r = 0; r < rows; ++r)
    {
        T* row = y.data() + r * n;
        for (std::size_t j = 0; j < n; ++j)
        {
            row[j] += bias[j];
        }
    }
}

// sum over the rows of g (..., n): (n).
template <class T>
array<T> column_sums(const array<T>& g, std::size_t n)
{
    array<T> sums = xt::zeros<T>(shape_t{n});
    const std::size_t rows = g.size() / n;
    T* out = sums.data();
    for (std::size_t r = 0; r < rows; ++r)
    {
        const T* row = g.data() + r * n;
        for (std::size_t j = 0; j < n; ++j)
        {
            out[j] += row[j];
        }
    }
    return sums;
}
}  // namespace xgrad::kernels
