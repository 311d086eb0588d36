// The elementwise ops NumPy users reach for beyond the arithmetic of ops/elementwise.cpp: abs, sin, cos,
// and pow with a var exponent (NumPy broadcasting). Each records one node with its rule beside it.
#include <cmath>

#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
// y = |x|.   dL/dx = g sign(x), with sign(0) = 0 (as torch.abs: no gradient at the kink).
template <class T>
var<T> abs(const var<T>& x)
{
    array<T> y = xt::abs(x.value());
    return detail::record("abs", {x}, std::move(y), saves_input0, [](backward_context<T>& ctx) {
        ctx.accumulate(0, array<T>(ctx.grad() * xt::sign(ctx.input(0))));
    });
}

// y = sin x.   dL/dx = g cos x
template <class T>
var<T> sin(const var<T>& x)
{
    array<T> y = xt::sin(x.value());
    return detail::record("sin", {x}, std::move(y), saves_input0, [](backward_context<T>& ctx) {
        ctx.accumulate(0, array<T>(ctx.grad() * xt::cos(ctx.input(0))));
    });
}

// y = cos x.   dL/dx = -g sin x
template <class T>
var<T> cos(const var<T>& x)
{
    array<T> y = xt::cos(x.value());
    return detail::record("cos", {x}, std::move(y), saves_input0, [](backward_context<T>& ctx) {
        ctx.accumulate(0, array<T>(-ctx.grad() * xt::sin(ctx.input(0))));
    });
}

// y = a^b, broadcasting.   dL/da = g b a^(b - 1),   dL/db = g y ln a, taken as 0 where a = 0 and b >= 0
// (the limit of y ln a there, as torch.pow). A negative base with a fractional exponent gives NaN, as
// NumPy's power does.
template <class T>
var<T> pow(const var<T>& a, const var<T>& b)
{
    broadcast_shapes("pow", a.shape(), b.shape());  // throws naming pow and both shapes
    array<T> y = xt::pow(a.value(), b.value());
    auto rule = [](backward_context<T>& ctx) {
        const array<T>& base = ctx.input(0);
        const array<T>& exponent = ctx.input(1);
        if (ctx.needs_grad(0))
        {
            ctx.accumulate(0, array<T>(ctx.grad() * exponent * xt::pow(base, exponent - T(1))));
        }
        if (ctx.needs_grad(1))
        {
            const auto zero_limit = xt::equal(base, T(0)) && exponent >= T(0);
            const auto slope = ctx.grad() * ctx.output() * xt::log(base);
            ctx.accumulate(1, array<T>(xt::where(zero_limit, T(0), slope)));
        }
    };
    const unsigned saved = saves_input0 | saves_input1 | saves_output;
    return detail::record("pow", {a, b}, std::move(y), saved, std::move(rule));
}

#define XGRAD_ELEMENTWISE_NUMPY(T)                                \
    template var<T> abs(const var<T>&);                           \
    template var<T> sin(const var<T>&);                           \
    template var<T> cos(const var<T>&);                           \
    template var<T> pow(const var<T>&, const var<T>&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_ELEMENTWISE_NUMPY)
#undef XGRAD_ELEMENTWISE_NUMPY
}  // namespace xgrad::ops
