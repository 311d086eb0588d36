// The NumPy-shaped ops: abs, sin, cos, pow with a var exponent, where, maximum, minimum, clip, take and
// scatter_add. Values against element-by-element references, float64 gradchecks and gradgradchecks (away
// from the kinks where a derivative jumps), the documented choices at the kinks, and the argument errors.
#include <doctest/doctest.h>

#include <cmath>

#include "test_util.hpp"

namespace test_ops_numpy
{
using namespace xgrad;
using namespace xgrad::test;

TEST_CASE("abs, sin, cos: values and float64 gradchecks; abs has no gradient at 0")
{
    const f64 x = random_away_from_zero({3, 4}, 1);
    tape<double> t;
    const var<double> v = t.input(x);
    const auto abs_of = [](double a) { return std::fabs(a); };
    const auto sin_of = [](double a) { return std::sin(a); };
    const auto cos_of = [](double a) { return std::cos(a); };
    XGRAD_CHECK_CLOSE(ops::abs(v).value(), ref_unary<double>(x, abs_of), 0.0, 0.0);
    XGRAD_CHECK_CLOSE(ops::sin(v).value(), ref_unary<double>(x, sin_of), 1e-15, 0.0);
    XGRAD_CHECK_CLOSE(ops::cos(v).value(), ref_unary<double>(x, cos_of), 1e-15, 0.0);
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& a) { return ops::abs(a[0]); }, {x});
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& a) { return ops::sin(a[0]); }, {x});
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& a) { return ops::cos(a[0]); }, {x});

    tape<double> kink;
    const var<double> zero = kink.input(f64{0.0, -2.0});
    kink.backward(ops::sum(ops::abs(zero)));
    CHECK(zero.grad()(0) == 0.0);
    CHECK(zero.grad()(1) == -1.0);
}

TEST_CASE("pow with a var exponent: broadcasting, both gradients, the limit at a zero base")
{
    const f64 base = random_array({2, 3}, 2, 0.5, 2.0);
    const f64 exponent = random_array({3}, 3, -1.5, 2.5);
    tape<double> t;
    const var<double> y = ops::pow(t.input(base), t.input(exponent));
    CHECK(y.shape() == shape_t{2, 3});
    for (std::size_t i = 0; i < 2; ++i)
    {
        for (std::size_t j = 0; j < 3; ++j)
        {
            CHECK(y.value()(i, j) == doctest::Approx(std::pow(base(i, j), exponent(j))).epsilon(1e-15));
        }
    }
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& a) { return ops::pow(a[0], a[1]); },
                          {base, exponent});

    // 0^b: d/db would be 0^b ln 0; as torch.pow it is 0 for b >= 0 (no NaN), and d/da = b 0^(b-1).
    tape<double> z;
    const var<double> a = z.input(f64{0.0, 0.0});
    const var<double> b = z.input(f64{2.0, 0.0});
    z.backward(ops::sum(ops::pow(a, b)));
    CHECK(b.grad()(0) == 0.0);
    CHECK(b.grad()(1) == 0.0);
    CHECK(a.grad()(0) == 0.0);
    CHECK_THROWS_WITH_AS(ops::pow(t.input(f64::from_shape({2})), t.input(f64::from_shape({3}))),
                         doctest::Contains("pow"), std::invalid_argument);
}

TEST_CASE("where, maximum, minimum: broadcasting, the gradient follows the choice, ties go to a")
{
    const f64 a = random_array({2, 3}, 4);
    const f64 b = random_array({3}, 5);
    const mask_t mask = random_mask({2, 1}, 6, 0.5);
    tape<double> t;
    const var<double> va = t.input(a);
    const var<double> vb = t.input(b);
    const var<double> w = ops::where(mask, va, vb);
    const var<double> hi = ops::maximum(va, vb);
    const var<double> lo = ops::minimum(va, vb);
    for (std::size_t i = 0; i < 2; ++i)
    {
        for (std::size_t j = 0; j < 3; ++j)
        {
            CHECK(w.value()(i, j) == (mask(i, 0) ? a(i, j) : b(j)));
            CHECK(hi.value()(i, j) == std::max(a(i, j), b(j)));
            CHECK(lo.value()(i, j) == std::min(a(i, j), b(j)));
        }
    }
    XGRAD_CHECK_GRADIENTS([mask](tape<double>&, const vars& v) { return ops::where(mask, v[0], v[1]); },
                          {a, b});
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::maximum(v[0], v[1]); }, {a, b});
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::minimum(v[0], v[1]); }, {a, b});

    tape<double> tie;
    const var<double> x = tie.input(f64{1.0});
    const var<double> y = tie.input(f64{1.0});
    tie.backward(ops::sum(ops::maximum(x, y)));
    CHECK(x.grad()(0) == 1.0);
    CHECK(y.grad()(0) == 0.0);
    CHECK_THROWS_WITH_AS(ops::where(full_mask({4}, true), va, vb), doctest::Contains("where"),
                         std::invalid_argument);
}

TEST_CASE("clip: values, gradient inside [lo, hi] including the bounds, lo > hi refused")
{
    const f64 x = random_away_from_zero({4, 3}, 7);
    tape<double> t;
    const var<double> y = ops::clip(t.input(x), -0.5, 0.5);
    const auto clipped = [](double v) { return std::min(std::max(v, -0.5), 0.5); };
    XGRAD_CHECK_CLOSE(y.value(), ref_unary<double>(x, clipped), 0.0, 0.0);
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::clip(v[0], -0.5, 0.5); }, {x});
    tape<double> bounds;
    const var<double> at = bounds.input(f64{-0.5, 0.5, 0.7});
    bounds.backward(ops::sum(ops::clip(at, -0.5, 0.5)));
    CHECK(at.grad()(0) == 1.0);
    CHECK(at.grad()(1) == 1.0);
    CHECK(at.grad()(2) == 0.0);
    CHECK_THROWS_WITH_AS(ops::clip(t.input(x), 1.0, 0.0), doctest::Contains("clip: needs lo <= hi"),
                         std::invalid_argument);
}

TEST_CASE("take and scatter_add: flat positions, repeats accumulate, each the other's adjoint")
{
    const f64 x = random_array({3, 4}, 8);
    const ids_t positions = make_ids({2, 3}, {0, 5, 5, 11, 2, 5});
    tape<double> t;
    const var<double> y = ops::take(t.input(x), positions);
    CHECK(y.shape() == shape_t{2, 3});
    for (std::size_t i = 0; i < positions.size(); ++i)
    {
        CHECK(y.value().flat(i) == x.flat(static_cast<std::size_t>(positions.flat(i))));
    }
    XGRAD_CHECK_GRADIENTS([positions](tape<double>&, const vars& v) { return ops::take(v[0], positions); },
                          {x});

    tape<double> counts;
    const var<double> in = counts.input(f64(xt::zeros<double>({3, 4})));
    counts.backward(ops::sum(ops::take(in, positions)));
    CHECK(in.grad().flat(5) == 3.0);  // read three times
    CHECK(in.grad().flat(1) == 0.0);

    const f64 values = random_array({2, 3}, 9);
    tape<double> s;
    const var<double> spread = ops::scatter_add(s.input(values), positions, shape_t{3, 4});
    CHECK(spread.value().flat(5) == doctest::Approx(values.flat(1) + values.flat(2) + values.flat(5)));
    XGRAD_CHECK_GRADIENTS(
        [positions](tape<double>&, const vars& v) {
            return ops::scatter_add(v[0], positions, shape_t{3, 4});
        },
        {values});

    CHECK_THROWS_WITH_AS(ops::take(t.input(x), make_ids({1}, {12})), doctest::Contains("take: position 12"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::scatter_add(s.input(values), make_ids({1}, {0}), shape_t{3}),
                         doctest::Contains("scatter_add: values of shape (2, 3)"), std::invalid_argument);
    // Sizes whose product passes 2^64: refused, not wrapped to a small count that the positions then fit.
    CHECK_THROWS_WITH_AS(ops::scatter_add(s.input(values), positions, shape_t{(std::size_t(1) << 62) + 1, 4}),
                         "scatter_add: shape (4611686018427387905, 4) has more elements than 2^64",
                         std::invalid_argument);
    const std::size_t two_to_32 = std::size_t(1) << 32;
    CHECK_THROWS_WITH_AS(ops::scatter_add(s.input(values), positions, shape_t{two_to_32, two_to_32}),
                         "scatter_add: shape (4294967296, 4294967296) has more elements than 2^64",
                         std::invalid_argument);
}

TEST_CASE("the NumPy-shaped ops are twice differentiable: gradgradcheck of each")
{
    const f64 x = random_away_from_zero({2, 3}, 10);
    const f64 positive = random_array({2, 3}, 11, 0.5, 2.0);
    const f64 y = random_array({3}, 12);
    const mask_t mask = random_mask({2, 1}, 13, 0.5);
    const ids_t positions = make_ids({2, 2}, {5, 0, 5, 3});
    const std::vector<std::pair<const char*, checked_function<double>>> cases{
        {"abs", [](tape<double>&, const vars& v) { return ops::abs(ops::sin(v[0])); }},
        {"sin", [](tape<double>&, const vars& v) { return ops::sin(v[0]); }},
        {"cos", [](tape<double>&, const vars& v) { return ops::cos(v[0]); }},
        {"clip", [](tape<double>&, const vars& v) { return ops::clip(ops::sin(v[0]), -0.5, 0.5); }},
        {"take", [positions](tape<double>&, const vars& v) { return ops::take(ops::sin(v[0]), positions); }},
    };
    for (const auto& [name, f] : cases)
    {
        CAPTURE(name);
        const auto report = gradgradcheck(f, {x});
        CHECK_MESSAGE(report.ok, report.summary());
    }
    const auto pow_report = gradgradcheck([](tape<double>&, const vars& v) { return ops::pow(v[0], v[1]); },
                                          {positive, y});
    CHECK_MESSAGE(pow_report.ok, pow_report.summary());
    const auto select_report = gradgradcheck(
        [mask](tape<double>&, const vars& v) {
            return ops::where(mask, ops::sin(v[0]), ops::maximum(ops::cos(v[0]), ops::sin(v[1])));
        },
        {x, y});
    CHECK_MESSAGE(select_report.ok, select_report.summary());
    const auto scatter_report = gradgradcheck(
        [positions](tape<double>&, const vars& v) {
            return ops::cos(ops::scatter_add(ops::sin(v[0]), positions, shape_t{2, 3}));
        },
        {random_array({2, 2}, 14)});
    CHECK_MESSAGE(scatter_report.ok, scatter_report.summary());
}
}  // namespace test_ops_numpy
