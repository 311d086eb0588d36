// ops::linear, y = x W + b in one node, against its composed twin (ops::composed::linear: matmul then a
// broadcast add) in float64 to 1e-12, values and the gradients of x, W and b; central differences; x
// with one or two leading axes, one row, an input used twice; float32 against float64; bad shapes.
#include <doctest/doctest.h>

#include "test_util.hpp"

#include "ops/composed.hpp"

namespace test_linear_fused
{
using namespace xgrad;

namespace
{
void check_fused_equals_composed(const shape_t& xs, std::size_t n, unsigned seed)
{
    const std::size_t d = xs.back();
    const std::vector<test::f64> in{test::random_array(xs, seed), test::random_array({d, n}, seed + 1),
                                    test::random_array({n}, seed + 2)};
    auto fused = [](const auto& x) { return ops::linear(x[0], x[1], x[2]); };
    auto composed = [](const auto& x) { return ops::composed::linear(x[0], x[1], x[2]); };
    const auto a = test::evaluate_in<double>(fused, in, seed + 3);
    const auto b = test::evaluate_in<double>(composed, in, seed + 3);
    CHECK(test::max_relative_difference(a.value, b.value) <= 1e-12);
    for (std::size_t i = 0; i < 3; ++i)
    {
        CAPTURE(i);
        CHECK(test::max_relative_difference(a.grads[i], b.grads[i]) <= 1e-12);
    }
}
}  // namespace

TEST_CASE("fused linear = matmul + add: (B, T, d), (T, d), one row, one column")
{
    check_fused_equals_composed({3, 5, 4}, 6, 1);
    check_fused_equals_composed({7, 3}, 2, 2);
    check_fused_equals_composed({1, 1, 1}, 1, 3);
    check_fused_equals_composed({2, 1, 8}, 1, 4);
    check_fused_equals_composed({2, 3, 2, 5}, 3, 5);
}

TEST_CASE("fused linear passes gradcheck (float64 central differences), also with x reused as the weight")
{
    auto f = [](tape<double>&, const std::vector<var<double>>& x) { return ops::linear(x[0], x[1], x[2]); };
    XGRAD_CHECK_GRADIENTS(f, {test::normal_array<double>({2, 3, 4}, 1), test::normal_array<double>({4, 5}, 2),
                              test::normal_array<double>({5}, 3)});
    auto square = [](tape<double>&, const std::vector<var<double>>& x) { return ops::linear(x[0], x[0], x[1]); };
    XGRAD_CHECK_GRADIENTS(square, {test::normal_array<double>({3, 3}, 4), test::normal_array<double>({3}, 5)});
}

TEST_CASE("fused linear in float32 agrees with float64")
{
    auto f = [](const auto& x) { return ops::linear(x[0], x[1], x[2]); };
    test::check_float32_agrees(f, {test::random_array({4, 9, 16}, 1), test::random_array({16, 12}, 2),
                                   test::random_array({12}, 3)});
}

TEST_CASE("fused linear: bad shapes throw, naming the op and the shapes")
{
    tape<double> t;
    auto x = t.input(test::normal_array<double>({2, 3, 4}, 1));
    auto w = t.input(test::normal_array<double>({4, 5}, 2));
    auto b = t.input(test::normal_array<double>({5}, 3));
    auto b6 = t.input(test::normal_array<double>({6}, 4));
    auto row = t.input(test::normal_array<double>({4}, 5));
    CHECK_THROWS_WITH_AS(ops::linear(x, w, b6), doctest::Contains("linear"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::linear(x, x, b), doctest::Contains("weight (2, 3, 4)"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::linear(row, w, b), doctest::Contains("x (4)"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::linear(w, w, b), doctest::Contains("linear"), std::invalid_argument);
}
}  // namespace test_linear_fused
