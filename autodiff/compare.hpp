// How far apart two arrays of one shape are: the one definition every check of the project reports
// (gradcheck, the first-divergence report, the demos and the tests).
//
//   max_abs = max_i |a_i - b_i|                       (NaN on both sides agrees; NaN on one side is +inf)
//   scale   = max_i max(|a_i|, |b_i|)                 (the largest entry of either, NaN entries skipped)
//   max_rel = max_abs / scale                         (0 when max_abs is 0; +inf when scale is 0 but not max_abs)
//   close   = max_abs <= atol + rtol * scale
//
// Relative to the array's largest entry, not entry by entry: a gradient's tiny entries carry the same
// absolute rounding as its large ones, and dividing by them would report noise as error.
#pragma once

#include "autodiff/xtensor.hpp"

namespace xgrad
{
struct difference
{
    double max_abs = 0;
    double max_rel = 0;
    double scale = 0;  // the largest |entry| of either array

    bool within(double atol, double rtol) const { return max_abs <= atol + rtol * scale; }
};

// Throws std::invalid_argument naming "compare" and both shapes when they differ.
template <class T>
difference compare(const array<T>& a, const array<T>& b);
}  // namespace xgrad
