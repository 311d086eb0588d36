// The architecture variants' fused ops (erf, silu, gelu_exact, swiglu, rms_norm, rope): forward values
// against long double loop references and hand-computed cases, gradients against central differences
// (float64) on several shapes (size 1, T = 1, dh = 2, large values, reused inputs), each fused op against
// its composed twin (ops/composed.hpp) in values and gradients, float32 against float64, PyTorch fixtures
// (tests/data/op_fixtures, made by tests/fixtures/make_variant_op_fixtures.py), threads against one thread,
// and the argument errors naming the op and the shapes.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "io/npy.hpp"
#include "kernels/parallel.hpp"
#include "ops/composed.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"

namespace test_ops_variants
{
using namespace xgrad;
using namespace xgrad::test;
namespace fs = std::filesystem;

namespace
{
// ---- long double references -------------------------------------------------------------------

long double ref_sigmoid(long double x)
{
    return 1.0L / (1.0L + std::exp(-x));
}

f64 ref_silu(const f64& x)
{
    return ref_unary<double>(x, [](double v) { return static_cast<double>(v * ref_sigmoid(v)); });
}

f64 ref_gelu_exact(const f64& x)
{
    return ref_unary<double>(x, [](double v) {
        // 1 + erf(x / sqrt 2) = erfc(-x / sqrt 2), which keeps its digits for x << 0
        return static_cast<double>(0.5L * v * std::erfc(-static_cast<long double>(v) / std::sqrt(2.0L)));
    });
}

f64 ref_rms_norm(const f64& x, const f64& w, double eps)
{
    const std::size_t d = x.shape().back();
    f64 out = f64::from_shape(x.shape());
    for (std::size_t r = 0; r < x.size() / d; ++r)
    {
        long double squares = 0;
        for (std::size_t j = 0; j < d; ++j)
        {
            squares += static_cast<long double>(x.flat(r * d + j)) * x.flat(r * d + j);
        }
        const long double r_inv = 1.0L / std::sqrt(squares / d + eps);
        for (std::size_t j = 0; j < d; ++j)
        {
            out.flat(r * d + j) = static_cast<double>(x.flat(r * d + j) * r_inv * w.flat(j));
        }
    }
    return out;
}

// max over rows of 1 / sqrt(mean(x^2) + eps)
double largest_inverse_rms(const f64& x, double eps)
{
    const std::size_t d = x.shape().back();
    double largest = 0;
    for (std::size_t r = 0; r < x.size() / d; ++r)
    {
        double squares = 0;
        for (std::size_t j = 0; j < d; ++j)
        {
            squares += x.flat(r * d + j) * x.flat(r * d + j);
        }
        largest = std::max(largest, 1 / std::sqrt(squares / d + eps));
    }
    return largest;
}

f64 ref_rope(const f64& x, double base, std::size_t offset)
{
    const std::size_t length = x.shape()[2], dh = x.shape()[3];
    f64 out = f64::from_shape(x.shape());
    for (std::size_t r = 0; r < x.size() / dh; ++r)
    {
        const long double position = static_cast<long double>(offset + r % length);
        for (std::size_t i = 0; i < dh / 2; ++i)
        {
            const long double angle = position * std::pow(static_cast<long double>(base), -2.0L * i / dh);
            const long double a = x.flat(r * dh + 2 * i), b = x.flat(r * dh + 2 * i + 1);
            out.flat(r * dh + 2 * i) = static_cast<double>(a * std::cos(angle) - b * std::sin(angle));
            out.flat(r * dh + 2 * i + 1) = static_cast<double>(a * std::sin(angle) + b * std::cos(angle));
        }
    }
    return out;
}

// ---- evaluation helpers -------------------------------------------------------------------------

template <class T>
using function_of = std::function<var<T>(const std::vector<var<T>>&)>;

template <class T>
struct value_and_grads
{
    array<T> value;
    std::vector<array<T>> grads;
};

// f on a fresh tape at `inputs`, backward seeded with G: the value and every input's gradient.
template <class T>
value_and_grads<T> evaluate(const function_of<T>& f, const std::vector<array<T>>& inputs, const array<T>& G)
{
    tape<T> t;
    std::vector<var<T>> xs;
    for (const auto& x : inputs)
    {
        xs.push_back(t.input(x));
    }
    const var<T> y = f(xs);
    t.backward(y, G);
    value_and_grads<T> out{y.value(), {}};
    for (const auto& x : xs)
    {
        out.grads.push_back(x.grad());
    }
    return out;
}

template <class T>
std::vector<array<T>> to_float_types(const std::vector<f64>& xs)
{
    std::vector<array<T>> out;
    for (const auto& x : xs)
    {
        out.push_back(to_float_type<T>(x));
    }
    return out;
}

value_and_grads<double> widened(const value_and_grads<float>& r)
{
    value_and_grads<double> out{xt::cast<double>(r.value), {}};
    for (const auto& g : r.grads)
    {
        out.grads.push_back(xt::cast<double>(g));
    }
    return out;
}

// Every value and gradient of a and b agree within rtol, with an absolute floor of rtol times the
// largest entry or times `floor` (the size of the terms that cancel in the composed formula), if larger.
struct floors
{
    double value = 0, grad = 0;
};

template <class T>
void check_same(const value_and_grads<T>& a, const value_and_grads<T>& b, double rtol, floors floor = {})
{
    XGRAD_CHECK_CLOSE(a.value, b.value, rtol, rtol * std::max(max_abs(b.value), floor.value));
    REQUIRE(a.grads.size() == b.grads.size());
    for (std::size_t k = 0; k < a.grads.size(); ++k)
    {
        CAPTURE(k);
        XGRAD_CHECK_CLOSE(a.grads[k], b.grads[k], rtol, rtol * std::max(max_abs(b.grads[k]), floor.grad));
    }
}

// One op as the tests see it: the fused op and its composed twin, on any float type.
struct op_pair
{
    std::string name;
    function_of<double> fused, composed;
    function_of<float> fused32, composed32;
};

op_pair elementwise_pair(const std::string& name)
{
    if (name == "silu")
    {
        return {name, [](const auto& v) { return ops::silu(v[0]); },
                [](const auto& v) { return ops::composed::silu(v[0]); },
                [](const auto& v) { return ops::silu(v[0]); },
                [](const auto& v) { return ops::composed::silu(v[0]); }};
    }
    return {name, [](const auto& v) { return ops::gelu_exact(v[0]); },
            [](const auto& v) { return ops::composed::gelu_exact(v[0]); },
            [](const auto& v) { return ops::gelu_exact(v[0]); },
            [](const auto& v) { return ops::composed::gelu_exact(v[0]); }};
}

op_pair swiglu_pair()
{
    return {"swiglu", [](const auto& v) { return ops::swiglu(v[0], v[1]); },
            [](const auto& v) { return ops::composed::swiglu(v[0], v[1]); },
            [](const auto& v) { return ops::swiglu(v[0], v[1]); },
            [](const auto& v) { return ops::composed::swiglu(v[0], v[1]); }};
}

op_pair rms_norm_pair(double eps)
{
    return {"rms_norm", [eps](const auto& v) { return ops::rms_norm(v[0], v[1], eps); },
            [eps](const auto& v) { return ops::composed::rms_norm(v[0], v[1], eps); },
            [eps](const auto& v) { return ops::rms_norm(v[0], v[1], eps); },
            [eps](const auto& v) { return ops::composed::rms_norm(v[0], v[1], eps); }};
}

op_pair rope_pair(double base, std::size_t offset)
{
    return {"rope", [=](const auto& v) { return ops::rope(v[0], base, offset); },
            [=](const auto& v) { return ops::composed::rope(v[0], base, offset); },
            [=](const auto& v) { return ops::rope(v[0], base, offset); },
            [=](const auto& v) { return ops::composed::rope(v[0], base, offset); }};
}

checked_function<double> checked(const function_of<double>& f)
{
    return [f](tape<double>&, const vars& v) { return f(v); };
}

// The whole battery for one op at one point: gradcheck of the fused op and of its twin, fused == composed
// to 1e-12 in float64, float32 fused == float32 composed and float32 == float64 to 1e-5.
void check_op(const op_pair& op, const std::vector<f64>& inputs, const f64& G, floors floor = {})
{
    CAPTURE(op.name);
    XGRAD_CHECK_GRADIENTS(checked(op.fused), inputs);
    XGRAD_CHECK_GRADIENTS(checked(op.composed), inputs);
    const auto fused = evaluate(op.fused, inputs, G);
    check_same(fused, evaluate(op.composed, inputs, G), 1e-12, floor);
    const auto inputs32 = to_float_types<float>(inputs);
    const auto fused32 = evaluate(op.fused32, inputs32, to_float_type<float>(G));
    check_same(fused32, evaluate(op.composed32, inputs32, to_float_type<float>(G)), 1e-5, floor);
    check_same(widened(fused32), fused, 1e-5, floor);
}

const std::vector<shape_t> elementwise_shapes = {{1}, {1, 1}, {2}, {3, 5}, {2, 3, 8}, {37}};
}  // namespace

// ---- forward values ---------------------------------------------------------------------------------

TEST_CASE("erf, silu and gelu_exact match long double references, large values included")
{
    const f64 x = random_array({4, 9}, 1, -8.0, 8.0);
    tape<double> t;
    const auto v = t.input(x);
    XGRAD_CHECK_CLOSE(ops::erf(v).value(), ref_unary<double>(x, [](double a) { return std::erf(a); }), 4e-15,
                      1e-16);
    XGRAD_CHECK_CLOSE(ops::silu(v).value(), ref_silu(x), 1e-14, 1e-300);
    XGRAD_CHECK_CLOSE(ops::gelu_exact(v).value(), ref_gelu_exact(x), 1e-14, 1e-300);
    const f64 big{-1000.0, -40.0, 40.0, 1000.0};
    const auto vb = t.input(big);
    XGRAD_CHECK_CLOSE(ops::silu(vb).value(), ref_silu(big), 1e-14, 1e-300);
    CHECK(ops::gelu_exact(vb).value() == (f64{-0.0, -0.0, 40.0, 1000.0}));
}

TEST_CASE("swiglu is silu(gate) * up; rms_norm and rope match long double references")
{
    const f64 gate = random_array({2, 3, 5}, 2, -4.0, 4.0), up = random_array({2, 3, 5}, 3);
    const f64 x = random_array({2, 3, 8}, 4, -3.0, 3.0), w = random_array({8}, 5, 0.5, 1.5);
    const f64 q = random_array({2, 3, 5, 6}, 6);
    tape<double> t;
    XGRAD_CHECK_CLOSE(ops::swiglu(t.input(gate), t.input(up)).value(), f64(ref_silu(gate) * up), 1e-14, 1e-300);
    for (double eps : {1e-5, 0.5})
    {
        XGRAD_CHECK_CLOSE(ops::rms_norm(t.input(x), t.input(w), eps).value(), ref_rms_norm(x, w, eps), 1e-14, 1e-15);
    }
    for (std::size_t offset : {0, 3, 1000})
    {
        CAPTURE(offset);
        // an angle of 1000 carries 1000 times the rounding of its frequency
        XGRAD_CHECK_CLOSE(ops::rope(t.input(q), 10000.0, offset).value(), ref_rope(q, 10000.0, offset), 1e-13, 1e-12);
        XGRAD_CHECK_CLOSE(ops::rope(t.input(q), 37.5, offset).value(), ref_rope(q, 37.5, offset), 1e-13, 1e-12);
    }
}

TEST_CASE("rope by hand: position 0 is the identity, pair i turns by t base^(-2i/dh), norms are kept")
{
    // x (1, 1, 2, 4): rows t = 0, 1; pairs (1, 0) and (0, 1).
    f64 x{1, 0, 0, 1, 1, 0, 0, 1};
    x.reshape({1, 1, 2, 4});
    tape<double> t;
    const f64 y = ops::rope(t.input(x), 100.0, 0).value();
    const double a1 = 1.0 / 10.0;  // pair 1 of row 1: 1 * 100^(-2/4)
    f64 expected{1, 0, 0, 1, std::cos(1.0), std::sin(1.0), -std::sin(a1), std::cos(a1)};
    expected.reshape({1, 1, 2, 4});
    XGRAD_CHECK_CLOSE(y, expected, 1e-15, 1e-16);
    const f64 q = random_array({2, 2, 6, 8}, 7);
    const f64 rq = ops::rope(t.input(q), 10000.0, 11).value();
    for (std::size_t p = 0; p < q.size(); p += 2)
    {
        CHECK(std::hypot(rq.flat(p), rq.flat(p + 1)) == doctest::Approx(std::hypot(q.flat(p), q.flat(p + 1))));
    }
}

TEST_CASE("rope with an offset equals the matching rows of the longer sequence (decoding with a cache)")
{
    const f64 q = random_array({2, 3, 7, 4}, 8);
    tape<double> t;
    const f64 whole = ops::rope(t.input(q), 10000.0, 0).value();
    const f64 tail_in = xt::view(q, xt::all(), xt::all(), xt::range(4, 7), xt::all());
    const f64 tail = ops::rope(t.input(tail_in), 10000.0, 4).value();
    CHECK(tail == f64(xt::view(whole, xt::all(), xt::all(), xt::range(4, 7), xt::all())));
}

// ---- gradients, fused == composed, float32 ---------------------------------------------------------

TEST_CASE("erf: gradcheck, and the rule 2/sqrt(pi) e^{-x^2} by hand")
{
    for (const auto& shape : elementwise_shapes)
    {
        CAPTURE(shape_str(shape));
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::erf(v[0]); },
                              {random_array(shape, 10, -3.0, 3.0)});
    }
    tape<double> t;
    const auto x = t.input(f64{0.0, 1.0, -2.0, 30.0});
    t.backward(ops::sum(ops::erf(x)));
    const double k = 2.0 / std::sqrt(M_PI);
    XGRAD_CHECK_CLOSE(x.grad(), (f64{k, k * std::exp(-1.0), k * std::exp(-4.0), 0.0}), 1e-15, 1e-300);
}

TEST_CASE("silu and gelu_exact: gradcheck, fused == composed, float32 == float64, on several shapes")
{
    unsigned seed = 20;
    for (const std::string name : {"silu", "gelu_exact"})
    {
        for (const auto& shape : elementwise_shapes)
        {
            for (double scale : {1.0, 8.0})
            {
                CAPTURE(shape_str(shape));
                CAPTURE(scale);
                // composed::gelu_exact's 1 + erf cancels for x << 0: its error is rounding times |x|
                const f64 x = random_array(shape, seed, -scale, scale), G = random_array(shape, seed + 1);
                check_op(elementwise_pair(name), {x}, G, {max_abs(x), max_abs(G) * (1 + max_abs(x))});
                seed += 2;
            }
        }
    }
}

TEST_CASE("silu and gelu_exact: large inputs give exact limits and no NaN, in float64 and float32")
{
    for (const std::string name : {"silu", "gelu_exact"})
    {
        CAPTURE(name);
        const op_pair op = elementwise_pair(name);
        const f64 x{-1000.0, -800.0, 100.0, 1000.0};
        const auto r = evaluate(op.fused, {x}, filled<double>({4}, 1.0));
        CHECK(r.value == (f64{0.0, 0.0, 100.0, 1000.0}));
        CHECK(r.grads[0] == (f64{0.0, 0.0, 1.0, 1.0}));
        const auto r32 = evaluate(op.fused32, {to_float_type<float>(x)}, filled<float>({4}, 1.0f));
        CHECK(r32.value == (f32{0.0f, 0.0f, 100.0f, 1000.0f}));
        CHECK(r32.grads[0] == (f32{0.0f, 0.0f, 1.0f, 1.0f}));
    }
}

TEST_CASE("swiglu: gradcheck, fused == composed, float32 == float64; a reused input gets both terms")
{
    const std::vector<shape_t> shapes = {{1}, {1, 1}, {2}, {3, 5}, {2, 3, 8}};
    unsigned seed = 40;
    for (const auto& shape : shapes)
    {
        CAPTURE(shape_str(shape));
        check_op(swiglu_pair(), {random_array(shape, seed, -4.0, 4.0), random_array(shape, seed + 1)},
                 random_array(shape, seed + 2));
        seed += 3;
    }
    // swiglu(x, x) = silu(x) x: d/dx = silu'(x) x + silu(x)
    const auto same = [](tape<double>&, const vars& v) { return ops::swiglu(v[0], v[0]); };
    XGRAD_CHECK_GRADIENTS(same, {random_array({3, 4}, 50, -3.0, 3.0)});
}

TEST_CASE("rms_norm: gradcheck, fused == composed, float32 == float64; d = 1, d = 2, large values, eps")
{
    const std::vector<shape_t> shapes = {{1}, {1, 1}, {1, 2}, {7}, {3, 5}, {2, 3, 8}, {4, 33}};
    unsigned seed = 60;
    for (const auto& shape : shapes)
    {
        for (double scale : {1.0, 100.0})
        {
            for (double eps : {1e-5, 0.1})
            {
                CAPTURE(shape_str(shape));
                CAPTURE(scale);
                CAPTURE(eps);
                const std::size_t d = shape.back();
                const f64 x = random_away_from_zero(shape, seed, 0.1 * scale, scale);
                const f64 w = random_array({d}, seed + 1, 0.5, 1.5), G = random_array(shape, seed + 2);
                // dx = r (g w - xhat mean(g w xhat)) cancels (entirely when d = 1): its terms are r |g w|
                check_op(rms_norm_pair(eps), {x, w}, G, {0, largest_inverse_rms(x, eps) * max_abs(G) * max_abs(w)});
                seed += 3;
            }
        }
    }
}

TEST_CASE("rms_norm: one input as x and as weight; the weight alone gets its gradient")
{
    const auto reused = [](tape<double>&, const vars& v) { return ops::rms_norm(v[0], v[0]); };
    XGRAD_CHECK_GRADIENTS(reused, {random_away_from_zero({6}, 70)});
    tape<double> t;
    const auto x = t.input(random_array({3, 4}, 71), "x", false);
    const auto w = t.input(random_array({4}, 72));
    t.backward(ops::sum(ops::rms_norm(x, w)));
    CHECK(w.grad().size() == 4);
    CHECK(all_finite(w.grad()));
}

TEST_CASE("rope: gradcheck, fused == composed, float32 == float64; T = 1, dh = 2, offsets and bases")
{
    const std::vector<shape_t> shapes = {{1, 1, 1, 2}, {1, 1, 1, 6}, {2, 3, 4, 2}, {2, 2, 5, 8}, {1, 4, 3, 16}};
    unsigned seed = 80;
    for (const auto& shape : shapes)
    {
        for (std::size_t offset : {0, 7})
        {
            for (double base : {10000.0, 3.0})
            {
                CAPTURE(shape_str(shape));
                CAPTURE(offset);
                CAPTURE(base);
                check_op(rope_pair(base, offset), {random_array(shape, seed)}, random_array(shape, seed + 1));
                seed += 2;
            }
        }
    }
}

TEST_CASE("rms_norm and rope give the same bits on one thread and on two")
{
    const f64 x = random_array({64, 8, 256}, 90), w = random_array({256}, 91);
    const f64 q = random_array({4, 4, 64, 64}, 92);
    const auto run = [&] {
        return std::make_pair(evaluate<double>([](const auto& v) { return ops::rms_norm(v[0], v[1]); }, {x, w}, x),
                              evaluate<double>([](const auto& v) { return ops::rope(v[0], 10000.0, 3); }, {q}, q));
    };
    set_num_threads(1);
    const auto one = run();
    set_num_threads(2);
    const auto two = run();
    set_num_threads(1);
    CHECK(one.first.value == two.first.value);
    CHECK(one.first.grads[0] == two.first.grads[0]);
    CHECK(one.first.grads[1] == two.first.grads[1]);
    CHECK(one.second.value == two.second.value);
    CHECK(one.second.grads[0] == two.second.grads[0]);
}

// ---- errors -----------------------------------------------------------------------------------------

TEST_CASE("the variants' ops refuse bad arguments, naming the op and the shapes (fused and composed alike)")
{
    tape<double> t;
    const auto x3 = t.input(random_array({2, 3, 4}, 1));
    const auto odd = t.input(random_array({1, 2, 3, 5}, 2));
    const auto w = t.input(random_array({3}, 3));
    for (bool fused : {true, false})
    {
        CAPTURE(fused);
        const auto rope = [&](const var<double>& x, double base) {
            return fused ? ops::rope(x, base, 0) : ops::composed::rope(x, base, 0);
        };
        const auto rms = [&](const var<double>& x, const var<double>& weight, double eps) {
            return fused ? ops::rms_norm(x, weight, eps) : ops::composed::rms_norm(x, weight, eps);
        };
        const auto glu = [&](const var<double>& a, const var<double>& b) {
            return fused ? ops::swiglu(a, b) : ops::composed::swiglu(a, b);
        };
        std::string m = invalid_argument_message([&] { rope(odd, 10000.0); });
        CHECK(contains(m, "rope"));
        CHECK(contains(m, "(1, 2, 3, 5)"));
        m = invalid_argument_message([&] { rope(x3, 10000.0); });
        CHECK(contains(m, "rope"));
        CHECK(contains(m, "(2, 3, 4)"));
        m = invalid_argument_message([&] { rms(x3, w, 1e-5); });
        CHECK(contains(m, "rms_norm"));
        CHECK(contains(m, "(3)"));
        CHECK(contains(m, "(2, 3, 4)"));
        m = invalid_argument_message([&] { glu(x3, odd); });
        CHECK(contains(m, "swiglu"));
        CHECK(contains(m, "(2, 3, 4)"));
        CHECK(contains(m, "(1, 2, 3, 5)"));
        CHECK(contains(invalid_argument_message([&] { rms(t.input(f64(1.0)), t.input(f64{1.0}), 1e-5); }),
                       "rms_norm"));
    }
    const auto q = t.input(random_array({1, 1, 2, 4}, 4));
    CHECK(contains(invalid_argument_message([&] { ops::rope(q, 0.0, 0); }), "base"));
    CHECK(contains(invalid_argument_message([&] { ops::rope(q, -2.0, 0); }), "rope"));
    CHECK(contains(invalid_argument_message([&] { ops::rms_norm(x3, t.input(random_array({4}, 5)), -1.0); }),
                   "eps"));
}

// ---- PyTorch fixtures -------------------------------------------------------------------------------

namespace
{
const fs::path op_fixtures = fs::path(xgrad::test::source_dir()) / "tests" / "data" / "op_fixtures";

struct op_fixture
{
    std::vector<std::string> inputs;  // file names without .npy, in argument order
    std::function<op_pair(const f64& args)> pair;
};

std::map<std::string, op_fixture> fixture_cases()
{
    const auto fused_only = [](auto f) {
        return [f](const f64&) {
            return op_pair{"erf", f, f, nullptr, nullptr};
        };
    };
    return {
        {"erf", {{"x"}, fused_only([](const std::vector<var<double>>& v) { return ops::erf(v[0]); })}},
        {"silu", {{"x"}, [](const f64&) { return elementwise_pair("silu"); }}},
        {"gelu_exact", {{"x"}, [](const f64&) { return elementwise_pair("gelu_exact"); }}},
        {"swiglu", {{"gate", "up"}, [](const f64&) { return swiglu_pair(); }}},
        {"rms_norm", {{"x", "weight"}, [](const f64& a) { return rms_norm_pair(a(0)); }}},
        {"rope", {{"x"}, [](const f64& a) { return rope_pair(a(0), static_cast<std::size_t>(a(1))); }}},
        {"rope_offset", {{"x"}, [](const f64& a) { return rope_pair(a(0), static_cast<std::size_t>(a(1))); }}},
    };
}

// max |actual - expected| / max |expected|: the relative error of a whole tensor.
double tensor_error(const f64& actual, const f64& expected)
{
    REQUIRE(shapes_equal(actual, expected));
    double worst = 0;
    for (std::size_t i = 0; i < actual.size(); ++i)
    {
        worst = std::max(worst, std::abs(actual.flat(i) - expected.flat(i)));
    }
    return worst / std::max(max_abs(expected), 1e-300);
}
}  // namespace

TEST_CASE("PyTorch fixtures: every fused op and its composed twin give torch's values and gradients")
{
    const auto cases = fixture_cases();
    REQUIRE(cases.size() == 7);
    for (const auto& [name, fixture] : cases)
    {
        CAPTURE(name);
        const fs::path dir = op_fixtures / name;
        REQUIRE(fs::is_directory(dir));
        std::vector<f64> inputs;
        for (const auto& input : fixture.inputs)
        {
            inputs.push_back(npy::load_float<double>((dir / (input + ".npy")).string()));
        }
        const f64 G = npy::load_float<double>((dir / "grad_output.npy").string());
        const f64 expected = npy::load_float<double>((dir / "output.npy").string());
        const op_pair op = fixture.pair(npy::load_float<double>((dir / "args.npy").string()));
        for (const auto& f : {op.fused, op.composed})
        {
            const auto r = evaluate(f, inputs, G);
            CHECK(tensor_error(r.value, expected) < 1e-14);
            for (std::size_t k = 0; k < inputs.size(); ++k)
            {
                CAPTURE(fixture.inputs[k]);
                const f64 grad = npy::load_float<double>((dir / ("grad_" + fixture.inputs[k] + ".npy")).string());
                CHECK(tensor_error(r.grads[k], grad) < 1e-14);
            }
        }
        if (op.fused32)
        {
            const auto r32 = evaluate(op.fused32, to_float_types<float>(inputs), to_float_type<float>(G));
            CHECK(tensor_error(xt::cast<double>(r32.value), expected) < 1e-6);
        }
    }
}
}  // namespace test_ops_variants
