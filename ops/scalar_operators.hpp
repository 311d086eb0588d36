// Arithmetic between a var and a plain number, recorded as ordinary ops.
#pragma once

#include <type_traits>

#include "autodiff/tape.hpp"

namespace xgrad
{
// Scalar arithmetic on vars, recorded as ops::scale and ops::add_scalar (ops/elementwise.cpp):
// x * 2, 2 * x, x / 2, x + 1, 1 + x, x - 1, 2 - x; -x is ops::neg (ops/ops.hpp).
namespace ops
{
template <class T> var<T> scale(const var<T>& x, T factor);
template <class T> var<T> add_scalar(const var<T>& x, T c);
template <class T> var<T> neg(const var<T>& x);
}  // namespace ops

template <class S>
using if_scalar = std::enable_if_t<std::is_arithmetic<S>::value, int>;

template <class T, class S, if_scalar<S> = 0>
var<T> operator*(const var<T>& x, S s)
{
    return ops::scale(x, static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator*(S s, const var<T>& x)
{
    return ops::scale(x, static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator/(const var<T>& x, S s)
{
    return ops::scale(x, T(1) / static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator+(const var<T>& x, S s)
{
    return ops::add_scalar(x, static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator+(S s, const var<T>& x)
{
    return ops::add_scalar(x, static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator-(const var<T>& x, S s)
{
    return ops::add_scalar(x, -static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator-(S s, const var<T>& x)
{
    return ops::add_scalar(ops::neg(x), static_cast<T>(s));
}
}  // namespace xgrad
