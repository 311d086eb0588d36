// The functions a backward rule computes with, for both kinds of value a rule sees: on arrays (an
// ordinary backward, xtensor expressions evaluated by accumulate) and on vars (a backward that records
// itself, every call an op on the tape). With them and the arithmetic operators, one generic rule,
//
//     [](auto& ctx) { ctx.accumulate(0, ctx.grad() * rule::sigmoid(ctx.input(0))); }
//
// serves both. Each function here is the same math on both kinds; the array forms are lazy expressions
// (use them inside the accumulate call, never store them in an `auto`). A number goes into an array form
// as an rvalue, so that the expression holds a copy, not a reference to a parameter gone on return.
#pragma once

#include "autodiff/xtensor.hpp"
#include "ops/ops.hpp"

namespace xgrad::rule
{
// ---- arrays: xtensor expressions -----------------------------------------------------------------
template <class E>
auto exp(const xt::xexpression<E>& x)
{
    return xt::exp(x.derived_cast());
}
template <class E>
auto expm1(const xt::xexpression<E>& x)
{
    return xt::expm1(x.derived_cast());
}
template <class E>
auto log(const xt::xexpression<E>& x)
{
    return xt::log(x.derived_cast());
}
template <class E>
auto tanh(const xt::xexpression<E>& x)
{
    return xt::tanh(x.derived_cast());
}
template <class E, class P>
auto pow(const xt::xexpression<E>& x, P p)
{
    return xt::pow(x.derived_cast(), std::move(p));  // an rvalue: the expression keeps its own copy of p
}
// g where y > 0, else 0.
template <class E, class G>
auto where_positive(const xt::xexpression<E>& y, const xt::xexpression<G>& g)
{
    using T = typename E::value_type;
    return xt::where(y.derived_cast() > T(0), g.derived_cast(), T(0));
}
// g repeated over the axes `shape` has and g lacks or holds once (the adjoint of sum_to).
template <class E>
auto broadcast_to(const xt::xexpression<E>& g, const shape_t& shape)
{
    return xt::broadcast(g.derived_cast(), shape);
}

// The gradient moved into another shape of as many elements.
template <class T>
array<T> reshape(array<T>&& g, const shape_t& shape)
{
    g.reshape(shape);
    return std::move(g);
}
// Zeros of g's shape.
template <class T>
array<T> zeros_like(const array<T>& g)
{
    return xt::zeros<T>(g.shape());
}

// ---- vars: ops on the tape -------------------------------------------------------------------------
template <class T>
var<T> exp(const var<T>& x)
{
    return ops::exp(x);
}
template <class T>
var<T> expm1(const var<T>& x)
{
    return ops::add_scalar(ops::exp(x), T(-1));
}
template <class T>
var<T> log(const var<T>& x)
{
    return ops::log(x);
}
template <class T>
var<T> tanh(const var<T>& x)
{
    return ops::tanh(x);
}
template <class T, class P>
var<T> pow(const var<T>& x, P p)
{
    return ops::pow(x, static_cast<T>(p));
}
// g times the constant indicator of y > 0: the indicator's own derivative is 0 (almost everywhere).
template <class T>
var<T> where_positive(const var<T>& y, const var<T>& g)
{
    return ops::mul(g, constant_like(y, array<T>(xt::cast<T>(y.value() > T(0)))));
}
// g plus zeros of `shape`: the broadcasting add's backward sums it back (sum_to), so it is its adjoint.
template <class T>
var<T> broadcast_to(const var<T>& g, const shape_t& shape)
{
    return ops::add(g, constant_like(g, array<T>(xt::zeros<T>(shape))));
}
template <class T>
var<T> reshape(const var<T>& g, const shape_t& shape)
{
    return ops::reshape(g, std::vector<long>(shape.begin(), shape.end()));
}
template <class T>
var<T> zeros_like(const var<T>& g)
{
    return constant_like(g, array<T>(xt::zeros<T>(g.value().shape())));
}
}  // namespace xgrad::rule
