// The primitive ops. Each records its forward value and its backward rule in one place (ops/*.cpp);
// everything else in xgrad (MHA, layers) is composed from these and gets its backward for free.
// Every op checks its arguments and throws std::invalid_argument naming the op and the shapes.
#pragma once

#include "autodiff/tape.hpp"

namespace xgrad
{
namespace ops
{
// Elementwise, with NumPy broadcasting (ops/elementwise.cpp).
template <class T> var<T> add(const var<T>& a, const var<T>& b);
template <class T> var<T> sub(const var<T>& a, const var<T>& b);
template <class T> var<T> mul(const var<T>& a, const var<T>& b);
template <class T> var<T> scale(const var<T>& x, T factor);
template <class T> var<T> neg(const var<T>& x);
template <class T> var<T> exp(const var<T>& x);
template <class T> var<T> log(const var<T>& x);
template <class T> var<T> tanh(const var<T>& x);
template <class T> var<T> relu(const var<T>& x);

// Reductions (ops/reduce.cpp): over all axes, or the given axes, optionally keeping them as size 1.
template <class T> var<T> sum(const var<T>& x);
template <class T> var<T> sum(const var<T>& x, const std::vector<std::size_t>& axes, bool keep_dims = false);
template <class T> var<T> mean(const var<T>& x);
template <class T> var<T> mean(const var<T>& x, const std::vector<std::size_t>& axes, bool keep_dims = false);

// Shape ops (ops/shape.cpp). reshape accepts one -1 for an inferred axis.
template <class T> var<T> reshape(const var<T>& x, const std::vector<long>& shape);
template <class T> var<T> permute(const var<T>& x, const std::vector<std::size_t>& axes);
template <class T> var<T> transpose(const var<T>& x, std::size_t axis1, std::size_t axis2);

// Matrix product over the last two axes; leading (batch) axes broadcast. transpose_a/b use an operand's
// last two axes swapped, passed to the GEMM as a flag instead of copied (ops/matmul.cpp).
template <class T>
var<T> matmul(const var<T>& a, const var<T>& b, bool transpose_a = false, bool transpose_b = false);

// softmax(scale * x) over the last axis, where only entries with mask == true compete. The mask
// broadcasts to x's shape; a row with no true entry gives zeros (and a zero gradient), never NaN.
template <class T> var<T> masked_softmax(const var<T>& x, const mask_t& mask, T scale = T(1));
template <class T> var<T> softmax(const var<T>& x, T scale = T(1));
}  // namespace ops

template <class T> var<T> operator+(const var<T>& a, const var<T>& b) { return ops::add(a, b); }
template <class T> var<T> operator-(const var<T>& a, const var<T>& b) { return ops::sub(a, b); }
template <class T> var<T> operator*(const var<T>& a, const var<T>& b) { return ops::mul(a, b); }
template <class T> var<T> operator-(const var<T>& x) { return ops::neg(x); }
}  // namespace xgrad
