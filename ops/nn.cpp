// Fused neural-network ops: linear (and linear + GELU), log_softmax, cross_entropy, layer_norm, dropout.
// Each is one node with a hand-derived backward rule (the composed twins in ops/composed.hpp check them),
// and each works on contiguous rows of the last axis; rows are split across threads when there are many.

// GCC 12 warns inside its own AVX-512 intrinsics when xsimd's exp and max inline here (a false positive
// on _mm512_undefined_*, GCC bug 105593, fixed in GCC 13). It must be silenced before they are included.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cmath>
#include <sstream>

#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "kernels/gelu.hpp"
#include "kernels/kernels.hpp"
#include "kernels/norm.hpp"
#include "kernels/parallel.hpp"
#include "kernels/simd.hpp"
#include "ops/bf16_operands.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
namespace simd = kernels::simd;

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

void check_has_last_axis(const char* op, const shape_t& shape)
{
    if (shape.empty())
    {
        fail(op, "input must have at least one axis, got shape ()");
    }
}

template <class T>
std::string number_str(T value)
{
    std::ostringstream out;
    out << value;
    return out.str();
}

// The targets of cross_entropy: shape = logits' shape without the last axis, values in [0, V) or -1.
void check_targets(const shape_t& logits_shape, const ids_t& targets)
{
    const shape_t targets_shape = to_shape(targets.shape());
    const shape_t expected(logits_shape.begin(), logits_shape.end() - 1);
    if (targets_shape != expected)
    {
        fail("cross_entropy", "targets of shape " + shape_str(targets_shape) + " must have the shape of logits " +
                                  shape_str(logits_shape) + " without the last axis, " + shape_str(expected));
    }
    const auto vocab = static_cast<std::int64_t>(logits_shape.back());
    for (std::size_t i = 0; i < targets.size(); ++i)
    {
        const std::int64_t t = targets.flat(i);
        if (t != -1 && (t < 0 || t >= vocab))
        {
            fail("cross_entropy", "target " + std::to_string(t) + " at position " + position_str(i, targets_shape) +
                                      " is outside [0, " + std::to_string(vocab) +
                                      ") and not -1 (ignored), for logits of shape " + shape_str(logits_shape));
        }
    }
}

void check_layer_norm(const shape_t& x, const shape_t& weight, const shape_t& bias, double eps)
{
    check_has_last_axis("layer_norm", x);
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
// y = x W + b: x (..., d) with at least two axes, W (d, n), b (n), broadcast over every row.
void check_linear_shapes(const char* op, const shape_t& xs, const shape_t& ws, const shape_t& bs)
{
    if (xs.size() < 2 || ws.size() != 2 || bs.size() != 1 || xs.back() != ws[0] || bs[0] != ws[1])
    {
        fail(op, "need x (..., d) with at least 2 axes, weight (d, n) and bias (n), got x " + shape_str(xs) +
                     ", weight " + shape_str(ws) + ", bias " + shape_str(bs));
    }
}

std::uint64_t linear_multiply_adds(const shape_t& xs, const shape_t& ws)
{
    const shape_t batch(xs.begin(), xs.end() - 2);
    return kernels::matmul_multiply_adds(batch, xs[xs.size() - 2], ws[1], ws[0]);
}

// x W into a new array of shape (..., n), from the bf16 copies when the node rounded its operands once
// (ops/bf16_operands.hpp).
template <class T>
array<T> linear_product(const array<T>& x, const array<T>& w, const bf16_operands& copies)
{
    shape_t ys = to_shape(x.shape());
    ys.back() = w.shape()[1];
    array<T> y = array<T>::from_shape(ys);
    multiply_into(x, copies.a16.get(), false, w, copies.b16.get(), false, y);
    return y;
}

// The product's gradients given dh = dL/d(x W): dL/dx = dh W^T, dL/dW = x^T dh (inputs 0 and 1). When the
// forward rounded x and W once (`copies`: W's kept while x needs a gradient, x's while W needs one), dh
// is rounded once for both products.
template <class T>
void linear_backward_products(backward_context<T>& ctx, const array<T>& dh, const bf16_operands& copies)
{
    const kernels::bf16::bf16_copy dh16 = copies.rounded_gradient(dh);
    if (ctx.needs_grad(0))
    {
        array<T> dx = array<T>::from_shape(ctx.input(0).shape());
        multiply_into(dh, &dh16, false, ctx.input(1), copies.b16.get(), true, dx);  // dh W^T
        ctx.accumulate(0, std::move(dx));
    }
    if (ctx.needs_grad(1))
    {
        array<T> dw = array<T>::from_shape(ctx.input(1).shape());
        multiply_into(ctx.input(0), copies.a16.get(), true, dh, &dh16, false, dw);  // x^T dh
        ctx.accumulate(1, std::move(dw));
    }
}

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

}  // namespace

// y = x W + b, one node: the bias is added into the product's own buffer (no second array, no second
// pass over a new one). With g = dL/dy:
//   dL/dx = g W^T,  dL/dW = x^T g (summed over x's leading axes),  dL/db_j = sum over rows of g_j.
// Saves x and W (the product's operands), as matmul does; the bias's gradient needs only g.
template <class T>
var<T> linear(const var<T>& x, const var<T>& weight, const var<T>& bias)
{
    check_linear_shapes("linear", x.shape(), weight.shape(), bias.shape());
    const std::uint64_t macs = linear_multiply_adds(x.shape(), weight.shape());
    const bf16_operands rounded = bf16_operands::for_product(x, false, weight, false);
    array<T> y = linear_product(x.value(), weight.value(), rounded);
    add_bias_rows(y, bias.value());
    const bf16_operands copies = rounded.for_backward(x.requires_grad(), weight.requires_grad());
    const std::size_t kept = copies.bytes();
    auto rule = [n = bias.shape()[0], copies](backward_context<T>& ctx) {
        const array<T>& g = ctx.grad();
        linear_backward_products(ctx, g, copies);
        if (ctx.needs_grad(2))
        {
            ctx.accumulate(2, column_sums(g, n));
        }
    };
    return detail::record("linear", {x, weight, bias}, std::move(y), saves_input0 | saves_input1, std::move(rule),
                          macs, kept);
}

namespace
{
// y = gelu(h), h = x W + b, in one node (Form: kernels/gelu.hpp's tanh_form or exact_form). The bias and
// the GELU go in one pass over the product's buffer, which then holds gelu'(h) for the backward in
// place of h (so the node keeps what linear + gelu kept, and the backward computes no tanh or erf). The
// rule holds that array (its bytes are declared to the tape); when no backward will run (no_grad, or no
// input wants a gradient) the slope is not computed. With g = dL/dy:
//   dL/dh = g gelu'(h);  dL/dx = dL/dh W^T,  dL/dW = x^T dL/dh,  dL/db_j = sum over rows of dL/dh_j.
// dL/dh (in g's own buffer when the tape frees g next) and dL/db come out of one pass over g.
template <class Form, class T>
var<T> linear_then_gelu(const char* op, const var<T>& x, const var<T>& weight, const var<T>& bias)
{
    check_linear_shapes(op, x.shape(), weight.shape(), bias.shape());
    const std::uint64_t macs = linear_multiply_adds(x.shape(), weight.shape());
    const bf16_operands rounded = bf16_operands::for_product(x, false, weight, false);
    array<T> slope = linear_product(x.value(), weight.value(), rounded);  // x W, then gelu'(x W + b)
    array<T> y = array<T>::from_shape(slope.shape());
    const std::size_t n = bias.shape()[0], rows = slope.size() / std::max<std::size_t>(n, 1);
    const T* b = bias.value().data();
    const bool backward = detail::records_backward({x, weight, bias});
    kernels::for_rows(rows, n, [&](std::size_t r) {
        T* row = slope.data() + r * n;
        kernels::gelu::bias_gelu_row<Form>(row, b, y.data() + r * n, backward ? row : nullptr, n);
    });
    const bf16_operands copies = rounded.for_backward(x.requires_grad(), weight.requires_grad());
    const std::size_t kept = backward ? slope.size() * sizeof(T) + copies.bytes() : 0;
    auto rule = [n, rows, slope = std::move(slope), copies](backward_context<T>& ctx) {
        array<T> dh = ctx.take_grad();  // g, turned into dL/dh in place
        const std::size_t blocks = kernels::row_block_count(rows, n);
        kernels::block_sums<T> bias_sums(blocks, n);
        kernels::for_row_blocks(rows, blocks, [&](std::size_t block, std::size_t begin, std::size_t end) {
            for (std::size_t r = begin; r < end; ++r)
            {
                T* dh_row = dh.data() + r * n;
                kernels::gelu::scale_by_slope_row(dh_row, slope.data() + r * n, bias_sums.of(block), n);
            }
        });
        linear_backward_products(ctx, dh, copies);
        if (ctx.needs_grad(2))
        {
            array<T> db = xt::zeros<T>(shape_t{n});
            bias_sums.add_to(db.data());
            ctx.accumulate(2, std::move(db));
        }
    };
    return detail::record(op, {x, weight, bias}, std::move(y), saves_input0 | saves_input1, std::move(rule),
                          macs, kept);
}
}  // namespace

// gelu(x W + b), tanh form, in one node.
template <class T>
var<T> linear_gelu(const var<T>& x, const var<T>& weight, const var<T>& bias)
{
    return linear_then_gelu<kernels::gelu::tanh_form>("linear_gelu", x, weight, bias);
}

// gelu_exact(x W + b) in one node.
template <class T>
var<T> linear_gelu_exact(const var<T>& x, const var<T>& weight, const var<T>& bias)
{
    return linear_then_gelu<kernels::gelu::exact_form>("linear_gelu_exact", x, weight, bias);
}

// y_j = x_j - log sum_k e^{x_k} over the last axis.
// dy_j/dx_i = [i = j] - softmax_i, so dL/dx_i = g_i - softmax_i sum_j g_j, with softmax = e^y (saved output).
template <class T>
var<T> log_softmax(const var<T>& x)
{
    check_has_last_axis("log_softmax", x.shape());
    const rows_of rows(x.shape());
    array<T> y = array<T>::from_shape(x.shape());
    const T* in = x.value().data();
    kernels::for_rows(rows.count, rows.length, [&](std::size_t r) {
        const T* xr = in + r * rows.length;
        T* yr = y.data() + r * rows.length;
        const T top = simd::max_of(xr, rows.length);
        const T log_total = std::log(simd::sum_exp_shifted(xr, rows.length, top));
        for (std::size_t j = 0; j < rows.length; ++j)
        {
            yr[j] = (xr[j] - top) - log_total;
        }
    });
    auto rule = [rows](backward_context<T>& ctx) {
        array<T> dx = ctx.take_grad();  // g, turned into dL/dx row by row in place
        const T* y = ctx.output().data();
        kernels::for_rows(rows.count, rows.length, [&](std::size_t r) {
            T* dr = dx.data() + r * rows.length;
            const T* yr = y + r * rows.length;
            simd::subtract_exp_times(dr, yr, rows.length, simd::sum_of(dr, rows.length));
        });
        ctx.accumulate(0, std::move(dx));
    };
    return detail::record("log_softmax", {x}, std::move(y), saves_output, std::move(rule));
}

// L = (1/n) sum over the n kept rows r (target t_r != -1) of -log softmax(x_r)[t_r]
//   = (1/n) sum_r (lse_r - x_{r, t_r}),   lse_r = log sum_j e^{x_{r j}}.
// dL/dx_{r j} = (softmax(x_r)_j - [j = t_r]) / n on kept rows, 0 on ignored rows; softmax = e^{x - lse}.
// Saves the logits (already alive) and lse per row, not a softmax copy. No kept row: L = 0, gradient 0.
template <class T>
var<T> cross_entropy(const var<T>& logits, const ids_t& targets)
{
    const shape_t shape = logits.shape();
    check_has_last_axis("cross_entropy", shape);
    check_targets(shape, targets);
    const rows_of rows(shape);
    const T* x = logits.value().data();
    std::vector<T> lse(rows.count, T(0));
    std::vector<T> row_loss(rows.count, T(0));
    kernels::for_rows(rows.count, rows.length, [&](std::size_t r) {
        const std::int64_t t = targets.flat(r);
        if (t == -1)
        {
            return;  // ignored: the row is not read
        }
        const T* xr = x + r * rows.length;
        lse[r] = simd::log_sum_exp(xr, rows.length);
        row_loss[r] = lse[r] - xr[t];
    });
    std::size_t kept = 0;
    T total = 0;
    for (std::size_t r = 0; r < rows.count; ++r)
    {
        if (targets.flat(r) != -1)
        {
            ++kept;
            total += row_loss[r];
        }
    }
    array<T> loss = array<T>::from_shape(shape_t{});
    loss.flat(0) = kept > 0 ? total / static_cast<T>(kept) : T(0);

    const std::size_t rule_bytes = lse.size() * sizeof(T) + targets.size() * sizeof(std::int64_t);
    auto rule = [rows, targets, lse = std::move(lse), kept](backward_context<T>& ctx) {
        array<T> dx = xt::zeros<T>(ctx.input(0).shape());
        if (kept > 0)
        {
            const T per_row = ctx.grad().flat(0) / static_cast<T>(kept);  // g / n
            const T* x = ctx.input(0).data();
            kernels::for_rows(rows.count, rows.length, [&](std::size_t r) {
                const std::int64_t t = targets.flat(r);
                if (t == -1)
                {
                    return;
                }
                const T* xr = x + r * rows.length;
                T* dr = dx.data() + r * rows.length;
                simd::scaled_exp_shifted(dr, xr, rows.length, per_row, lse[r]);  // softmax / n
                dr[t] -= per_row;
            });
        }
        ctx.accumulate(0, std::move(dx));
    };
    return detail::record("cross_entropy", {logits}, std::move(loss), saves_input0, std::move(rule), 0, rule_bytes);
}

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
    const rows_of rows(x.shape());
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
    return detail::record("layer_norm", {x, weight, bias}, std::move(y), saves_input0 | saves_input1,
                          std::move(rule), 0, stats_bytes);
}

// y = x m / (1 - p), m_i ~ Bernoulli(1 - p) drawn from `generator` (one 64-bit draw per entry: keep when
// a uniform u in [0, 1) with 53 random bits is >= p). dL/dx = g m / (1 - p), with the same saved mask.
// The factor multiplies (x times 0 where dropped), so a NaN in x stays NaN, as in PyTorch.
template <class T>
var<T> dropout(const var<T>& x, T p, std::mt19937_64& generator, bool training)
{
    if (!(p >= T(0) && p < T(1)))
    {
        fail("dropout", "p must be in [0, 1), got " + number_str(p) + " (input of shape " + shape_str(x.shape()) +
                            ")");
    }
    if (p == T(0) || !training)
    {
        return x;
    }
    const T keep_scale = T(1) / (T(1) - p);
    const double drop_below = static_cast<double>(p);
    mask_t keep = mask_t::from_shape(x.value().shape());
    for (auto& k : keep)
    {
        const double u = static_cast<double>(generator() >> 11) * 0x1.0p-53;
        k = u >= drop_below;
    }
    array<T> y = array<T>::from_shape(x.shape());
    const T* in = x.value().data();
    for (std::size_t i = 0; i < y.size(); ++i)
    {
        y.data()[i] = in[i] * (keep.data()[i] ? keep_scale : T(0));
    }
    const std::size_t keep_bytes = keep.size() * sizeof(bool);
    auto rule = [keep = std::move(keep), keep_scale](backward_context<T>& ctx) {
        array<T> dx = ctx.take_grad();
        for (std::size_t i = 0; i < dx.size(); ++i)
        {
            dx.data()[i] *= keep.data()[i] ? keep_scale : T(0);
        }
        ctx.accumulate(0, std::move(dx));
    };
    return detail::record("dropout", {x}, std::move(y), saves_nothing, std::move(rule), 0, keep_bytes);
}

#define XGRAD_NN(T)                                                                        \
    template var<T> log_softmax(const var<T>&);                                            \
    template var<T> linear(const var<T>&, const var<T>&, const var<T>&);                   \
    template var<T> linear_gelu(const var<T>&, const var<T>&, const var<T>&);              \
    template var<T> linear_gelu_exact(const var<T>&, const var<T>&, const var<T>&);        \
    template var<T> cross_entropy(const var<T>&, const ids_t&);                            \
    template var<T> layer_norm(const var<T>&, const var<T>&, const var<T>&, T);            \
    template var<T> dropout(const var<T>&, T, std::mt19937_64&, bool);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_NN)
}  // namespace xgrad::ops
