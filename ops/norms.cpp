// The norms over the last axis: layer_norm and rms_norm (docs/spec.md), each one node with a
// hand-derived backward rule, checked against its composed twin (ops/composed.hpp). The row kernels are
// in kernels/norm.hpp; rows are split across threads when there are many.
#include <vector>

#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "kernels/norm.hpp"
#include "kernels/parallel.hpp"
#include "kernels/rows.hpp"
#include "ops/checks.hpp"
#include "ops/composed.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
using checks::number_str;

void check_layer_norm(const shape_t& x, const shape_t& weight, const shape_t& bias, double eps)
{
    checks::check_has_last_axis("layer_norm", x);
    const shape_t d{x.back()};
    if (weight != d || bias != d)
    {
        fail("layer_norm", "weight of shape " + shape_str(weight) + " and bias of shape " + shape_str(bias) +
                               " must both be " + shape_str(d) + " for input of shape " + shape_str(x));
    }
    if (!(eps >= 0))
    {
        fail("layer_norm", "eps must be >= 0, got " + number_str(eps));
    }
}

void check_rms_norm(const shape_t& x, const shape_t& weight, double eps)
{
    checks::check_has_last_axis("rms_norm", x);
    if (weight != shape_t{x.back()})
    {
        fail("rms_norm", "weight of shape " + shape_str(weight) + " must be " + shape_str(shape_t{x.back()}) +
                             " for input of shape " + shape_str(x));
    }
    if (!(eps >= 0))
    {
        fail("rms_norm", "eps must be >= 0, got " + number_str(eps));
    }
}
}  // namespace

// Over the last axis (d entries): mu = mean(x), var = mean((x - mu)^2) (biased), rstd = 1 / sqrt(var + eps),
// xhat = (x - mu) rstd, y = xhat w + b.
// Backward, row by row with dxhat = g w:
//   dL/db = sum over rows of g,   dL/dw = sum over rows of g xhat,
//   dL/dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
// Derivation: dxhat_i/dx_k = rstd ([i = k] - 1/d - xhat_i xhat_k / d), since dmu/dx_k = 1/d and
// drstd/dx_k = -rstd^3 (x_k - mu) / d = -rstd^2 xhat_k / d; so dL/dx_k = sum_i dxhat_i dxhat_i/dx_k
// = rstd (dxhat_k - (1/d) sum_i dxhat_i - xhat_k (1/d) sum_i dxhat_i xhat_i).
// Saves x, w and mean, rstd per row; xhat is recomputed in backward. The row kernels (kernels/norm.hpp)
// take the statistics in one sweep, and dx, dw and db in one sweep after the row's two sums, dw and db
// as partial sums per block of rows.
template <class T>
var<T> layer_norm(const var<T>& x, const var<T>& weight, const var<T>& bias, T eps)
{
    check_layer_norm(x.shape(), weight.shape(), bias.shape(), static_cast<double>(eps));
    const kernels::rows_of rows(x.shape());
    const std::size_t d = rows.length;
    std::vector<kernels::norm::row_stats<T>> stats(rows.count);
    array<T> y = array<T>::from_shape(x.shape());
    const T* in = x.value().data();
    const T* w = weight.value().data();
    const T* b = bias.value().data();
    kernels::for_rows(rows.count, d, [&](std::size_t r) {
        stats[r] = kernels::norm::layer_norm_stats(in + r * d, d, eps);
        kernels::norm::layer_norm_row(in + r * d, w, b, y.data() + r * d, d, stats[r]);
    });

    const std::size_t stats_bytes = stats.size() * sizeof(stats[0]);
    auto rule = [rows, stats = std::move(stats)](backward_context<T>& ctx) {
        const std::size_t d = rows.length;
        const bool wants_dx = ctx.needs_grad(0), wants_dw = ctx.needs_grad(1), wants_db = ctx.needs_grad(2);
        const T* x = ctx.input(0).data();
        const T* w = ctx.input(1).data();
        const T* g = ctx.grad().data();
        array<T> dx = array<T>::from_shape(wants_dx ? ctx.input(0).shape() : shape_t{0});
        const std::size_t blocks = kernels::row_block_count(rows.count, d);
        kernels::block_sums<T> dw_sums(wants_dw ? blocks : 0, d), db_sums(wants_db ? blocks : 0, d);
        kernels::for_row_blocks(rows.count, blocks, [&](std::size_t block, std::size_t first, std::size_t end) {
            for (std::size_t r = first; r < end; ++r)
            {
                kernels::norm::layer_norm_row_backward(x + r * d, g + r * d, w, d, stats[r],
                                                       wants_dx ? dx.data() + r * d : nullptr,
                                                       wants_dw ? dw_sums.of(block) : nullptr,
                                                       wants_db ? db_sums.of(block) : nullptr);
            }
        });
        auto accumulate_total = [&](std::size_t k, const kernels::block_sums<T>& sums) {
            array<T> total = xt::zeros<T>(shape_t{d});
            sums.add_to(total.data());
            ctx.accumulate(k, std::move(total));
        };
        if (wants_dx)
        {
            ctx.accumulate(0, std::move(dx));
        }
        if (wants_dw)
        {
            accumulate_total(1, dw_sums);
        }
        if (wants_db)
        {
            accumulate_total(2, db_sums);
        }
    };
    auto twin = [eps](const std::vector<var<T>>& in) { return composed::layer_norm(in[0], in[1], in[2], eps); };
    return detail::record("layer_norm", {x, weight, bias}, std::move(y), saves_input0 | saves_input1,
                          detail::with_twin<T>(std::move(rule), twin), 0, stats_bytes);
}

// Over the last axis (d entries): r = 1 / sqrt(mean(x^2) + eps), xhat = x r, y = xhat w.
// Backward, row by row with dxhat = g w:
//   dL/dw = sum over rows of g xhat,   dL/dx = r (dxhat - xhat mean(dxhat xhat)).
// Derivation: dr/dx_k = -r^3 x_k / d, so dxhat_i/dx_k = r [i = k] - r xhat_i xhat_k / d and
// dL/dx_k = sum_i dxhat_i dxhat_i/dx_k = r dxhat_k - r xhat_k (1/d) sum_i dxhat_i xhat_i.
// Saves x, w and r per row; xhat is recomputed in backward. Row kernels: kernels/norm.hpp (dw as
// partial sums per block of rows).
template <class T>
var<T> rms_norm(const var<T>& x, const var<T>& weight, double eps)
{
    check_rms_norm(x.shape(), weight.shape(), eps);
    const kernels::rows_of rows(x.shape());
    const std::size_t d = rows.length;
    std::vector<T> rms_inv(rows.count);
    array<T> y = array<T>::from_shape(x.shape());
    const T* in = x.value().data();
    const T* w = weight.value().data();
    kernels::for_rows(rows.count, d, [&](std::size_t r) {
        rms_inv[r] = kernels::norm::rms_norm_rstd(in + r * d, d, static_cast<T>(eps));
        kernels::norm::rms_norm_row(in + r * d, w, y.data() + r * d, d, rms_inv[r]);
    });

    const std::size_t rms_bytes = rms_inv.size() * sizeof(T);
    auto rule = [rows, rms_inv = std::move(rms_inv)](backward_context<T>& ctx) {
        const std::size_t d = rows.length;
        const bool wants_dx = ctx.needs_grad(0), wants_dw = ctx.needs_grad(1);
        const T* x = ctx.input(0).data();
        const T* w = ctx.input(1).data();
        const T* g = ctx.grad().data();
        array<T> dx = array<T>::from_shape(wants_dx ? ctx.input(0).shape() : shape_t{0});
        const std::size_t blocks = kernels::row_block_count(rows.count, d);
        kernels::block_sums<T> dw_sums(wants_dw ? blocks : 0, d);
        kernels::for_row_blocks(rows.count, blocks, [&](std::size_t block, std::size_t first, std::size_t end) {
            for (std::size_t r = first; r < end; ++r)
            {
                kernels::norm::rms_norm_row_backward(x + r * d, g + r * d, w, d, rms_inv[r],
                                                     wants_dx ? dx.data() + r * d : nullptr,
                                                     wants_dw ? dw_sums.of(block) : nullptr);
            }
        });
        if (wants_dx)
        {
            ctx.accumulate(0, std::move(dx));
        }
        if (wants_dw)
        {
            array<T> dw = xt::zeros<T>(shape_t{d});
            dw_sums.add_to(dw.data());
            ctx.accumulate(1, std::move(dw));
        }
    };
    auto twin = [eps](const std::vector<var<T>>& in) { return composed::rms_norm(in[0], in[1], eps); };
    return detail::record("rms_norm", {x, weight}, std::move(y), saves_input0 | saves_input1,
                          detail::with_twin<T>(std::move(rule), twin), 0, rms_bytes);
}

#define XGRAD_NORMS(T)                                                                     \
    template var<T> layer_norm(const var<T>&, const var<T>&, const var<T>&, T);            \
    template var<T> rms_norm(const var<T>&, const var<T>&, double);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_NORMS)
}  // namespace xgrad::ops
