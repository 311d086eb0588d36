// The row loops of log_softmax and cross_entropy (ops/softmax.cpp) on plain arrays, vectorised
// (kernels/simd.hpp), rows split across threads. No tape here. Internal to ops/*.cpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "autodiff/xtensor.hpp"
#include "kernels/parallel.hpp"
#include "kernels/rows.hpp"
#include "kernels/simd.hpp"

namespace xgrad::kernels
{
// y_j = x_j - log sum_k e^{x_k} on every row of x into y (both `rows` of contiguous entries).
template <class T>
void log_softmax_rows(const T* in, T* out, const rows_of& rows)
{
    for_rows(rows.count, rows.length, [&](std::size_t r) {
        const T* xr = in + r * rows.length;
        T* yr = out + r * rows.length;
        const T top = simd::max_of(xr, rows.length);
        const T log_total = std::log(simd::sum_exp_shifted(xr, rows.length, top));
        for (std::size_t j = 0; j < rows.length; ++j)
        {
            yr[j] = (xr[j] - top) - log_total;
        }
    });
}

// dL/dx_i = g_i - softmax_i sum_j g_j on every row, in place over g (softmax = e^y, y the output).
template <class T>
void log_softmax_backward_rows(T* g, const T* y, const rows_of& rows)
{
    for_rows(rows.count, rows.length, [&](std::size_t r) {
        T* dr = g + r * rows.length;
        const T* yr = y + r * rows.length;
        simd::subtract_exp_times(dr, yr, rows.length, simd::sum_of(dr, rows.length));
    });
}

// For every row r of the logits x whose target t_r is not -1: top[r] = max_j x_{r j},
// log_total[r] = log sum_j e^{x_{r j} - top[r]} (so lse_r = top[r] + log_total[r]) and
// row_loss[r] = (top[r] - x_{r, t_r}) + log_total[r]. The two parts are kept apart: lse_r itself rounds
// to the logits' magnitude, and lse_r - x_{r, t_r} would lose the loss to cancellation (logits of 1e5 in
// float32). Ignored rows are not read (their entries stay as they were).
template <class T>
void cross_entropy_rows(const T* x, const ids_t& targets, const rows_of& rows, std::vector<T>& top,
                        std::vector<T>& log_total, std::vector<T>& row_loss)
{
    for_rows(rows.count, rows.length, [&](std::size_t r) {
        const std::int64_t t = targets.flat(r);
        if (t == -1)
        {
            return;  // ignored: the row is not read
        }
        const T* xr = x + r * rows.length;
        top[r] = simd::max_of(xr, rows.length);
        log_total[r] = std::log(simd::sum_exp_shifted(xr, rows.length, top[r]));
        row_loss[r] = (top[r] - xr[t]) + log_total[r];
    });
}

// dL/dx_{r j} = per_row (softmax(x_r)_j - [j = t_r]) into dx on every kept row, with
// softmax(x_r)_j = e^{x_{r j} - top[r]} / e^{log_total[r]} (cross_entropy_rows' two parts, never their sum);
// ignored rows of dx are not written.
template <class T>
void cross_entropy_backward_rows(T* dx, const T* x, const ids_t& targets, const rows_of& rows,
                                 const std::vector<T>& top, const std::vector<T>& log_total, T per_row)
{
    for_rows(rows.count, rows.length, [&](std::size_t r) {
        const std::int64_t t = targets.flat(r);
        if (t == -1)
        {
            return;
        }
        const T* xr = x + r * rows.length;
        T* dr = dx + r * rows.length;
        simd::scaled_exp_shifted(dr, xr, rows.length, per_row * std::exp(-log_total[r]), top[r]);  // softmax / n
        dr[t] -= per_row;
    });
}
}  // namespace xgrad::kernels
