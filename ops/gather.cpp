// Gather and its adjoint, on flat positions: take(x, indices) reads x.flat[indices] (NumPy's take without
// an axis), scatter_add(values, indices, shape) adds values into zeros of `shape` at those positions
// (NumPy's add.at); each one's rule is the other (on arrays a loop, on vars the op). Every NumPy index
// (integers, slices with steps, None, ..., integer and boolean arrays) and take_along_axis is one take
// with the positions NumPy computes (python/xgrad/_tape.py).
#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
// Throws naming `op` for a position outside [0, size), with where it was.
void check_positions(const char* op, const ids_t& indices, std::size_t size)
{
    for (std::size_t i = 0; i < indices.size(); ++i)
    {
        const std::int64_t at = indices.flat(i);
        if (at < 0 || static_cast<std::size_t>(at) >= size)
        {
            fail(op, "position " + std::to_string(at) + " (entry " + std::to_string(i) +
                         " of the indices) is outside [0, " + std::to_string(size) + ")");
        }
    }
}

// out[i] = in.flat[indices[i]].
template <class T>
array<T> take_values(const array<T>& in, const ids_t& indices)
{
    array<T> out = array<T>::from_shape(indices.shape());
    for (std::size_t i = 0; i < indices.size(); ++i)
    {
        out.flat(i) = in.flat(static_cast<std::size_t>(indices.flat(i)));
    }
    return out;
}

// zeros(shape), then out.flat[indices[i]] += values[i] (repeated positions accumulate).
template <class T>
array<T> scatter_values(const array<T>& values, const ids_t& indices, const shape_t& shape)
{
    array<T> out = xt::zeros<T>(shape);
    for (std::size_t i = 0; i < indices.size(); ++i)
    {
        out.flat(static_cast<std::size_t>(indices.flat(i))) += values.flat(i);
    }
    return out;
}
}  // namespace

// y[i] = x.flat[p_i], y of the indices' shape.   dL/dx = scatter_add(g, p, x.shape): each g[i] added at
// x's position p_i, so a position read twice gets both gradients.
template <class T>
var<T> take(const var<T>& x, const ids_t& indices)
{
    check_positions("take", indices, x.value().size());
    array<T> y = take_values(x.value(), indices);
    const shape_t in_shape = x.shape();
    auto on_arrays = [indices, in_shape](backward_context<T>& ctx) {
        ctx.accumulate(0, scatter_values(ctx.grad(), indices, in_shape));
    };
    auto on_vars = [indices, in_shape](graph_context<T>& ctx) {
        ctx.accumulate(0, ops::scatter_add(ctx.grad(), indices, in_shape));
    };
    auto rule = detail::with_var_form<T>(on_arrays, on_vars);
    return detail::record("take", {x}, std::move(y), saves_nothing, std::move(rule), 0,
                          indices.size() * sizeof(std::int64_t));
}

// y = zeros(shape); y.flat[p_i] += v[i], v of the indices' shape.   dL/dv = take(g, p): the adjoint of take.
template <class T>
var<T> scatter_add(const var<T>& values, const ids_t& indices, const shape_t& shape)
{
    if (to_shape(indices.shape()) != values.shape())
    {
        fail("scatter_add", "values of shape " + shape_str(values.shape()) + " for indices of shape " +
                                shape_str(to_shape(indices.shape())));
    }
    check_positions("scatter_add", indices, element_count(shape, "scatter_add"));
    array<T> y = scatter_values(values.value(), indices, shape);
    auto on_arrays = [indices](backward_context<T>& ctx) {
        ctx.accumulate(0, take_values(ctx.grad(), indices));
    };
    auto on_vars = [indices](graph_context<T>& ctx) { ctx.accumulate(0, ops::take(ctx.grad(), indices)); };
    auto rule = detail::with_var_form<T>(on_arrays, on_vars);
    return detail::record("scatter_add", {values}, std::move(y), saves_nothing, std::move(rule), 0,
                          indices.size() * sizeof(std::int64_t));
}

#define XGRAD_GATHER(T)                                                       \
    template var<T> take(const var<T>&, const ids_t&);                        \
    template var<T> scatter_add(const var<T>&, const ids_t&, const shape_t&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_GATHER)
#undef XGRAD_GATHER
}  // namespace xgrad::ops
