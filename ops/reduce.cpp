// Reductions: sum and mean over all axes or a given set of axes.
#include <algorithm>
#include <xtensor/xreducer.hpp>

#include "autodiff/instantiate.hpp"
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
    return detail::record(op, {x}, std::move(y), saves_nothing, [keep, in_shape, factor](backward_context<T>& ctx) {
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
        array<T> dx = xt::broadcast(kept, in_shape);
        if (factor != T(1))
        {
            dx *= factor;
        }
        ctx.accumulate(0, std::move(dx));
    });
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

#define XGRAD_REDUCE(T)                                                            \
    template var<T> sum(const var<T>&);                                            \
    template var<T> sum(const var<T>&, const std::vector<std::size_t>&, bool);     \
    template var<T> mean(const var<T>&);                                           \
    template var<T> mean(const var<T>&, const std::vector<std::size_t>&, bool);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_REDUCE)
}  // namespace xgrad::ops
