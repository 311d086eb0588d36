// Elementwise ops. Binary ops broadcast like NumPy; the tape's sum_to undoes the broadcast in backward,
// so no rule here handles it.
#include <algorithm>
#include <cmath>

#include "autodiff/evaluate.hpp"
#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
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

// True when `part` is the trailing axes of `whole` (a bias row over a batch of rows, positions over a batch).
bool is_trailing(const shape_t& part, const shape_t& whole)
{
    return part.size() <= whole.size() && std::equal(part.begin(), part.end(), whole.end() - part.size());
}

// a + b where b repeats along a's leading axes: a loop over a's rows of b.size() numbers. xtensor's
// broadcasting stepper took ~20% of a small GPT's step for these adds.
template <class T>
array<T> add_repeated(const array<T>& a, const array<T>& b)
{
    array<T> c = array<T>::from_shape(a.shape());
    const std::size_t n = b.size();
    const T* pa = a.data();
    const T* pb = b.data();
    T* pc = c.data();
    for (std::size_t row = 0; n > 0 && row < a.size() / n; ++row)
    {
        for (std::size_t j = 0; j < n; ++j)
        {
            pc[row * n + j] = pa[row * n + j] + pb[j];
        }
    }
    return c;
}

template <class T>
array<T> add_values(const array<T>& a, const array<T>& b)
{
    const shape_t sa = to_shape(a.shape()), sb = to_shape(b.shape());
    if (sa != sb && is_trailing(sb, sa))
    {
        return add_repeated(a, b);
    }
    if (sa != sb && is_trailing(sa, sb))
    {
        return add_repeated(b, a);  // IEEE addition commutes exactly
    }
    return a + b;
}
}  // namespace

// c = a + b.   dL/da = g,  dL/db = g   (each summed back to its own shape)
template <class T>
var<T> add(const var<T>& a, const var<T>& b)
{
    check_broadcast("add", a, b);
    array<T> c = add_values(a.value(), b.value());
    return detail::record("add", {a, b}, std::move(c), saves_nothing, [](auto& ctx) {
        ctx.accumulate(0, ctx.grad());
        ctx.accumulate(1, ctx.take_grad());
    });
}

// c = a - b.   dL/da = g,  dL/db = -g
template <class T>
var<T> sub(const var<T>& a, const var<T>& b)
{
    check_broadcast("sub", a, b);
    array<T> c = evaluate(a.value() - b.value());
    return detail::record("sub", {a, b}, std::move(c), saves_nothing, [](auto& ctx) {
        ctx.accumulate(1, -ctx.grad());
        ctx.accumulate(0, ctx.take_grad());
    });
}

// c = a * b.   dL/da = g * b,  dL/db = g * a
template <class T>
var<T> mul(const var<T>& a, const var<T>& b)
{
    check_broadcast("mul", a, b);
    array<T> c = evaluate(a.value() * b.value());
    return detail::record("mul", {a, b}, std::move(c), saves_input0 | saves_input1, [](auto& ctx) {
        if (ctx.needs_grad(0))
        {
            ctx.accumulate(0, ctx.grad() * ctx.input(1));
        }
        if (ctx.needs_grad(1))
        {
            ctx.accumulate(1, ctx.grad() * ctx.input(0));
        }
    });
}

// y = s x.   dL/dx = s g
template <class T>
var<T> scale(const var<T>& x, T factor)
{
    array<T> y = evaluate(factor * x.value());
    return detail::record("scale", {x}, std::move(y), saves_nothing, [factor](auto& ctx) {
        ctx.accumulate(0, factor * ctx.grad());
    });
}

// y = -x.   dL/dx = -g
template <class T>
var<T> neg(const var<T>& x)
{
    array<T> y = evaluate(-x.value());
    return detail::record("neg", {x}, std::move(y), saves_nothing,
                          [](auto& ctx) { ctx.accumulate(0, -ctx.grad()); });
}

// y = e^x.   dL/dx = g * y   (uses the saved output)
template <class T>
var<T> exp(const var<T>& x)
{
    array<T> y = evaluate(xt::exp(x.value()));
    return detail::record("exp", {x}, std::move(y), saves_output, [](auto& ctx) {
        ctx.accumulate(0, ctx.grad() * ctx.output());
    });
}

// y = ln x.   dL/dx = g / x   (x <= 0 follows IEEE: -inf or NaN, as in NumPy)
template <class T>
var<T> log(const var<T>& x)
{
    array<T> y = evaluate(xt::log(x.value()));
    return detail::record("log", {x}, std::move(y), saves_input0, [](auto& ctx) {
        ctx.accumulate(0, ctx.grad() / ctx.input(0));
    });
}

// y = tanh x.   dL/dx = g * (1 - y^2)
template <class T>
var<T> tanh(const var<T>& x)
{
    array<T> y = evaluate(xt::tanh(x.value()));
    return detail::record("tanh", {x}, std::move(y), saves_output, [](auto& ctx) {
        const auto& y = ctx.output();
        ctx.accumulate(0, ctx.grad() * (T(1) - y * y));
    });
}

// c = a / b.   dL/da = g / b,  dL/db = -g a / b^2 = -g c / b   (reads b, and c when b wants a gradient)
template <class T>
var<T> div(const var<T>& a, const var<T>& b)
{
    check_broadcast("div", a, b);
    array<T> c = evaluate(a.value() / b.value());
    const unsigned saved = saves_input1 | (b.requires_grad() ? saves_output : saves_nothing);
    return detail::record("div", {a, b}, std::move(c), saved, [](auto& ctx) {
        const auto& b = ctx.input(1);
        if (ctx.needs_grad(1))
        {
            ctx.accumulate(1, -ctx.grad() * ctx.output() / b);
        }
        if (ctx.needs_grad(0))
        {
            ctx.accumulate(0, ctx.grad() / b);
        }
    });
}

// y = x + c.   dL/dx = g
template <class T>
var<T> add_scalar(const var<T>& x, T c)
{
    array<T> y = evaluate(x.value() + c);
    return detail::record("add_scalar", {x}, std::move(y), saves_nothing,
                          [](auto& ctx) { ctx.accumulate(0, ctx.take_grad()); });
}

// y = sqrt(x).   dL/dx = g / (2 y)   (x = 0 gives inf, x < 0 NaN, as IEEE and PyTorch)
template <class T>
var<T> sqrt(const var<T>& x)
{
    array<T> y = evaluate(xt::sqrt(x.value()));
    return detail::record("sqrt", {x}, std::move(y), saves_output, [](auto& ctx) {
        ctx.accumulate(0, ctx.grad() / (T(2) * ctx.output()));
    });
}

// y = x^(-1/2).   dL/dx = g * (-1/2) x^(-3/2) = -g y^3 / 2
template <class T>
var<T> rsqrt(const var<T>& x)
{
    array<T> y = evaluate(T(1) / xt::sqrt(x.value()));
    return detail::record("rsqrt", {x}, std::move(y), saves_output, [](auto& ctx) {
        const auto& y = ctx.output();
        ctx.accumulate(0, T(-0.5) * ctx.grad() * y * y * y);
    });
}

// y = x^p.   dL/dx = g p x^(p-1); p = 0 gives 0 (as PyTorch), not 0 * x^(-1), which is NaN at x = 0
template <class T>
var<T> pow(const var<T>& x, T exponent)
{
    array<T> y = evaluate(xt::pow(x.value(), exponent));
    const unsigned saved = exponent == T(0) ? saves_nothing : saves_input0;
    return detail::record("pow", {x}, std::move(y), saved, [exponent](auto& ctx) {
        if (exponent == T(0))
        {
            ctx.accumulate(0, rule::zeros_like(ctx.grad()));
            return;
        }
        ctx.accumulate(0, ctx.grad() * exponent * rule::pow(ctx.input(0), exponent - T(1)));
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
    template var<T> div(const var<T>&, const var<T>&);         \
    template var<T> add_scalar(const var<T>&, T);              \
    template var<T> sqrt(const var<T>&);                       \
    template var<T> rsqrt(const var<T>&);                      \
    template var<T> pow(const var<T>&, T);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_ELEMENTWISE)
}  // namespace xgrad::ops
