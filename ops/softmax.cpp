// masked_softmax: softmax(scale * x) over the last axis among the entries a boolean mask keeps.
// Scale and mask live inside the op (one pass over the scores); the mask gets no gradient.
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
template <class T>
var<T> softmax_op(const var<T>& x, const mask_t* mask, T scale)
{
    if (x.shape().empty())
    {
        fail("masked_softmax", "input must have at least one axis, got shape ()");
    }
    if (mask && !broadcasts_to(to_shape(mask->shape()), x.shape()))
    {
        fail("masked_softmax", "mask of shape " + shape_str(to_shape(mask->shape())) +
                                   " does not broadcast to input of shape " + shape_str(x.shape()));
    }
    array<T> y = kernels::masked_softmax_forward(x.value(), mask, scale);
    // y_j = e^{s x_j} / sum_{k kept} e^{s x_k} on kept j, 0 elsewhere.
    // dL/dx_j = s y_j (g_j - sum_k g_k y_k). Masked entries and fully masked rows have y = 0, so their
    // gradient is 0 with no special case.
    return detail::record("masked_softmax", {x}, std::move(y), saves_output, [scale](backward_context<T>& ctx) {
        ctx.accumulate(0, kernels::masked_softmax_backward(ctx.output(), ctx.grad(), scale));
    });
}
}  // namespace

template <class T>
var<T> masked_softmax(const var<T>& x, const mask_t& mask, T scale)
{
    return softmax_op(x, &mask, scale);
}

template <class T>
var<T> softmax(const var<T>& x, T scale)
{
    return softmax_op<T>(x, nullptr, scale);
}

#define XGRAD_SOFTMAX(T)                                                \
    template var<T> masked_softmax(const var<T>&, const mask_t&, T);    \
    template var<T> softmax(const var<T>&, T);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_SOFTMAX)
}  // namespace ops
}  // namespace xgrad
