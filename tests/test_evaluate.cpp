// xgrad::evaluate (autodiff/evaluate.hpp) against xtensor's own assignment, array<T>(e), on each kind of
// expression the rules and the ops' forwards hand it: same shapes (one pass over memory), NumPy
// broadcasting (trailing axes, length-1 axes, a scalar, a 0-d array), empty axes, and leaves that are
// not dense containers (a generator, a broadcast, a strided view, a boolean mask). The values must be
// the same bits: evaluate applies the same functors to the same operands.
#include <doctest/doctest.h>

#include <cstring>

#include "autodiff/evaluate.hpp"
#include "test_util.hpp"

namespace test_evaluate
{
using namespace xgrad;

namespace
{
// Numbers that differ in every entry, so that a wrong position shows.
template <class T>
array<T> counting(const shape_t& shape, T start)
{
    array<T> a = array<T>::from_shape(shape);
    for (std::size_t i = 0; i < a.size(); ++i)
    {
        a.data()[i] = start + T(0.25) * static_cast<T>(i);
    }
    return a;
}

// evaluate(e) holds the bits of xtensor's array<T>(e), shape included.
template <class E>
void check_same(const xt::xexpression<E>& e, const char* what)
{
    using T = typename E::value_type;
    const array<T> expected(e.derived_cast());
    const array<T> got = evaluate(e);
    INFO(what);
    REQUIRE(to_shape(got.shape()) == to_shape(expected.shape()));
    // An empty array may hold no buffer at all: memcmp must not see its null pointer.
    CHECK((expected.size() == 0 || std::memcmp(got.data(), expected.data(), expected.size() * sizeof(T)) == 0));
}

template <class T>
void check_every_kind()
{
    const array<T> a = counting<T>({3, 2, 4}, T(-1.5));
    const array<T> b = counting<T>({3, 2, 4}, T(0.5));
    const array<T> row = counting<T>({4}, T(2));
    const array<T> column = counting<T>({3, 1, 1}, T(1));
    const array<T> middle = counting<T>({2, 1}, T(-3));
    const array<T> single = counting<T>({1}, T(7));
    const array<T> zero_d = xt::xarray<T>(T(3));
    check_same(a * b - T(2) * a, "same shapes");
    check_same(xt::tanh(a) / (b + T(4)), "same shapes through a function");
    check_same(a + row, "trailing axes");
    check_same(a * column - row, "length-1 axes on both sides");
    check_same(a / middle, "a [2, 1] under [3, 2, 4]");
    check_same(row * column, "two operands broadcast against each other");
    check_same(single * a, "a one-element array");
    check_same(zero_d + a, "a 0-d array");
    check_same(zero_d * zero_d, "0-d only");
    const array<T> empty = counting<T>({3, 0, 4}, T(0));
    check_same(empty + row, "an empty axis");
    check_same(a * xt::ones<T>(a.shape()), "a generator");
    check_same(xt::broadcast(row, a.shape()) - a, "a broadcast");
    check_same(xt::view(a, xt::all(), xt::range(0, 2), xt::range(1, 4, 2)) * T(3), "a strided view");
    const mask_t keep = a > T(0);
    check_same(xt::where(keep, a, T(0)), "a boolean mask");
    check_same(xt::where(a > b, a, b * column), "a comparison and broadcasting");
}
}  // namespace

// The loops do not depend on the value type: float64 for every kind, float32 for each of the two loops (each
// expression checked is one more instantiation of xtensor's assignment, about 0.3 CPU s of this file).
TEST_CASE("evaluate: the bits of xtensor's assignment on every kind of expression, float64")
{
    check_every_kind<double>();
}

TEST_CASE("evaluate: float32 through both loops")
{
    const array<float> a = counting<float>({3, 2, 4}, -1.5f);
    const array<float> row = counting<float>({4}, 2.0f);
    check_same(a * a - 2.0f * a, "same shapes");
    check_same(a / row, "trailing axes");
}
}  // namespace test_evaluate
