// xgrad::evaluate(e): the value of an xtensor expression as a new array, computed by one of two plain
// loops. What the rules' array forms and the ops' forwards use instead of xtensor's assignment,
// array<T>(e), which compiles a linear path, a stepper path and their shape checks for every expression
// type: about 0.3 CPU s per expression and value type. These loops cost about half of that, and took
// ops/'s unit from 64 to 48 CPU s (docs/performance.md, "Expressions evaluated by two loops").
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

#include "autodiff/xtensor.hpp"

namespace xgrad
{
namespace detail
{
// True for an expression tree whose leaves are dense containers and scalars only: the kinds whose
// elements can be read by position in memory (data_element) when their layout is the result's.
template <class E>
struct is_dense_tree : std::false_type
{
};
template <class EC, xt::layout_type L, class SC, class Tag>
struct is_dense_tree<xt::xarray_container<EC, L, SC, Tag>> : std::true_type
{
};
template <class CT>
struct is_dense_tree<xt::xscalar<CT>> : std::true_type
{
};
template <class F, class... CT>
struct is_dense_tree<xt::xfunction<F, CT...>> : std::conjunction<is_dense_tree<std::decay_t<CT>>...>
{
};

// Steps `index` to the next position of `shape` in row-major order.
inline void next_index(std::vector<std::size_t>& index, const shape_t& shape)
{
    for (std::size_t axis = shape.size(); axis-- > 0;)
    {
        if (++index[axis] < shape[axis])
        {
            return;
        }
        index[axis] = 0;
    }
}
}  // namespace detail

// The expression's value, of its broadcast shape. Every element is the expression's own functors on the
// same operands, so the values are xtensor's: one pass over memory when every leaf is a dense container
// or a scalar laid out as the result, else one pass over the result's indices, each leaf reading its
// element there (xtensor gives a length-1 axis a stride of 0, so a broadcast leaf repeats).
template <class E>
array<typename E::value_type> evaluate(const xt::xexpression<E>& expression)
{
    using T = typename E::value_type;
    const E& e = expression.derived_cast();
    array<T> out = array<T>::from_shape(e.shape());
    T* data = out.data();
    const std::size_t n = out.size();
    if constexpr (detail::is_dense_tree<E>::value)
    {
        if (e.has_linear_assign(out.strides()))
        {
            for (std::size_t i = 0; i < n; ++i)
            {
                data[i] = e.data_element(i);
            }
            return out;
        }
    }
    const shape_t shape(out.shape().begin(), out.shape().end());
    std::vector<std::size_t> index(shape.size(), 0);
    for (std::size_t i = 0; i < n; ++i, detail::next_index(index, shape))
    {
        data[i] = e.element(index.begin(), index.end());
    }
    return out;
}
}  // namespace xgrad
