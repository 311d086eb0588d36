// The elementwise ops NumPy users reach for beyond the arithmetic of ops/elementwise.cpp: abs, sin, cos,
// and pow with a var exponent (NumPy broadcasting). Each records one node with its rule beside it, in
// both forms (autodiff/record.hpp): on arrays, and the same math on vars for a backward that records
// itself.
#include <cmath>

#include "autodiff/evaluate.hpp"
#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
// The constant 0/1 (as T) of a mask, on v's tape: a factor whose own derivative is 0.
template <class T, class E>
var<T> constant_factor(const var<T>& v, const E& values)
{
    return constant_like(v, array<T>(values));
}
}  // namespace

// y = |x|.   dL/dx = g sign(x), with sign(0) = 0 (as torch.abs: no gradient at the kink).
template <class T>
var<T> abs(const var<T>& x)
{
    array<T> y = evaluate(xt::abs(x.value()));
    auto on_arrays = [](backward_context<T>& ctx) {
        ctx.accumulate(0, ctx.grad() * xt::sign(ctx.input(0)));
    };
    auto on_vars = [](graph_context<T>& ctx) {
        const var<T> in = ctx.input(0);
        ctx.accumulate(0, ops::mul(ctx.grad(), constant_factor(in, xt::sign(in.value()))));
    };
    auto rule = detail::with_var_form<T>(on_arrays, on_vars);
    return detail::record("abs", {x}, std::move(y), saves_input0, std::move(rule));
}

// y = sin x.   dL/dx = g cos x
template <class T>
var<T> sin(const var<T>& x)
{
    array<T> y = evaluate(xt::sin(x.value()));
    auto on_arrays = [](backward_context<T>& ctx) {
        ctx.accumulate(0, ctx.grad() * xt::cos(ctx.input(0)));
    };
    auto on_vars = [](graph_context<T>& ctx) {
        ctx.accumulate(0, ops::mul(ctx.grad(), ops::cos(ctx.input(0))));
    };
    auto rule = detail::with_var_form<T>(on_arrays, on_vars);
    return detail::record("sin", {x}, std::move(y), saves_input0, std::move(rule));
}

// y = cos x.   dL/dx = -g sin x
template <class T>
var<T> cos(const var<T>& x)
{
    array<T> y = evaluate(xt::cos(x.value()));
    auto on_arrays = [](backward_context<T>& ctx) {
        ctx.accumulate(0, -ctx.grad() * xt::sin(ctx.input(0)));
    };
    auto on_vars = [](graph_context<T>& ctx) {
        ctx.accumulate(0, ops::neg(ops::mul(ctx.grad(), ops::sin(ctx.input(0)))));
    };
    auto rule = detail::with_var_form<T>(on_arrays, on_vars);
    return detail::record("cos", {x}, std::move(y), saves_input0, std::move(rule));
}

// y = a^b, broadcasting.   dL/da = g b a^(b - 1),   dL/db = g y ln a, taken as 0 where a = 0 and b >= 0
// (the limit of y ln a there, as torch.pow). A negative base with a fractional exponent gives NaN, as
// NumPy's power does. On vars, ln a reads a with those entries replaced by 1 (ln 1 = 0), so that the
// second derivative does not divide by a zero there either.
template <class T>
var<T> pow(const var<T>& a, const var<T>& b)
{
    broadcast_shapes("pow", a.shape(), b.shape());  // throws naming pow and both shapes
    array<T> y = evaluate(xt::pow(a.value(), b.value()));
    auto on_arrays = [](backward_context<T>& ctx) {
        const array<T>& base = ctx.input(0);
        const array<T>& exponent = ctx.input(1);
        if (ctx.needs_grad(0))
        {
            ctx.accumulate(0, ctx.grad() * exponent * xt::pow(base, exponent - T(1)));
        }
        if (ctx.needs_grad(1))
        {
            const auto zero_limit = xt::equal(base, T(0)) && exponent >= T(0);
            const auto slope = ctx.grad() * ctx.output() * xt::log(base);
            ctx.accumulate(1, xt::where(zero_limit, T(0), slope));
        }
    };
    auto on_vars = [](graph_context<T>& ctx) {
        const var<T> base = ctx.input(0);
        const var<T> exponent = ctx.input(1);
        const var<T> g = ctx.grad();
        if (ctx.needs_grad(0))
        {
            const var<T> slope = ops::mul(exponent, ops::pow(base, ops::add_scalar(exponent, T(-1))));
            ctx.accumulate(0, ops::mul(g, slope));
        }
        if (ctx.needs_grad(1))
        {
            const mask_t zero_limit = xt::equal(base.value(), T(0)) && exponent.value() >= T(0);
            const var<T> ones = constant_like(base, array<T>(xt::ones<T>(base.value().shape())));
            const var<T> safe_log = ops::log(ops::where(zero_limit, ones, base));
            ctx.accumulate(1, ops::mul(ops::mul(g, ctx.output()), safe_log));
        }
    };
    const unsigned saved = saves_input0 | saves_input1 | saves_output;
    auto rule = detail::with_var_form<T>(on_arrays, on_vars);
    return detail::record("pow", {a, b}, std::move(y), saved, std::move(rule));
}

#define XGRAD_ELEMENTWISE_NUMPY(T)                                                                           \
    template var<T> abs(const var<T>&);                                                                      \
    template var<T> sin(const var<T>&);                                                                      \
    template var<T> cos(const var<T>&);                                                                      \
    template var<T> pow(const var<T>&, const var<T>&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_ELEMENTWISE_NUMPY)
#undef XGRAD_ELEMENTWISE_NUMPY
}  // namespace xgrad::ops
