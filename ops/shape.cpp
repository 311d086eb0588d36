// Shape ops: reshape, permute, transpose. Their backward is the inverse reshape or permutation.
#include <cstring>
#include <numeric>

#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "kernels/kernels.hpp"
#include "ops/ops.hpp"

namespace xgrad
{
namespace ops
{
namespace
{
shape_t resolve_shape(const shape_t& in, const std::vector<long>& requested)
{
    shape_t out(requested.size());
    std::size_t known = 1;
    long inferred = -1;
    for (std::size_t i = 0; i < requested.size(); ++i)
    {
        if (requested[i] == -1 && inferred < 0)
        {
            inferred = static_cast<long>(i);
            continue;
        }
        if (requested[i] < 0)
        {
            fail("reshape", "bad target size " + std::to_string(requested[i]) + " (only one -1 is allowed)");
        }
        out[i] = static_cast<std::size_t>(requested[i]);
        known *= out[i];
    }
    const std::size_t n = element_count(in);
    if (inferred >= 0)
    {
        if (known == 0 || n % known != 0)
        {
            fail("reshape", "cannot infer the -1 axis reshaping " + shape_str(in) + " with known sizes product " +
                                std::to_string(known));
        }
        out[inferred] = n / known;
    }
    const std::size_t count = element_count(out, "reshape");  // known's product may have wrapped: not here
    if (count != n)
    {
        fail("reshape", "cannot reshape " + shape_str(in) + " (" + std::to_string(n) + " elements) to " +
                            shape_str(out) + " (" + std::to_string(count) + " elements)");
    }
    return out;
}

std::vector<std::size_t> inverse_permutation(const std::vector<std::size_t>& axes)
{
    std::vector<std::size_t> inverse(axes.size());
    for (std::size_t i = 0; i < axes.size(); ++i)
    {
        inverse[axes[i]] = i;
    }
    return inverse;
}

void check_permutation(const std::vector<std::size_t>& axes, const shape_t& shape)
{
    std::vector<std::size_t> sorted = axes;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::size_t> identity(shape.size());
    std::iota(identity.begin(), identity.end(), 0);
    if (sorted != identity)
    {
        std::string list;
        for (auto a : axes)
        {
            list += (list.empty() ? "" : ", ") + std::to_string(a);
        }
        fail("permute", "axes [" + list + "] are not a permutation of the " + std::to_string(shape.size()) +
                            " axes of shape " + shape_str(shape));
    }
}
}  // namespace

// y = x viewed with another shape (same elements, row-major order).   dL/dx = g reshaped to x's shape
template <class T>
var<T> reshape(const var<T>& x, const std::vector<long>& shape)
{
    const shape_t in_shape = x.shape();
    const shape_t out_shape = resolve_shape(in_shape, shape);
    array<T> y = x.value();
    y.reshape(out_shape);
    return detail::record("reshape", {x}, std::move(y), saves_nothing, [in_shape](auto& ctx) {
        ctx.accumulate(0, rule::reshape(ctx.take_grad(), in_shape));
    });
}

// y[i_0, ..., i_n] = x[i_axes^-1 ...], i.e. y.shape[k] = x.shape[axes[k]].
// dL/dx = permute(g, inverse(axes))
template <class T>
var<T> permute(const var<T>& x, const std::vector<std::size_t>& axes)
{
    check_permutation(axes, x.shape());
    array<T> y = kernels::permute(x.value(), axes);
    auto inverse = inverse_permutation(axes);
    auto on_arrays = [inverse](backward_context<T>& ctx) { ctx.accumulate(0, kernels::permute(ctx.grad(), inverse)); };
    auto on_vars = [inverse](graph_context<T>& ctx) { ctx.accumulate(0, permute(ctx.grad(), inverse)); };
    return detail::record("permute", {x}, std::move(y), saves_nothing, detail::with_var_form<T>(on_arrays, on_vars));
}

// Swaps two axes: a permute whose backward is the same swap.
template <class T>
var<T> transpose(const var<T>& x, std::size_t axis1, std::size_t axis2)
{
    const std::size_t rank = x.shape().size();
    if (axis1 >= rank || axis2 >= rank)
    {
        fail("transpose", "axes (" + std::to_string(axis1) + ", " + std::to_string(axis2) +
                              ") out of range for shape " + shape_str(x.shape()));
    }
    std::vector<std::size_t> axes(rank);
    std::iota(axes.begin(), axes.end(), 0);
    std::swap(axes[axis1], axes[axis2]);
    return permute(x, axes);
}

#define XGRAD_SHAPE(T)                                                  \
    template var<T> reshape(const var<T>&, const std::vector<long>&);   \
    template var<T> permute(const var<T>&, const std::vector<std::size_t>&); \
    template var<T> transpose(const var<T>&, std::size_t, std::size_t);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_SHAPE)
}  // namespace ops
}  // namespace xgrad
