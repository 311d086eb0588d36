// Selection ops: where(mask, a, b) and what is built on it, maximum, minimum; and clip. NumPy broadcasting
// throughout; the mask is a constant (no gradient), copied into the rule. Each rule in both forms
// (autodiff/record.hpp): on arrays, and on vars as a product with the constant 0/1 mask.
#include "autodiff/evaluate.hpp"
#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
// g times the constant 0/1 of `keep` (which broadcasts against g): g where keep, 0 elsewhere, on g's tape.
template <class T>
var<T> kept(const var<T>& g, const mask_t& keep)
{
    return ops::mul(g, constant_like(g, array<T>(xt::cast<T>(keep))));
}

// y = mask ? a : b, all three broadcast together, recorded as `op`.
// dL/da = g where mask, 0 elsewhere;  dL/db = g where not mask, 0 elsewhere (each summed to its shape).
template <class T>
var<T> select(const char* op, const mask_t& mask, const var<T>& a, const var<T>& b)
{
    // Throws naming op and the shapes when the three do not broadcast together.
    broadcast_shapes(op, broadcast_shapes(op, to_shape(mask.shape()), a.shape()), b.shape());
    array<T> y = evaluate(xt::where(mask, a.value(), b.value()));
    auto on_arrays = [mask](backward_context<T>& ctx) {
        if (ctx.needs_grad(0))
        {
            ctx.accumulate(0, xt::where(mask, ctx.grad(), T(0)));
        }
        if (ctx.needs_grad(1))
        {
            ctx.accumulate(1, xt::where(mask, T(0), ctx.grad()));
        }
    };
    auto on_vars = [mask](graph_context<T>& ctx) {
        if (ctx.needs_grad(0))
        {
            ctx.accumulate(0, kept(ctx.grad(), mask));
        }
        if (ctx.needs_grad(1))
        {
            ctx.accumulate(1, kept(ctx.grad(), mask_t(!mask)));
        }
    };
    auto rule = detail::with_var_form<T>(on_arrays, on_vars);
    return detail::record(op, {a, b}, std::move(y), saves_nothing, std::move(rule), 0, mask.size());
}
}  // namespace

template <class T>
var<T> where(const mask_t& mask, const var<T>& a, const var<T>& b)
{
    return select("where", mask, a, b);
}

// y = max(a, b) elementwise: where(a >= b, a, b). At a tie the gradient goes to a.
template <class T>
var<T> maximum(const var<T>& a, const var<T>& b)
{
    broadcast_shapes("maximum", a.shape(), b.shape());
    return select("maximum", mask_t(a.value() >= b.value()), a, b);
}

// y = min(a, b) elementwise: where(a <= b, a, b). At a tie the gradient goes to a.
template <class T>
var<T> minimum(const var<T>& a, const var<T>& b)
{
    broadcast_shapes("minimum", a.shape(), b.shape());
    return select("minimum", mask_t(a.value() <= b.value()), a, b);
}

// y = min(max(x, lo), hi).   dL/dx = g where lo <= x <= hi, 0 elsewhere (as torch.clamp).
// lo <= hi, else std::invalid_argument; NaN bounds are refused too.
template <class T>
var<T> clip(const var<T>& x, T lo, T hi)
{
    if (!(lo <= hi))
    {
        fail("clip", "needs lo <= hi, got lo = " + std::to_string(lo) + " and hi = " + std::to_string(hi));
    }
    array<T> y = evaluate(xt::clip(x.value(), lo, hi));
    auto on_arrays = [lo, hi](backward_context<T>& ctx) {
        const array<T>& in = ctx.input(0);
        ctx.accumulate(0, xt::where(in >= lo && in <= hi, ctx.grad(), T(0)));
    };
    auto on_vars = [lo, hi](graph_context<T>& ctx) {
        const array<T>& in = ctx.input(0).value();
        ctx.accumulate(0, kept(ctx.grad(), mask_t(in >= lo && in <= hi)));
    };
    auto rule = detail::with_var_form<T>(on_arrays, on_vars);
    return detail::record("clip", {x}, std::move(y), saves_input0, std::move(rule));
}

#define XGRAD_SELECT(T)                                                                                      \
    template var<T> where(const mask_t&, const var<T>&, const var<T>&);                                      \
    template var<T> maximum(const var<T>&, const var<T>&);                                                   \
    template var<T> minimum(const var<T>&, const var<T>&);                                                   \
    template var<T> clip(const var<T>&, T, T);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_SELECT)
#undef XGRAD_SELECT
}  // namespace xgrad::ops
