// Reductions: sum and mean over all axes or a given set of axes, max along one axis, and the biased
// variance over a set of axes.
#include <algorithm>
#include <cmath>
#include <xtensor/xreducer.hpp>

#include "autodiff/evaluate.hpp"
#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
std::vector<std::size_t> checked_axes(const char* op, const shape_t& shape, std::vector<std::size_t> axes)
{
    std::sort(axes.begin(), axes.end());
    for (std::size_t i = 0; i < axes.size(); ++i)
    {
        if (axes[i] >= shape.size() || (i > 0 && axes[i] == axes[i - 1]))
        {
            fail(op, "axis " + std::to_string(axes[i]) + (axes[i] >= shape.size() ? " out of range" : " repeated") +
                         " for input of shape " + shape_str(shape));
        }
    }
    return axes;
}

// The input's shape with the reduced axes set to 1: the gradient, reshaped to it, broadcasts back.
shape_t kept_shape(shape_t shape, const std::vector<std::size_t>& axes)
{
    for (auto a : axes)
    {
        shape[a] = 1;
    }
    return shape;
}

template <class T>
var<T> reduce_sum(const char* op, const var<T>& x, std::vector<std::size_t> axes, bool keep_dims, T factor)
{
    const shape_t in_shape = x.shape();
    axes = checked_axes(op, in_shape, std::move(axes));
    array<T> y = xt::sum(x.value(), axes, xt::evaluation_strategy::immediate);
    if (factor != T(1))
    {
        y *= factor;
    }
    const shape_t keep = kept_shape(in_shape, axes);
    if (keep_dims)
    {
        y.reshape(keep);
    }
    // y = f * sum_axes x.   dL/dx = f * g, broadcast back along the reduced axes
    auto on_arrays = [keep, in_shape, factor](backward_context<T>& ctx) {
        const array<T>& g = ctx.grad();
        if (g.size() == 1)  // a full reduction: every input element gets the same value
        {
            array<T> dx = array<T>::from_shape(in_shape);
            dx.fill(factor * g.flat(0));
            ctx.accumulate(0, std::move(dx));
            return;
        }
        array<T> kept = g;
        kept.reshape(keep);
        array<T> dx = evaluate(xt::broadcast(kept, in_shape));
        if (factor != T(1))
        {
            dx *= factor;
        }
        ctx.accumulate(0, std::move(dx));
    };
    auto on_vars = [keep, in_shape, factor](graph_context<T>& ctx) {
        const var<T> dx = rule::broadcast_to(rule::reshape(ctx.grad(), keep), in_shape);
        ctx.accumulate(0, factor == T(1) ? dx : factor * dx);
    };
    return detail::record(op, {x}, std::move(y), saves_nothing, detail::with_var_form<T>(on_arrays, on_vars));
}

std::vector<std::size_t> all_axes(std::size_t rank)
{
    std::vector<std::size_t> axes(rank);
    for (std::size_t i = 0; i < rank; ++i)
    {
        axes[i] = i;
    }
    return axes;
}

template <class T>
T mean_factor(const char* op, const shape_t& shape, const std::vector<std::size_t>& axes)
{
    std::size_t n = 1;
    for (auto a : checked_axes(op, shape, axes))
    {
        n *= shape[a];
    }
    if (n == 0)
    {
        fail(op, "mean over zero elements of shape " + shape_str(shape));
    }
    return T(1) / static_cast<T>(n);
}
}  // namespace

template <class T>
var<T> sum(const var<T>& x, const std::vector<std::size_t>& axes, bool keep_dims)
{
    return reduce_sum("sum", x, axes, keep_dims, T(1));
}

template <class T>
var<T> sum(const var<T>& x)
{
    return reduce_sum("sum", x, all_axes(x.shape().size()), false, T(1));
}

// mean = sum / n, with n the number of elements reduced.
template <class T>
var<T> mean(const var<T>& x, const std::vector<std::size_t>& axes, bool keep_dims)
{
    return reduce_sum("mean", x, axes, keep_dims, mean_factor<T>("mean", x.shape(), axes));
}

template <class T>
var<T> mean(const var<T>& x)
{
    const auto axes = all_axes(x.shape().size());
    return reduce_sum("mean", x, axes, false, mean_factor<T>("mean", x.shape(), axes));
}

namespace
{
// Which entry max keeps: a NaN over anything, else a strictly larger value (so ties keep the first).
template <class T>
bool replaces_max(T candidate, T current)
{
    return !std::isnan(current) && (candidate > current || std::isnan(candidate));
}
}  // namespace

namespace
{
// dL/dx for max: g at the first entry along the axis equal to the max (the first NaN when it is NaN).
template <class T>
array<T> to_first_max(const array<T>& x, const array<T>& max, const array<T>& g_in, const axis_split& s,
                      const shape_t& in_shape)
{
    array<T> dx = xt::zeros<T>(in_shape);
    const T* in = x.data();
    const T* top = max.data();
    const T* g = g_in.data();
    for (std::size_t o = 0; o < s.outer; ++o)
    {
        for (std::size_t i = 0; i < s.inner; ++i)
        {
            const std::size_t k = o * s.inner + i;
            const bool nan = std::isnan(top[k]);
            for (std::size_t j = 0; j < s.length; ++j)
            {
                const std::size_t at = (o * s.length + j) * s.inner + i;
                if (nan ? std::isnan(in[at]) : in[at] == top[k])
                {
                    dx.flat(at) = g[k];
                    break;
                }
            }
        }
    }
    return dx;
}
}  // namespace

// y = max_j x[.., j, ..] along `axis`; a NaN in a row makes its max NaN.
// dL/dx = g at the first entry equal to y (the first NaN when y is NaN), 0 elsewhere (as torch.max(dim)).
// The rule finds that entry again from the saved input and output.
template <class T>
var<T> max(const var<T>& x, std::size_t axis, bool keep_dims)
{
    const shape_t in_shape = x.shape();
    if (axis >= in_shape.size())
    {
        fail("max",
             "axis " + std::to_string(axis) + " out of range for input of shape " + shape_str(in_shape));
    }
    if (in_shape[axis] == 0)
    {
        fail("max", "axis " + std::to_string(axis) + " is empty in input of shape " + shape_str(in_shape));
    }
    const axis_split s = split_at(in_shape, axis);
    shape_t out_shape = in_shape;
    out_shape[axis] = 1;
    array<T> y = array<T>::from_shape(out_shape);
    const T* in = x.value().data();
    T* out = y.data();
    for (std::size_t o = 0; o < s.outer; ++o)
    {
        const T* block = in + o * s.length * s.inner;
        T* top = out + o * s.inner;
        std::copy(block, block + s.inner, top);
        for (std::size_t j = 1; j < s.length; ++j)
        {
            for (std::size_t i = 0; i < s.inner; ++i)
            {
                const T v = block[j * s.inner + i];
                top[i] = replaces_max(v, top[i]) ? v : top[i];
            }
        }
    }
    if (!keep_dims)
    {
        out_shape.erase(out_shape.begin() + static_cast<std::ptrdiff_t>(axis));
        y.reshape(out_shape);
    }
    const auto rule = [s, in_shape](backward_context<T>& ctx) {
        ctx.accumulate(0, to_first_max(ctx.input(0), ctx.output(), ctx.grad(), s, in_shape));
    };
    // On vars: g broadcast back, times the constant indicator of the entries the rule picks (to_first_max of 1).
    const auto on_vars = [s, in_shape, axis](graph_context<T>& ctx) {
        const var<T> top = ctx.output();
        const array<T> ones = xt::ones<T>(top.value().shape());
        const array<T> picked = to_first_max(ctx.input(0).value(), top.value(), ones, s, in_shape);
        shape_t keep = in_shape;
        keep[axis] = 1;
        ctx.accumulate(0, rule::broadcast_to(rule::reshape(ctx.grad(), keep), in_shape) * constant_like(top, picked));
    };
    return detail::record("max", {x}, std::move(y), saves_input0 | saves_output, detail::with_var_form<T>(rule, on_vars));
}

namespace
{
// mean(x) over `axes`, kept as size-1 axes so that it broadcasts against x.
template <class T>
array<T> kept_mean(const array<T>& x, const std::vector<std::size_t>& axes, const shape_t& keep, T inv_n)
{
    array<T> m = xt::sum(x, axes, xt::evaluation_strategy::immediate);
    m *= inv_n;
    m.reshape(keep);
    return m;
}
}  // namespace

// v = (1/n) sum_axes (x - m)^2, m = (1/n) sum_axes x   (biased, two passes: the mean first).
// dL/dx = g * 2 (x - m) / n   (the terms through m sum to 0: sum_axes (x - m) = 0); m recomputed from x
template <class T>
var<T> variance(const var<T>& x, const std::vector<std::size_t>& axes_in, bool keep_dims)
{
    const shape_t in_shape = x.shape();
    const T inv_n = mean_factor<T>("variance", in_shape, axes_in);
    const std::vector<std::size_t> axes = checked_axes("variance", in_shape, axes_in);
    const shape_t keep = kept_shape(in_shape, axes);
    array<T> centred = evaluate(x.value() - kept_mean(x.value(), axes, keep, inv_n));
    centred *= centred;
    array<T> v = xt::sum(centred, axes, xt::evaluation_strategy::immediate);
    v *= inv_n;
    if (keep_dims)
    {
        v.reshape(keep);
    }
    const auto rule = [axes, keep, inv_n](backward_context<T>& ctx) {
        const array<T>& x = ctx.input(0);
        array<T> dx = evaluate(x - kept_mean(x, axes, keep, inv_n));
        array<T> g = ctx.take_grad();
        g.reshape(keep);
        dx *= (T(2) * inv_n) * g;
        ctx.accumulate(0, std::move(dx));
    };
    const auto on_vars = [axes, keep, inv_n](graph_context<T>& ctx) {
        const var<T> x = ctx.input(0);
        const var<T> centred = x - mean(x, axes, true);
        ctx.accumulate(0, (T(2) * inv_n) * (centred * rule::reshape(ctx.grad(), keep)));
    };
    return detail::record("variance", {x}, std::move(v), saves_input0, detail::with_var_form<T>(rule, on_vars));
}

#define XGRAD_REDUCE(T)                                                            \
    template var<T> sum(const var<T>&);                                            \
    template var<T> sum(const var<T>&, const std::vector<std::size_t>&, bool);     \
    template var<T> mean(const var<T>&);                                           \
    template var<T> mean(const var<T>&, const std::vector<std::size_t>&, bool);     \
    template var<T> max(const var<T>&, std::size_t, bool);                         \
    template var<T> variance(const var<T>&, const std::vector<std::size_t>&, bool);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_REDUCE)
}  // namespace xgrad::ops
