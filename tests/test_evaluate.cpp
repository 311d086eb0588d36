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
using xgrad::test::normal_array;

namespace
{
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
    const array<T> a = normal_array<T>({3, 2, 4}, 1);
    const array<T> b = normal_array<T>({3, 2, 4}, 2);
    const array<T> row = normal_array<T>({4}, 3);
    const array<T> column = normal_array<T>({3, 1, 1}, 4);
    const array<T> middle = normal_array<T>({2, 1}, 5);
    const array<T> single = normal_array<T>({1}, 6);
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
    const array<T> empty = normal_array<T>({3, 0, 4}, 7);
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
    const array<float> a = normal_array<float>({3, 2, 4}, 8);
    const array<float> row = normal_array<float>({4}, 9);
    check_same(a * a - 2.0f * a, "same shapes");
    check_same(a / row, "trailing axes");
}
}  // namespace test_evaluate
