// sum_to: the adjoint of broadcasting, which every binary op's backward rule applies to its gradients.
#pragma once

#include "autodiff/shape.hpp"
#include "autodiff/xtensor.hpp"

namespace xgrad
{
// Reduces a gradient of a broadcast result back to the shape of the operand that was broadcast:
// sums the leading axes it lacks and the axes where it has size 1. Throws if `shape` does not
// broadcast to g's shape.
template <class T>
array<T> sum_to(array<T>&& g, const shape_t& shape);
}  // namespace xgrad
