// The transformer kit's math ops: div, add_scalar, sqrt, rsqrt, pow, sigmoid, gelu, max, variance, and the
// composed gelu, layer_norm, log_softmax and cross_entropy. Values against loops over std:: functions,
// gradients against central differences (float64) and closed forms, the fused gelu against its composed
// twin, NaN propagation, large inputs, reused inputs, float32 against float64, and argument errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "ops/composed.hpp"
#include "row_references.hpp"
#include "test_util.hpp"

namespace test_ops_math
{
using namespace xgrad;
using namespace xgrad::test;

namespace
{
const double nan_v = std::numeric_limits<double>::quiet_NaN();
const double inf_v = std::numeric_limits<double>::infinity();

// GELU's tanh approximation written out with std::tanh, and its derivative with sech^2 = 1 / cosh^2.
double ref_gelu(double x)
{
    const double k = std::sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// The same function as x sigmoid(2u) in long double: 0.5 (1 + tanh u) = 1 / (1 + e^{-2u}) does not cancel
// for x << 0, so this keeps its relative accuracy where ref_gelu's 1 + tanh loses digits.
double accurate_gelu(double x)
{
    const long double k = std::sqrt(2.0L / 3.14159265358979323846L);
    const long double xl = x, u = k * (xl + 0.044715L * xl * xl * xl);
    return static_cast<double>(xl / (1.0L + std::exp(-2.0L * u)));
}

double ref_gelu_derivative(double x)
{
    const double k = std::sqrt(2.0 / 3.14159265358979323846);
    const double u = k * (x + 0.044715 * x * x * x);
    const double sech = 1.0 / std::cosh(u);
    return 0.5 * (1.0 + std::tanh(u)) + 0.5 * x * sech * sech * k * (1.0 + 3.0 * 0.044715 * x * x);
}

// max along `axis` by loops; also the one-hot of the first maximal entry (the first NaN if any).
struct ref_max_result
{
    f64 value;
    f64 first_max;  // x's shape
};

ref_max_result ref_max(const f64& x, std::size_t axis, bool keep_dims)
{
    const shape_t in = to_shape(x.shape());
    shape_t kept = in;
    kept[axis] = 1;
    f64 value = filled<double>(kept, 0.0);
    f64 first = filled<double>(in, 0.0);
    for (std::size_t o = 0; o < value.size(); ++o)
    {
        auto index = unravel(o, kept);
        std::size_t best = 0;
        for (std::size_t j = 0; j < in[axis]; ++j)
        {
            index[axis] = j;
            const double v = x.flat(ravel(index, in));
            index[axis] = best;
            const double b = x.flat(ravel(index, in));
            if (std::isnan(b))
            {
                break;
            }
            if (std::isnan(v) || v > b)
            {
                best = j;
            }
        }
        index[axis] = best;
        value.flat(o) = x.flat(ravel(index, in));
        first.flat(ravel(index, in)) = 1.0;
    }
    if (!keep_dims)
    {
        shape_t dropped = in;
        dropped.erase(dropped.begin() + static_cast<std::ptrdiff_t>(axis));
        value.reshape(dropped);
    }
    return {value, first};
}

// Population variance by the two-pass formula (NumPy's var): mean first, then the mean squared deviation.
f64 ref_variance(const f64& x, const std::vector<std::size_t>& axes, bool keep_dims)
{
    std::size_t n = 1;
    for (auto a : axes)
    {
        n *= x.shape()[a];
    }
    const f64 mean_kept = ref_unary<double>(ref_sum(x, axes, true), [n](double v) { return v / double(n); });
    const shape_t in = to_shape(x.shape()), kept = to_shape(mean_kept.shape());
    f64 squares = f64::from_shape(in);
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        const double d = x.flat(i) - mean_kept.flat(broadcast_source(unravel(i, in), kept));
        squares.flat(i) = d * d;
    }
    return ref_unary<double>(ref_sum(squares, axes, keep_dims), [n](double v) { return v / double(n); });
}

ids_t random_targets(const shape_t& shape, std::size_t classes, unsigned seed, double p_ignore = 0.25)
{
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::int64_t> pick(0, static_cast<std::int64_t>(classes) - 1);
    std::bernoulli_distribution ignore(p_ignore);
    ids_t t = ids_t::from_shape(shape);
    for (auto& v : t)
    {
        v = ignore(rng) ? -1 : pick(rng);
    }
    return t;
}

using unary_op = var<double> (*)(const var<double>&);
}  // namespace

// ---- div ---------------------------------------------------------------------------------------------

namespace
{
const std::vector<std::pair<shape_t, shape_t>> div_shapes = {
    {{2, 3}, {3}},
    {{2, 1}, {1, 3}},
    {{}, {2, 3}},
    {{2, 3}, {}},
    {{}, {}},
    {{1}, {1}},
    {{3}, {2, 3}},
    {{2, 1, 4}, {3, 1}},
    {{1, 1}, {2, 3}},
};
}

TEST_CASE("div: values match a loop under broadcasting (scalars and size-1 axes included)")
{
    unsigned seed = 1;
    for (const auto& shapes : div_shapes)
    {
        CAPTURE(shape_str(shapes.first) + " / " + shape_str(shapes.second));
        const f64 A = random_array(shapes.first, seed++, -2.0, 2.0);
        const f64 B = random_away_from_zero(shapes.second, seed++, 0.5, 2.0);
        tape<double> t;
        const auto c = ops::div(t.input(A), t.input(B));
        CHECK(std::string(c.op()) == "div");
        XGRAD_CHECK_CLOSE(
            c.value(), ref_binary<double>(A, B, [](double a, double b) { return a / b; }), 0.0, 0.0);
        XGRAD_CHECK_CLOSE((t.input(A) / t.input(B)).value(), c.value(), 0.0, 0.0);
    }
}

TEST_CASE("div: gradcheck under broadcasting, and the closed forms dA = G / B, dB = -G A / B^2")
{
    unsigned seed = 20;
    for (const auto& shapes : div_shapes)
    {
        CAPTURE(shape_str(shapes.first) + " / " + shape_str(shapes.second));
        XGRAD_CHECK_GRADIENTS(
            [](tape<double>&, const vars& x) { return ops::div(x[0], x[1]); },
            {random_array(shapes.first, seed), random_away_from_zero(shapes.second, seed + 1, 0.5, 2.0)});
        seed += 2;
    }
    const f64 A = random_array({2, 3}, 40), B = random_away_from_zero({2, 3}, 41, 0.5, 2.0);
    const f64 G = random_array({2, 3}, 42);
    tape<double> t;
    auto a = t.input(A), b = t.input(B);
    t.backward(ops::sum(ops::mul(ops::div(a, b), t.constant(G))));
    XGRAD_CHECK_CLOSE(
        a.grad(), ref_binary<double>(G, B, [](double g, double d) { return g / d; }), 1e-15, 0.0);
    const f64 GA = ref_binary<double>(G, A, [](double g, double n) { return -g * n; });
    XGRAD_CHECK_CLOSE(
        b.grad(), ref_binary<double>(GA, B, [](double ga, double d) { return ga / (d * d); }), 1e-14, 0.0);
}

TEST_CASE("reused inputs: div(x, x) is 1 with gradient 0; mul(x, x) has gradient 2x")
{
    const f64 X = random_away_from_zero({2, 3}, 50, 0.3, 2.0);
    tape<double> t;
    auto x = t.input(X);
    auto one = ops::div(x, x);
    CHECK(one.value() == filled<double>({2, 3}, 1.0));
    t.backward(ops::sum(one));
    CHECK(x.grad() == filled<double>({2, 3}, 0.0));

    tape<double> t2;
    auto y = t2.input(X);
    t2.backward(ops::sum(ops::mul(y, y)));
    XGRAD_CHECK_CLOSE(y.grad(), ref_unary<double>(X, [](double v) { return 2 * v; }), 0.0, 0.0);

    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::div(v[0], v[0]); }, {X});
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::div(ops::mul(v[0], v[0]), v[0]); },
                          {X});
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v)
                          { return ops::div(v[0], ops::add_scalar(ops::mul(v[1], v[1]), 1.0)); },
                          {X, random_array({3}, 51)});
}

TEST_CASE("div: a divisor without a gradient keeps only itself saved for backward")
{
    tape<double> t;
    auto a = t.input(random_array({2, 3}, 60));
    auto b = t.constant(random_away_from_zero({3}, 61));
    auto c = ops::div(a, b);
    const auto nodes = t.nodes();
    CHECK_FALSE(nodes[a.index()].saved_for_backward);
    CHECK(nodes[b.index()].saved_for_backward);
    CHECK_FALSE(nodes[c.index()].saved_for_backward);
    // With b wanting a gradient the output is read too: dL/db = -g c / b.
    auto d = ops::div(a, t.input(random_away_from_zero({3}, 62)));
    CHECK(t.nodes()[d.index()].saved_for_backward);
}

// ---- unary ops ---------------------------------------------------------------------------------------

TEST_CASE("add_scalar, sqrt, rsqrt, pow, sigmoid, gelu: values match loops over std:: functions")
{
    const std::vector<shape_t> shapes = {{}, {1}, {1, 1}, {2, 3, 4}};
    unsigned seed = 100;
    for (const auto& shape : shapes)
    {
        CAPTURE(shape_str(shape));
        const f64 x = random_array(shape, seed++, -4.0, 4.0);
        const f64 positive = random_array(shape, seed++, 0.1, 5.0);
        tape<double> t;
        for (double c : {0.0, 1.0, -2.5, 1e-5})
        {
            XGRAD_CHECK_CLOSE(ops::add_scalar(t.input(x), c).value(),
                              ref_unary<double>(x, [c](double v) { return v + c; }),
                              0.0,
                              0.0);
        }
        XGRAD_CHECK_CLOSE(ops::sqrt(t.input(positive)).value(),
                          ref_unary<double>(positive, [](double v) { return std::sqrt(v); }),
                          0.0,
                          0.0);
        XGRAD_CHECK_CLOSE(ops::rsqrt(t.input(positive)).value(),
                          ref_unary<double>(positive, [](double v) { return 1.0 / std::sqrt(v); }),
                          1e-15,
                          0.0);
        for (double p : {2.0, 3.0, 0.5, -1.5, 0.0, 1.0})
        {
            CAPTURE(p);
            XGRAD_CHECK_CLOSE(ops::pow(t.input(positive), p).value(),
                              ref_unary<double>(positive, [p](double v) { return std::pow(v, p); }),
                              1e-15,
                              0.0);
        }
        XGRAD_CHECK_CLOSE(ops::pow(t.input(x), 3.0).value(),
                          ref_unary<double>(x, [](double v) { return v * v * v; }),
                          1e-15,
                          0.0);
        XGRAD_CHECK_CLOSE(ops::sigmoid(t.input(x)).value(),
                          ref_unary<double>(x, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }),
                          1e-15,
                          0.0);
        XGRAD_CHECK_CLOSE(ops::gelu(t.input(x)).value(), ref_unary<double>(x, ref_gelu), 1e-13, 1e-16);
    }
}

TEST_CASE("gelu at hand-checked points: 0, large positive (x), large negative (0)")
{
    tape<double> t;
    const f64 X = {0.0, 1.0, -1.0, 10.0, -10.0, 1e4, -1e4};
    auto x = t.input(X);
    auto y = ops::gelu(x);
    // gelu(1) = 0.5 (1 + tanh(sqrt(2/pi) 1.044715)) = 0.8411919906082768 (the published tanh-GELU value)
    CHECK(y.value()(0) == 0.0);
    CHECK(y.value()(1) == doctest::Approx(0.8411919906082768).epsilon(1e-15));
    CHECK(y.value()(2) ==
          doctest::Approx(0.8411919906082768 - 1.0).epsilon(1e-14));  // gelu(-x) = gelu(x) - x
    CHECK(y.value()(3) == 10.0);
    CHECK(std::abs(y.value()(4)) < 1e-20);
    CHECK(y.value()(5) == 1e4);
    CHECK(y.value()(6) == 0.0);
    t.backward(ops::sum(y));
    const f64 expected = {0.5, ref_gelu_derivative(1.0), ref_gelu_derivative(-1.0), 1.0, 0.0, 1.0, 0.0};
    XGRAD_CHECK_CLOSE(x.grad(), expected, 1e-14, 1e-20);
}

TEST_CASE("unary ops: gradcheck on (), (1), (1, 1) and (2, 3, 4), and closed-form gradients")
{
    const std::vector<shape_t> shapes = {{}, {1}, {1, 1}, {2, 3, 4}};
    unsigned seed = 200;
    for (const auto& shape : shapes)
    {
        CAPTURE(shape_str(shape));
        const f64 x = random_array(shape, seed++, -3.0, 3.0);
        const f64 positive = random_array(shape, seed++, 0.2, 3.0);
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::add_scalar(v[0], 0.75); }, {x});
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::sqrt(v[0]); }, {positive});
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::rsqrt(v[0]); }, {positive});
        for (double p : {2.0, 3.0, 0.5, -1.5, 0.0, 1.0})
        {
            CAPTURE(p);
            XGRAD_CHECK_GRADIENTS([p](tape<double>&, const vars& v) { return ops::pow(v[0], p); },
                                  {positive});
        }
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::pow(v[0], 3.0); }, {x});
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::sigmoid(v[0]); }, {x});
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::gelu(v[0]); }, {x});
    }

    // Closed forms, G the incoming gradient.
    const f64 X = random_array({3, 4}, 250, -3.0, 3.0), P = random_array({3, 4}, 251, 0.2, 3.0);
    const f64 G = random_array({3, 4}, 252);
    auto grad_of = [&G](unary_op op, const f64& at)
    {
        tape<double> t;
        auto v = t.input(at);
        t.backward(ops::sum(ops::mul(op(v), t.constant(G))));
        return f64(v.grad());
    };
    auto times_g = [&G](const f64& d)
    { return ref_binary<double>(G, d, [](double g, double v) { return g * v; }); };
    XGRAD_CHECK_CLOSE(grad_of(ops::sqrt<double>, P),
                      times_g(ref_unary<double>(P, [](double v) { return 0.5 / std::sqrt(v); })),
                      1e-14,
                      0.0);
    XGRAD_CHECK_CLOSE(grad_of(ops::rsqrt<double>, P),
                      times_g(ref_unary<double>(P, [](double v) { return -0.5 * std::pow(v, -1.5); })),
                      1e-14,
                      0.0);
    XGRAD_CHECK_CLOSE(grad_of(ops::sigmoid<double>, X),
                      times_g(ref_unary<double>(X,
                                                [](double v)
                                                {
                                                    const double e = std::exp(-v);
                                                    return e / ((1.0 + e) * (1.0 + e));
                                                })),
                      1e-13,
                      1e-17);
    XGRAD_CHECK_CLOSE(
        grad_of(ops::gelu<double>, X), times_g(ref_unary<double>(X, ref_gelu_derivative)), 1e-13, 1e-16);
}

TEST_CASE("pow with exponent 0 is 1 with gradient 0, also at x = 0; sqrt at 0 has an infinite slope")
{
    tape<double> t;
    auto x = t.input(f64{0.0, 2.0, -3.0});
    auto y = ops::pow(x, 0.0);
    CHECK(y.value() == f64{1.0, 1.0, 1.0});
    t.backward(ops::sum(y));
    CHECK(x.grad() == f64{0.0, 0.0, 0.0});

    tape<double> t2;
    auto z = t2.input(f64{0.0, 4.0});
    auto r = ops::sqrt(z);
    t2.backward(ops::sum(r));
    CHECK(r.value() == f64{0.0, 2.0});
    CHECK(z.grad()(0) == inf_v);
    CHECK(z.grad()(1) == 0.25);
}

TEST_CASE("sigmoid is stable for large |x|: no overflow to NaN, exact tails")
{
    tape<double> t;
    const f64 X = {-1000.0, -100.0, -40.0, 0.0, 40.0, 100.0, 1000.0, -inf_v, inf_v};
    auto x = t.input(X);
    auto y = ops::sigmoid(x);
    CHECK(all_finite(y.value()));
    CHECK(y.value()(0) == 0.0);
    CHECK(y.value()(1) == doctest::Approx(std::exp(-100.0)).epsilon(1e-15));
    CHECK(y.value()(2) == doctest::Approx(std::exp(-40.0) / (1.0 + std::exp(-40.0))).epsilon(1e-15));
    CHECK(y.value()(3) == 0.5);
    CHECK(y.value()(5) == 1.0);
    CHECK(y.value()(6) == 1.0);
    CHECK(y.value()(7) == 0.0);
    CHECK(y.value()(8) == 1.0);
    t.backward(ops::sum(y));
    CHECK(all_finite(x.grad()));
    CHECK(x.grad()(3) == 0.25);
    CHECK(x.grad()(0) == 0.0);

    tape<float> tf;
    auto xf = tf.input(array<float>{-1e4f, -100.f, 100.f, 1e4f});
    auto yf = ops::sigmoid(xf);
    tf.backward(ops::sum(yf));
    CHECK(all_finite(yf.value()));
    CHECK(all_finite(xf.grad()));
    CHECK(yf.value()(0) == 0.0f);
    CHECK(yf.value()(3) == 1.0f);
}

TEST_CASE("gelu: large inputs give finite values and gradients, also in float32 where x^3 overflows")
{
    tape<float> t;
    const array<float> X = {-1e13f, -1e4f, 1e4f, 1e13f};
    auto x = t.input(X);
    auto y = ops::gelu(x);
    t.backward(ops::sum(y));
    CHECK(all_finite(y.value()));
    CHECK(all_finite(x.grad()));
    CHECK(y.value()(2) == 1e4f);
    CHECK(y.value()(3) == 1e13f);
    CHECK(y.value()(0) == 0.0f);
    CHECK(x.grad() == array<float>{0.0f, 0.0f, 1.0f, 1.0f});
}

TEST_CASE("fused gelu equals the composed gelu to 1e-13 in float64, values and gradients")
{
    for (const shape_t& shape : {shape_t{}, shape_t{1}, shape_t{4, 5}, shape_t{2, 3, 7}})
    {
        CAPTURE(shape_str(shape));
        const f64 X = random_array(shape, 300 + static_cast<unsigned>(shape.size()), -6.0, 6.0);
        const auto fused = evaluate_in<double>([](const auto& v) { return ops::gelu(v[0]); }, {X}, 9);
        const auto composed =
            evaluate_in<double>([](const auto& v) { return ops::composed::gelu(v[0]); }, {X}, 9);
        // The composed twin's 1 + tanh(u) cancels for x << 0 (absolute error ~ 1e-16 |x|), which the fused
        // op's sigmoid form does not: against the twin, relative 1e-13 above that floor; against a long
        // double reference of the sigmoid form, relative 1e-14 everywhere.
        XGRAD_CHECK_CLOSE(fused.value, composed.value, 1e-13, 1e-15);
        XGRAD_CHECK_CLOSE(fused.value, ref_unary<double>(X, accurate_gelu), 1e-14, 1e-300);
        XGRAD_CHECK_CLOSE(fused.grads[0], composed.grads[0], 1e-13, 1e-15);
    }
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::composed::gelu(v[0]); },
                          {random_array({2, 3}, 310, -3.0, 3.0)});
    // The composed twin records nothing of its own: it is made of the primitives only.
    tape<double> t;
    auto y = ops::composed::gelu(t.input(f64{0.5}));
    CHECK(std::string(y.op()) == "scale");
    for (const auto& n : t.nodes())
    {
        CHECK(n.op != "gelu");
    }
}

TEST_CASE("NaN propagates through div, sqrt, rsqrt, pow, sigmoid and gelu; sqrt of a negative is NaN")
{
    tape<double> t;
    const f64 X = {nan_v, 1.0};
    auto x = t.input(X);
    for (unary_op op : {ops::sqrt<double>, ops::rsqrt<double>, ops::sigmoid<double>, ops::gelu<double>})
    {
        const auto y = op(x);
        CHECK(std::isnan(y.value()(0)));
        CHECK(std::isfinite(y.value()(1)));
    }
    CHECK(std::isnan(ops::pow(x, 2.0).value()(0)));
    CHECK(std::isnan(ops::add_scalar(x, 1.0).value()(0)));
    CHECK(std::isnan(ops::div(t.input(f64{1.0, 1.0}), x).value()(0)));
    CHECK(std::isnan(ops::div(x, t.input(f64{2.0, 2.0})).value()(0)));
    CHECK(std::isnan(ops::sqrt(t.input(f64{-1.0})).value()(0)));
    CHECK(std::isnan(ops::rsqrt(t.input(f64{-1.0})).value()(0)));
    auto g = ops::gelu(x);
    t.backward(ops::sum(g));
    CHECK(std::isnan(x.grad()(0)));
    CHECK(std::isfinite(x.grad()(1)));
}

TEST_CASE("float32 agrees with float64 for every new op (values and gradients)")
{
    const f64 X = random_array({3, 5}, 400, -3.0, 3.0), P = random_array({3, 5}, 401, 0.3, 3.0);
    const f64 B = random_away_from_zero({5}, 402, 0.5, 2.0);
    check_float32_agrees([](const auto& v) { return ops::div(v[0], v[1]); }, {X, B});
    check_float32_agrees([](const auto& v) { return ops::add_scalar(v[0], decltype(float_type_of(v))(0.5)); },
                         {X});
    check_float32_agrees([](const auto& v) { return ops::sqrt(v[0]); }, {P});
    check_float32_agrees([](const auto& v) { return ops::rsqrt(v[0]); }, {P});
    check_float32_agrees([](const auto& v) { return ops::pow(v[0], decltype(float_type_of(v))(1.5)); }, {P});
    check_float32_agrees([](const auto& v) { return ops::sigmoid(v[0]); }, {X});
    check_float32_agrees([](const auto& v) { return ops::gelu(v[0]); }, {X});
    check_float32_agrees([](const auto& v) { return ops::max(v[0], 1, false); }, {X});
    check_float32_agrees([](const auto& v) { return ops::variance(v[0], {1}, true); }, {X});
    check_float32_agrees([](const auto& v) { return ops::composed::gelu(v[0]); }, {X});
    check_float32_agrees([](const auto& v) { return ops::composed::log_softmax(v[0]); }, {X});
    check_float32_agrees(
        [](const auto& v)
        { return ops::composed::layer_norm(v[0], v[1], v[2], decltype(float_type_of(v))(1e-5)); },
        {X, random_array({5}, 403), random_array({5}, 404)},
        1e-4,
        1e-5);
    const ids_t targets = {1, -1, 4};
    check_float32_agrees([&targets](const auto& v) { return ops::composed::cross_entropy(v[0], targets); },
                         {X});
}

// ---- max -----------------------------------------------------------------------------------------------

namespace
{
struct axis_case
{
    shape_t shape;
    std::size_t axis;
};

const std::vector<axis_case> max_cases = {
    {{1}, 0},
    {{1, 1}, 1},
    {{5}, 0},
    {{2, 3}, 0},
    {{2, 3}, 1},
    {{2, 3, 4}, 0},
    {{2, 3, 4}, 1},
    {{2, 3, 4}, 2},
    {{2, 1, 3}, 1},
    {{3, 1}, 0},
    {{4, 1}, 1},
};
}

TEST_CASE("max: values and the gradient's target entry match loops, every axis, keep_dims or not")
{
    unsigned seed = 500;
    for (const auto& c : max_cases)
    {
        for (bool keep : {false, true})
        {
            CAPTURE(shape_str(c.shape));
            CAPTURE(c.axis);
            CAPTURE(keep);
            const f64 X = random_array(c.shape, seed++);
            const auto expected = ref_max(X, c.axis, keep);
            tape<double> t;
            auto x = t.input(X);
            auto y = ops::max(x, c.axis, keep);
            CHECK(std::string(y.op()) == "max");
            XGRAD_CHECK_CLOSE(y.value(), expected.value, 0.0, 0.0);
            t.backward(ops::sum(y));
            XGRAD_CHECK_CLOSE(x.grad(), expected.first_max, 0.0, 0.0);
            const auto axis = c.axis;
            XGRAD_CHECK_GRADIENTS(
                [axis, keep](tape<double>&, const vars& v) { return ops::max(v[0], axis, keep); }, {X});
        }
    }
}

TEST_CASE("max: ties send the gradient to the first maximal entry (as torch.max(dim))")
{
    tape<double> t;
    const f64 X = {{1.0, 3.0, 3.0}, {2.0, 2.0, 2.0}, {-inf_v, -inf_v, -inf_v}, {-0.0, 0.0, -1.0}};
    auto x = t.input(X);
    auto y = ops::max(x, 1);
    CHECK(y.value()(0) == 3.0);
    CHECK(y.value()(1) == 2.0);
    CHECK(y.value()(2) == -inf_v);
    CHECK(y.value()(3) == 0.0);
    t.backward(ops::sum(ops::mul(y, t.constant(f64{10.0, 20.0, 30.0, 40.0}))));
    const f64 expected = {{0.0, 10.0, 0.0}, {20.0, 0.0, 0.0}, {30.0, 0.0, 0.0}, {40.0, 0.0, 0.0}};
    CHECK(x.grad() == expected);

    tape<double> t2;  // the same along axis 0 of the transpose
    auto columns = t2.input(f64{{1.0, 5.0}, {3.0, 5.0}, {3.0, 0.0}});
    t2.backward(ops::sum(ops::max(columns, 0, true)));
    CHECK(columns.grad() == f64{{0.0, 1.0}, {1.0, 0.0}, {0.0, 0.0}});
}

TEST_CASE("max: a NaN in a row makes the row's max NaN; the gradient goes to the first NaN")
{
    tape<double> t;
    const f64 X = {{1.0, nan_v, 7.0, nan_v}, {nan_v, 2.0, 3.0, 1.0}, {4.0, 1.0, 2.0, 9.0}};
    auto x = t.input(X);
    auto y = ops::max(x, 1);
    CHECK(std::isnan(y.value()(0)));
    CHECK(std::isnan(y.value()(1)));
    CHECK(y.value()(2) == 9.0);
    t.backward(ops::sum(y));
    const f64 expected = {{0.0, 1.0, 0.0, 0.0}, {1.0, 0.0, 0.0, 0.0}, {0.0, 0.0, 0.0, 1.0}};
    CHECK(x.grad() == expected);
    const auto reference = ref_max(X, 1, false);
    CHECK(x.grad() == reference.first_max);
}

TEST_CASE("max of the same var twice and beside other uses: gradients add up")
{
    const f64 X = random_array({3, 4}, 600);
    XGRAD_CHECK_GRADIENTS(
        [](tape<double>&, const vars& v)
        { return ops::add(ops::mul(ops::max(v[0], 1, true), v[0]), ops::max(v[0], 0, false)); },
        {X});
}

// ---- variance ------------------------------------------------------------------------------------------

namespace
{
struct reduce_case
{
    shape_t shape;
    std::vector<std::size_t> axes;
};

const std::vector<reduce_case> variance_cases = {
    {{1}, {0}},
    {{1, 1}, {0, 1}},
    {{5}, {0}},
    {{2, 3, 4}, {0}},
    {{2, 3, 4}, {2}},
    {{2, 3, 4}, {1}},
    {{2, 3, 4}, {2, 0}},
    {{2, 3, 4}, {0, 1, 2}},
    {{2, 1, 3}, {1}},
    {{2, 3}, {}},
};
}

TEST_CASE("variance: values match the two-pass formula, keep_dims or not; gradcheck")
{
    unsigned seed = 700;
    for (const auto& c : variance_cases)
    {
        for (bool keep : {false, true})
        {
            CAPTURE(shape_str(c.shape));
            CAPTURE(axes_str(c.axes));
            CAPTURE(keep);
            const f64 X = random_array(c.shape, seed++, -2.0, 3.0);
            tape<double> t;
            auto y = ops::variance(t.input(X), c.axes, keep);
            CHECK(std::string(y.op()) == "variance");
            XGRAD_CHECK_CLOSE(y.value(), ref_variance(X, c.axes, keep), 1e-13, 1e-15);
            const auto axes = c.axes;
            XGRAD_CHECK_GRADIENTS(
                [axes, keep](tape<double>&, const vars& v) { return ops::variance(v[0], axes, keep); }, {X});
        }
    }
}

TEST_CASE("variance: gradient is g * 2 (x - mean) / n; a constant row has variance 0 and gradient 0")
{
    tape<double> t;
    const f64 X = {{1.0, 2.0, 4.0, 9.0}, {3.0, 3.0, 3.0, 3.0}};
    auto x = t.input(X);
    auto v = ops::variance(x, {1});
    // Row 0: mean 4, deviations (-3, -2, 0, 5), variance (9 + 4 + 0 + 25) / 4 = 9.5.
    CHECK(v.value() == f64{9.5, 0.0});
    t.backward(ops::sum(ops::mul(v, t.constant(f64{2.0, 7.0}))));
    // dL/dx = g 2 (x - mean) / 4 = g (x - mean) / 2
    const f64 expected = {{-3.0, -2.0, 0.0, 5.0}, {0.0, 0.0, 0.0, 0.0}};
    CHECK(x.grad() == expected);
}

TEST_CASE("variance is computed in two passes: a large common offset does not cancel it away")
{
    // E[x^2] - E[x]^2 would lose every digit here (x^2 ~ 1e16); the two-pass mean of squared deviations
    // is exact: 1e8 + {1, 2, 3} has variance 2/3.
    tape<double> t;
    auto v = ops::variance(t.input(f64{1e8 + 1, 1e8 + 2, 1e8 + 3}), {0});
    CHECK(v.value()() == doctest::Approx(2.0 / 3.0).epsilon(1e-12));
}

TEST_CASE("variance and mean of the same var: reused input, gradients add up")
{
    XGRAD_CHECK_GRADIENTS(
        [](tape<double>&, const vars& v)
        { return ops::mul(ops::variance(v[0], {1}, true), ops::sub(v[0], ops::mean(v[0], {1}, true))); },
        {random_array({3, 4}, 800)});
}

TEST_CASE("variance with NaN: the NaN's reduction is NaN, the others are not")
{
    tape<double> t;
    auto v = ops::variance(t.input(f64{{1.0, nan_v}, {1.0, 3.0}}), {1});
    CHECK(std::isnan(v.value()(0)));
    CHECK(v.value()(1) == 1.0);
}

// ---- composed layer_norm, log_softmax, cross_entropy ----------------------------------------------------

TEST_CASE("composed layer_norm matches a loop; gradcheck for x, weight and bias")
{
    unsigned seed = 900;
    for (const shape_t& shape : {shape_t{1}, shape_t{5}, shape_t{3, 4}, shape_t{2, 3, 6}, shape_t{2, 1, 1}})
    {
        CAPTURE(shape_str(shape));
        const std::size_t d = shape.back();
        const f64 X = random_array(shape, seed++, -2.0, 2.0);
        const f64 W = random_array({d}, seed++), B = random_array({d}, seed++);
        for (double eps : {1e-5, 0.1})
        {
            CAPTURE(eps);
            tape<double> t;
            auto y = ops::composed::layer_norm(t.input(X), t.input(W), t.input(B), eps);
            XGRAD_CHECK_CLOSE(y.value(), ref_layer_norm(X, W, B, eps), 1e-12, 1e-13);
        }
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v)
                              { return ops::composed::layer_norm(v[0], v[1], v[2], 1e-5); },
                              {X, W, B});
    }
}

TEST_CASE("composed layer_norm: a constant row normalises to the bias (0 / sqrt(eps))")
{
    tape<double> t;
    auto y = ops::composed::layer_norm(
        t.input(filled<double>({1, 3}, 5.0)), t.input(f64{2.0, 3.0, 4.0}), t.input(f64{0.5, -0.5, 1.0}));
    CHECK(y.value() == f64{{0.5, -0.5, 1.0}});
}

TEST_CASE("composed log_softmax matches a loop in long double; large logits stay finite; gradcheck")
{
    unsigned seed = 1000;
    for (const shape_t& shape : {shape_t{1}, shape_t{6}, shape_t{3, 4}, shape_t{2, 3, 5}, shape_t{4, 1}})
    {
        CAPTURE(shape_str(shape));
        const f64 X = random_array(shape, seed++, -5.0, 5.0);
        tape<double> t;
        XGRAD_CHECK_CLOSE(ops::composed::log_softmax(t.input(X)).value(), ref_log_softmax(X), 1e-14, 1e-14);
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::composed::log_softmax(v[0]); },
                              {X});
    }
    tape<double> t;
    const f64 big = {{1e4, -1e4, 0.0, 1e4 - 1.0}, {-1e4, -1e4 - 2.0, -1e4 + 3.0, -1e4}};
    auto x = t.input(big);
    auto y = ops::composed::log_softmax(x);
    CHECK(all_finite(y.value()));
    XGRAD_CHECK_CLOSE(y.value(), ref_log_softmax(big), 1e-14, 1e-12);
    t.backward(ops::sum(ops::mul(y, t.constant(random_array({2, 4}, 1010)))));
    CHECK(all_finite(x.grad()));
}

TEST_CASE("composed log_softmax: a NaN in a row makes that row NaN and leaves the others alone")
{
    tape<double> t;
    auto y = ops::composed::log_softmax(t.input(f64{{1.0, nan_v, 2.0}, {1.0, 2.0, 3.0}}));
    for (std::size_t j = 0; j < 3; ++j)
    {
        CHECK(std::isnan(y.value()(0, j)));
        CHECK(std::isfinite(y.value()(1, j)));
    }
}

TEST_CASE("composed cross_entropy matches a hand loop, value and gradient (softmax - one_hot) / N")
{
    unsigned seed = 1100;
    const std::vector<std::pair<shape_t, std::size_t>> cases = {
        {{1}, 1},
        {{4}, 5},
        {{2, 3}, 7},
        {{3, 1}, 2},
        {{}, 4},
    };
    for (const auto& c : cases)
    {
        shape_t logits_shape = c.first;
        logits_shape.push_back(c.second);
        CAPTURE(shape_str(logits_shape));
        const f64 X = random_array(logits_shape, seed++, -3.0, 3.0);
        ids_t targets = random_targets(c.first, c.second, seed++);
        targets.flat(0) = static_cast<std::int64_t>(c.second) - 1;  // at least one kept target
        tape<double> t;
        auto x = t.input(X);
        auto loss = ops::composed::cross_entropy(x, targets);
        CHECK(loss.shape() == shape_t{});
        CHECK(loss.value()() == doctest::Approx(ref_cross_entropy(X, targets)).epsilon(1e-14));
        t.backward(loss);
        XGRAD_CHECK_CLOSE(x.grad(), ref_cross_entropy_grad(X, targets), 1e-13, 1e-15);
        XGRAD_CHECK_GRADIENTS([targets](tape<double>&, const vars& v)
                              { return ops::composed::cross_entropy(v[0], targets); },
                              {X});
    }
}

TEST_CASE("composed cross_entropy: hand-sized example with an ignored target")
{
    // Rows (0, 0) with target 1 and (ln 3, 0) ignored: loss = -log(1/2) = ln 2 over one kept row.
    tape<double> t;
    auto x = t.input(f64{{0.0, 0.0}, {std::log(3.0), 0.0}});
    auto loss = ops::composed::cross_entropy(x, ids_t{1, -1});
    CHECK(loss.value()() == doctest::Approx(std::log(2.0)).epsilon(1e-15));
    t.backward(loss);
    const f64 expected = {{0.5, -0.5}, {0.0, 0.0}};
    XGRAD_CHECK_CLOSE(x.grad(), expected, 1e-15, 1e-16);
}

TEST_CASE("composed cross_entropy: large logits (1e4) give a finite loss and gradient")
{
    tape<double> t;
    const f64 X = {{1e4, -1e4, 0.0}, {-1e4, 1e4, 1e4 - 2.0}, {3e4, 2e4, 1e4}};
    const ids_t targets = {0, 2, 2};
    auto x = t.input(X);
    auto loss = ops::composed::cross_entropy(x, targets);
    CHECK(std::isfinite(loss.value()()));
    CHECK(loss.value()() == doctest::Approx(ref_cross_entropy(X, targets)).epsilon(1e-12));
    t.backward(loss);
    CHECK(all_finite(x.grad()));
    XGRAD_CHECK_CLOSE(x.grad(), ref_cross_entropy_grad(X, targets), 1e-12, 1e-15);

    tape<float> tf;
    auto xf = tf.input(to_float_type<float>(X));
    auto lf = ops::composed::cross_entropy(xf, targets);
    tf.backward(lf);
    CHECK(std::isfinite(lf.value()()));
    CHECK(all_finite(xf.grad()));
}

TEST_CASE("composed cross_entropy: every target ignored gives loss 0 and a zero gradient, no NaN")
{
    tape<double> t;
    auto x = t.input(random_array({2, 3, 4}, 1200, -5.0, 5.0));
    const ids_t targets = {{-1, -1, -1}, {-1, -1, -1}};
    auto loss = ops::composed::cross_entropy(x, targets);
    CHECK(loss.value()() == 0.0);
    t.backward(loss);
    CHECK(x.grad() == filled<double>({2, 3, 4}, 0.0));
}

TEST_CASE("composed cross_entropy on the tape of its input: the one-hot is a constant leaf")
{
    tape<double> t;
    auto x = t.input(random_array({2, 3}, 1300));
    ops::composed::cross_entropy(x, ids_t{0, 2});
    std::size_t constants = 0;
    for (const auto& n : t.nodes())
    {
        CHECK(n.op != "cross_entropy");
        CHECK(n.op != "log_softmax");
        constants += n.op == "constant";
    }
    CHECK(constants == 1);
}

TEST_CASE("constant_like records a constant leaf on the tape of a given var")
{
    tape<double> t;
    auto x = t.input(f64{1.0, 2.0});
    auto c = constant_like(x, f64{3.0, 4.0}, "c");
    CHECK(c.state() == x.state());
    CHECK_FALSE(c.requires_grad());
    CHECK(std::string(c.op()) == "constant");
    CHECK(t.nodes()[c.index()].label == "c");
    t.backward(ops::sum(ops::mul(x, c)));
    CHECK(x.grad() == f64{3.0, 4.0});
    CHECK(c.grad() == f64{0.0, 0.0});
    t.clear();
    CHECK_THROWS_AS(constant_like(x, f64{1.0}), std::logic_error);  // a stale handle
    CHECK_THROWS_AS(constant_like(var<double>(), f64{1.0}), std::logic_error);
}

// ---- argument errors -------------------------------------------------------------------------------------

TEST_CASE("errors name the op, the argument and the shapes")
{
    tape<double> t;
    auto a = t.input(filled<double>({3, 2}, 1.0));

    SUBCASE("div with shapes that do not broadcast")
    {
        const std::string message =
            invalid_argument_message([&] { ops::div(a, t.input(filled<double>({3}, 1.0))); });
        CHECK(contains(message, "div"));
        CHECK(contains(message, "(3, 2)"));
        CHECK(contains(message, "(3)"));
    }
    SUBCASE("max with an axis out of range, or an empty axis")
    {
        std::string message = invalid_argument_message([&] { ops::max(a, 2); });
        CHECK(contains(message, "max"));
        CHECK(contains(message, "axis 2"));
        CHECK(contains(message, "(3, 2)"));
        message = invalid_argument_message([&] { ops::max(t.input(filled<double>({}, 1.0)), 0); });
        CHECK(contains(message, "max"));
        CHECK(contains(message, "()"));
        message = invalid_argument_message([&] { ops::max(t.input(filled<double>({2, 0}, 1.0)), 1); });
        CHECK(contains(message, "max"));
        CHECK(contains(message, "(2, 0)"));
    }
    SUBCASE("variance with an axis out of range or repeated")
    {
        std::string message = invalid_argument_message([&] { ops::variance(a, {0, 7}); });
        CHECK(contains(message, "variance"));
        CHECK(contains(message, "axis 7"));
        CHECK(contains(message, "(3, 2)"));
        message = invalid_argument_message([&] { ops::variance(a, {1, 1}); });
        CHECK(contains(message, "variance"));
        CHECK(contains(message, "repeated"));
    }
    SUBCASE("cross_entropy with a target outside [0, V)")
    {
        auto logits = t.input(filled<double>({2, 3, 5}, 0.0));
        const ids_t targets = {{0, 1, 4}, {-1, 5, 2}};
        std::string message =
            invalid_argument_message([&] { ops::composed::cross_entropy(logits, targets); });
        CHECK(contains(message, "cross_entropy"));
        CHECK(contains(message, "target 5"));
        CHECK(contains(message, "[1, 1]"));
        const ids_t negative = {{0, 1, 4}, {-2, 0, 0}};
        message = invalid_argument_message([&] { ops::composed::cross_entropy(logits, negative); });
        CHECK(contains(message, "target -2"));
        CHECK(contains(message, "[1, 0]"));
    }
    SUBCASE("cross_entropy with targets of the wrong shape")
    {
        auto logits = t.input(filled<double>({2, 3, 5}, 0.0));
        const ids_t targets = {0, 1, 2};
        const std::string message =
            invalid_argument_message([&] { ops::composed::cross_entropy(logits, targets); });
        CHECK(contains(message, "cross_entropy"));
        CHECK(contains(message, "(3)"));
        CHECK(contains(message, "(2, 3, 5)"));
        CHECK_THROWS_AS(ops::composed::cross_entropy(t.input(filled<double>({}, 0.0)), ids_t{}),
                        std::invalid_argument);
    }
    SUBCASE("layer_norm with a weight or bias of the wrong shape")
    {
        auto w = t.input(filled<double>({3}, 1.0)), b = t.input(filled<double>({2}, 0.0));
        const std::string message = invalid_argument_message([&] { ops::composed::layer_norm(a, w, b); });
        CHECK(contains(message, "layer_norm"));
        CHECK(contains(message, "(3)"));
        CHECK(contains(message, "(3, 2)"));
        CHECK_THROWS_AS(ops::composed::layer_norm(a, b, w), std::invalid_argument);
    }
    SUBCASE("log_softmax of a 0-d input")
    {
        const std::string message =
            invalid_argument_message([&] { ops::composed::log_softmax(t.input(filled<double>({}, 1.0))); });
        CHECK(contains(message, "log_softmax"));
        CHECK(contains(message, "()"));
    }
}

TEST_CASE("a failed op leaves the tape unchanged")
{
    tape<double> t;
    auto a = t.input(filled<double>({3, 2}, 1.0));
    auto b = t.constant(filled<double>({4}, 1.0));
    CHECK_THROWS(ops::div(a, b));
    CHECK_THROWS(ops::max(a, 5));
    CHECK_THROWS(ops::variance(a, {2}));
    CHECK_THROWS(ops::composed::cross_entropy(a, ids_t{0, 2, 1}));
    CHECK(t.size() == 2);
}
}  // namespace test_ops_math
