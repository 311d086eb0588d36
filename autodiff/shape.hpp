// Shapes: printing, NumPy broadcasting and the argument checks every op shares.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

// GCC 12 flags xtensor's small-vector copy as "may be used uninitialized" when it is inlined into a caller
// that builds a shape from a brace list (a false positive); off inside xtensor's headers only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <xtensor/xstorage.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace xgrad
{
// A shape: up to four axes stored inline (no heap allocation), like xtensor's own shapes.
using shape_t = xt::svector<std::size_t, 4>;

// "(2, 3, 4)"; a scalar prints as "()".
std::string shape_str(const shape_t& shape);

// "(1, 2)": the multi-index of flat (row-major) position `flat` in an array of shape `shape`.
std::string position_str(std::size_t flat, const shape_t& shape);

template <class S>
shape_t to_shape(const S& s)
{
    return shape_t(s.begin(), s.end());
}

// The product of the sizes; a shape whose product does not fit in std::size_t (a reshape or a scatter to
// sizes of 2^62) throws std::invalid_argument naming `op` and the shape, rather than wrap to a small count.
std::size_t element_count(const shape_t& shape, const char* op = "element_count");

// NumPy broadcasting of two shapes; throws std::invalid_argument naming `op` and both shapes.
shape_t broadcast_shapes(const char* op, const shape_t& a, const shape_t& b);

// True when `from` broadcasts to exactly `to` (NumPy rules, `to` unchanged).
bool broadcasts_to(const shape_t& from, const shape_t& to);

// Row-major strides of `shape` aligned to the right of a rank-`rank` shape, with stride 0 on every
// broadcast axis (size 1 or missing). Used by kernels that walk a broadcast operand by pointer.
std::vector<std::size_t> broadcast_strides(const shape_t& shape, std::size_t rank);

// A row-major shape seen around one axis: `outer` blocks, each `length` slices of `inner` elements, so a
// walk along the axis steps by `inner`.
struct axis_split
{
    std::size_t outer = 1, length = 1, inner = 1;
};
axis_split split_at(const shape_t& shape, std::size_t axis);

// Throws std::invalid_argument("<op>: <what>").
[[noreturn]] void fail(const char* op, const std::string& what);
}  // namespace xgrad
