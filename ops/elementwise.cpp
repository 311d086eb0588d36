// Elementwise ops. Binary ops broadcast like NumPy; the tape's sum_to undoes the broadcast in backward,
// so no rule here handles it.
#include <cmath>

#include "autodiff/instantiate.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
template <class T>
void check_broadcast(const char* op, const var<T>& a, const var<T>& b)
{
    broadcast_shapes(op, a.shape(), b.shape());  // throws naming op and both shapes
}
}  // namespace

// c = a + b.   dL/da = g,  dL/db = g   (each summed back to its own shape)
template <class T>
var<T> add(const var<T>& a, const var<T>& b)
{
    check_broadcast("add", a, b);
    array<T> c = a.value() + b.value();
    return detail::record("add", {a, b}, std::move(c), saves_nothing, [](backward_context<T>& ctx) {
        ctx.accumulate(0, array<T>(ctx.grad()));
        ctx.accumulate(1, ctx.take_grad());
    });
}

// c = a - b.   dL/da = g,  dL/db = -g
template <class T>
var<T> sub(const var<T>& a, const var<T>& b)
{
    check_broadcast("sub", a, b);
    array<T> c = a.value() - b.value();
    return detail::record("sub", {a, b}, std::move(c), saves_nothing, [](backward_context<T>& ctx) {
        ctx.accumulate(1, array<T>(-ctx.grad()));
        ctx.accumulate(0, ctx.take_grad());
    });
}

// c = a * b.   dL/da = g * b,  dL/db = g * a
template <class T>
var<T> mul(const var<T>& a, const var<T>& b)
{
    check_broadcast("mul", a, b);
    array<T> c = a.value() * b.value();
    return detail::record("mul", {a, b}, std::move(c), saves_input0 | saves_input1, [](backward_context<T>& ctx) {
        if (ctx.needs_grad(0))
        {
            ctx.accumulate(0, array<T>(ctx.grad() * ctx.input(1)));
        }
        if (ctx.needs_grad(1))
        {
            ctx.accumulate(1, array<T>(ctx.grad() * ctx.input(0)));
        }
    });
}

// y = s x.   dL/dx = s g
template <class T>
var<T> scale(const var<T>& x, T factor)
{
    array<T> y = factor * x.value();
    return detail::record("scale", {x}, std::move(y), saves_nothing, [factor](backward_context<T>& ctx) {
        ctx.accumulate(0, array<T>(factor * ctx.grad()));
    });
}

// y = -x.   dL/dx = -g
template <class T>
var<T> neg(const var<T>& x)
{
    array<T> y = -x.value();
    return detail::record("neg", {x}, std::move(y), saves_nothing,
                          [](backward_context<T>& ctx) { ctx.accumulate(0, array<T>(-ctx.grad())); });
}

// y = e^x.   dL/dx = g * y   (uses the saved output)
template <class T>
var<T> exp(const var<T>& x)
{
    array<T> y = xt::exp(x.value());
    return detail::record("exp", {x}, std::move(y), saves_output, [](backward_context<T>& ctx) {
        ctx.accumulate(0, array<T>(ctx.grad() * ctx.output()));
    });
}

// y = ln x.   dL/dx = g / x   (x <= 0 follows IEEE: -inf or NaN, as in NumPy)
template <class T>
var<T> log(const var<T>& x)
{
    array<T> y = xt::log(x.value());
    return detail::record("log", {x}, std::move(y), saves_input0, [](backward_context<T>& ctx) {
        ctx.accumulate(0, array<T>(ctx.grad() / ctx.input(0)));
    });
}

// y = tanh x.   dL/dx = g * (1 - y^2)
template <class T>
var<T> tanh(const var<T>& x)
{
    array<T> y = xt::tanh(x.value());
    return detail::record("tanh", {x}, std::move(y), saves_output, [](backward_context<T>& ctx) {
        const auto& y = ctx.output();
        ctx.accumulate(0, array<T>(ctx.grad() * (T(1) - y * y)));
    });
}

// y = max(x, 0).   dL/dx = g where y > 0, else 0   (the subgradient at 0 is 0, as in PyTorch)
template <class T>
var<T> relu(const var<T>& x)
{
    array<T> y = xt::maximum(x.value(), T(0));
    return detail::record("relu", {x}, std::move(y), saves_output, [](backward_context<T>& ctx) {
        ctx.accumulate(0, array<T>(xt::where(ctx.output() > T(0), ctx.grad(), T(0))));
    });
}

#define XGRAD_ELEMENTWISE(T)                                   \
    template var<T> add(const var<T>&, const var<T>&);         \
    template var<T> sub(const var<T>&, const var<T>&);         \
    template var<T> mul(const var<T>&, const var<T>&);         \
    template var<T> scale(const var<T>&, T);                   \
    template var<T> neg(const var<T>&);                        \
    template var<T> exp(const var<T>&);                        \
    template var<T> log(const var<T>&);                        \
    template var<T> tanh(const var<T>&);                       \
    template var<T> relu(const var<T>&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_ELEMENTWISE)
}  // namespace xgrad::ops
