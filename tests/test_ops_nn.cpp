// The fused neural-network ops (log_softmax, cross_entropy, layer_norm, dropout): forward values
// against loop references in long double, hand-derived gradients against central differences (float64),
// ignored targets, large logits, NaN propagation, float32 against float64, threads against one thread,
// dropout's mask, the argument errors with the op's name and the offending shapes or values, and each fused
// op against its composed twin (ops/composed.hpp) to 1e-12 in float64.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "kernels/parallel.hpp"
#include "ops/composed.hpp"
#include "row_references.hpp"
#include "test_util.hpp"

namespace test_ops_nn
{
using namespace xgrad;
using namespace xgrad::test;

namespace
{
const double not_a_number = std::numeric_limits<double>::quiet_NaN();

// Targets for `rows` rows over V classes, seeded, with every `ignore_every`-th row ignored (0: none).
ids_t random_targets(const shape_t& shape, std::int64_t vocab, unsigned seed, std::size_t ignore_every = 0)
{
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::int64_t> pick(0, vocab - 1);
    ids_t t = ids_t::from_shape(shape);
    for (std::size_t i = 0; i < t.size(); ++i)
    {
        t.flat(i) = (ignore_every && i % ignore_every == 1) ? -1 : pick(rng);
    }
    return t;
}

std::size_t count_nan(const f64& a)
{
    return static_cast<std::size_t>(std::count_if(a.begin(), a.end(), [](double v) { return std::isnan(v); }));
}
}  // namespace

// ---- log_softmax -----------------------------------------------------------------------------------

TEST_CASE("log_softmax: forward matches a long double reference; exp of each row sums to 1")
{
    // Row lengths 1, 3, 8, 37: below, at and around the vector width, with a tail.
    const std::vector<shape_t> shapes = {{1}, {1, 1}, {4}, {2, 3, 5}, {3, 8}, {2, 37}};
    unsigned seed = 1;
    for (const auto& shape : shapes)
    {
        CAPTURE(shape_str(shape));
        const f64 X = random_array(shape, seed++, -3.0, 3.0);
        tape<double> t;
        const auto y = ops::log_softmax(t.input(X));
        CHECK(std::string(y.op()) == "log_softmax");
        XGRAD_CHECK_CLOSE(y.value(), ref_log_softmax(X), 1e-14, 1e-15);
        const std::size_t n = shape.back();
        for (std::size_t r = 0; r < X.size() / n; ++r)
        {
            double total = 0;
            for (std::size_t j = 0; j < n; ++j)
            {
                total += std::exp(y.value().flat(r * n + j));
            }
            CHECK(total == doctest::Approx(1.0).epsilon(1e-14));
        }
    }
    tape<double> t;
    f64 single = filled<double>({2, 1}, 2.5);
    single(1, 0) = -7.0;
    CHECK(ops::log_softmax(t.input(single)).value() == filled<double>({2, 1}, 0.0));  // log 1
}

TEST_CASE("log_softmax: gradcheck, and the rule dx = g - softmax sum(g) by hand")
{
    const std::vector<shape_t> shapes = {{1}, {1, 1}, {5}, {2, 3, 4}, {2, 9}};
    unsigned seed = 20;
    for (const auto& shape : shapes)
    {
        CAPTURE(shape_str(shape));
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::log_softmax(v[0]); },
                              {random_array(shape, seed++, -2.0, 2.0)});
    }
    const f64 X = {{0.5, -1.0, 2.0}, {3.0, 3.0, -4.0}};
    const f64 G = {{1.0, -2.0, 0.5}, {0.25, 0.0, 3.0}};
    tape<double> t;
    auto x = t.input(X);
    t.backward(ops::sum(ops::mul(ops::log_softmax(x), t.constant(G))));
    const f64 p = ref_masked_softmax(X, nullptr, 1.0);
    f64 expected = f64::from_shape({2, 3});
    for (std::size_t r = 0; r < 2; ++r)
    {
        const double g_sum = G(r, 0) + G(r, 1) + G(r, 2);
        for (std::size_t j = 0; j < 3; ++j)
        {
            expected(r, j) = G(r, j) - p(r, j) * g_sum;
        }
    }
    XGRAD_CHECK_CLOSE(x.grad(), expected, 1e-14, 1e-15);
}

TEST_CASE("log_softmax: large logits stay finite (shift invariance); NaN stays in its row; -inf entries")
{
    const f64 X = random_array({3, 10}, 30, -2.0, 2.0);
    tape<double> t;
    auto big = ops::log_softmax(t.input(X + 1e4));
    REQUIRE(all_finite(big.value()));
    XGRAD_CHECK_CLOSE(big.value(), ref_log_softmax(X), 1e-9, 1e-11);
    auto huge = ops::log_softmax(t.input(1e4 * X));
    CHECK(all_finite(huge.value()));
    XGRAD_CHECK_CLOSE(huge.value(), ref_log_softmax(1e4 * X), 1e-14, 1e-12);
    tape<float> t32;
    const auto big32 = ops::log_softmax(t32.input(to_float_type<float>(f64(X + 1e4))));
    CHECK(all_finite(big32.value()));
    XGRAD_CHECK_CLOSE(big32.value(), to_float_type<float>(ref_log_softmax(X)), 0.0, 2e-3);  // x rounded at 1e4

    f64 with_nan = X;
    with_nan(1, 4) = not_a_number;
    tape<double> t2;
    auto x2 = t2.input(with_nan);
    const auto y = ops::log_softmax(x2);
    for (std::size_t j = 0; j < 10; ++j)
    {
        CHECK(std::isnan(y.value()(1, j)));
    }
    CHECK(count_nan(y.value()) == 10);
    t2.backward(ops::sum(y));
    CHECK(count_nan(x2.grad()) == 10);

    // A -inf logit has probability 0 and log-probability -inf; the others are unchanged.
    f64 with_minus_inf = X;
    with_minus_inf(0, 2) = -std::numeric_limits<double>::infinity();
    tape<double> t3;
    const f64 y3 = ops::log_softmax(t3.input(with_minus_inf)).value();
    CHECK(y3(0, 2) == -std::numeric_limits<double>::infinity());
    CHECK(count_nan(y3) == 0);
}

TEST_CASE("log_softmax: float32 agrees with float64; a 0-d input is refused")
{
    const f64 X = random_array({4, 33}, 40, -5.0, 5.0);
    const f64 G = random_array({4, 33}, 41);
    tape<double> t64;
    tape<float> t32;
    auto x64 = t64.input(X);
    auto x32 = t32.input(to_float_type<float>(X));
    const auto y64 = ops::log_softmax(x64);
    const auto y32 = ops::log_softmax(x32);
    XGRAD_CHECK_CLOSE(y32.value(), to_float_type<float>(y64.value()), 1e-5, 1e-5);
    t64.backward(ops::sum(ops::mul(y64, t64.constant(G))));
    t32.backward(ops::sum(ops::mul(y32, t32.constant(to_float_type<float>(G)))));
    XGRAD_CHECK_CLOSE(x32.grad(), to_float_type<float>(x64.grad()), 1e-4, 1e-5);

    const std::string message = invalid_argument_message([&] { ops::log_softmax(t64.input(filled<double>({}, 1.0))); });
    CHECK(contains(message, "log_softmax"));
    CHECK(contains(message, "()"));
}

// ---- cross_entropy ---------------------------------------------------------------------------------

TEST_CASE("cross_entropy: value and gradient against references, with and without ignored targets")
{
    struct ce_case
    {
        shape_t logits;
        std::size_t ignore_every;
    };
    const std::vector<ce_case> cases = {{{1, 1}, 0}, {{5}, 0}, {{3, 4}, 0}, {{3, 4}, 2},
                                        {{2, 3, 7}, 0}, {{2, 3, 7}, 3}, {{4, 17}, 2}};
    unsigned seed = 50;
    for (const auto& c : cases)
    {
        CAPTURE(shape_str(c.logits));
        CAPTURE(c.ignore_every);
        const f64 X = random_array(c.logits, seed++, -3.0, 3.0);
        const shape_t target_shape(c.logits.begin(), c.logits.end() - 1);
        const ids_t targets = random_targets(target_shape, static_cast<std::int64_t>(c.logits.back()), seed++,
                                             c.ignore_every);
        tape<double> t;
        auto x = t.input(X);
        const auto loss = ops::cross_entropy(x, targets);
        CHECK(std::string(loss.op()) == "cross_entropy");
        CHECK(loss.shape() == shape_t{});
        CHECK(loss.value().flat(0) == doctest::Approx(ref_cross_entropy(X, targets)).epsilon(1e-14));
        t.backward(loss);
        XGRAD_CHECK_CLOSE(x.grad(), ref_cross_entropy_grad(X, targets), 1e-13, 1e-16);
        XGRAD_CHECK_GRADIENTS([targets](tape<double>&, const vars& v) { return ops::cross_entropy(v[0], targets); },
                              {X});
    }
}

TEST_CASE("cross_entropy: a hand-computed example")
{
    // Row 0: logits (0, ln 3) -> p = (1/4, 3/4), target 1: -log(3/4). Row 1 ignored. Row 2: (0, 0), target
    // 0: -log(1/2). Mean over the two kept rows.
    const f64 X = {{0.0, std::log(3.0)}, {5.0, -5.0}, {0.0, 0.0}};
    tape<double> t;
    auto x = t.input(X);
    const auto loss = ops::cross_entropy(x, make_ids({3}, {1, -1, 0}));
    CHECK(loss.value().flat(0) == doctest::Approx((-std::log(0.75) - std::log(0.5)) / 2).epsilon(1e-15));
    t.backward(ops::scale(loss, 4.0));  // the incoming gradient scales the rule: 4 (p - onehot) / 2
    const f64 expected = {{2.0 * 0.25, 2.0 * (0.75 - 1.0)}, {0.0, 0.0}, {2.0 * (0.5 - 1.0), 2.0 * 0.5}};
    XGRAD_CHECK_CLOSE(x.grad(), expected, 1e-15, 1e-16);
}

TEST_CASE("cross_entropy: every target ignored gives loss 0 and a zero gradient, never NaN")
{
    for (const shape_t& shape : {shape_t{3, 4}, shape_t{1, 1}, shape_t{2, 2, 5}})
    {
        CAPTURE(shape_str(shape));
        const shape_t target_shape(shape.begin(), shape.end() - 1);
        ids_t targets = ids_t::from_shape(target_shape);
        targets.fill(-1);
        tape<double> t;
        auto x = t.input(random_array(shape, 60));
        const auto loss = ops::cross_entropy(x, targets);
        CHECK(loss.value().flat(0) == 0.0);
        t.backward(loss);
        CHECK(x.grad() == filled<double>(shape, 0.0));
        XGRAD_CHECK_GRADIENTS([targets](tape<double>&, const vars& v) { return ops::cross_entropy(v[0], targets); },
                              {random_array(shape, 61)});
    }
    tape<float> t32;
    auto x32 = t32.input(to_float_type<float>(random_array({2, 3}, 62)));
    const auto loss32 = ops::cross_entropy(x32, make_ids({2}, {-1, -1}));
    CHECK(loss32.value().flat(0) == 0.0f);
    t32.backward(loss32);
    CHECK(x32.grad() == filled<float>({2, 3}, 0.0f));
}

TEST_CASE("cross_entropy: logits of 1e4 give a finite loss and gradient, in float64 and float32")
{
    const f64 X = random_array({4, 6}, 70, -1.0, 1.0);
    const ids_t targets = make_ids({4}, {0, 5, -1, 2});
    for (const f64& large : {f64(X + 1e4), f64(1e4 * X)})
    {
        tape<double> t;
        auto x = t.input(large);
        const auto loss = ops::cross_entropy(x, targets);
        REQUIRE(std::isfinite(loss.value().flat(0)));
        CHECK(loss.value().flat(0) == doctest::Approx(ref_cross_entropy(large, targets)).epsilon(1e-12));
        t.backward(loss);
        CHECK(all_finite(x.grad()));
        XGRAD_CHECK_CLOSE(x.grad(), ref_cross_entropy_grad(large, targets), 1e-12, 1e-15);

        tape<float> t32;
        auto x32 = t32.input(to_float_type<float>(large));
        const auto loss32 = ops::cross_entropy(x32, targets);
        CHECK(std::isfinite(loss32.value().flat(0)));
        t32.backward(loss32);
        CHECK(all_finite(x32.grad()));
    }
    // Shift invariance: + 1e4 changes nothing but rounding.
    tape<double> t;
    CHECK(ops::cross_entropy(t.input(f64(X + 1e4)), targets).value().flat(0) ==
          doctest::Approx(ref_cross_entropy(X, targets)).epsilon(1e-10));
}

// Two logits tie at the top: loss ln 2 and gradient (-1/2, 1/2, 0) exactly, whatever the logits' size. A
// loss formed as log sum e^x - x_t cancels: log sum e^x rounds to the logits' magnitude (1e17 in float64:
// loss 0; 1e5 in float32: 2e-3 off).
template <class T>
void check_tied_top_logits(T big)
{
    tape<T> t;
    auto x = t.input(array<T>{{big, big, T(0)}});
    const auto loss = ops::cross_entropy(x, make_ids({1}, {0}));
    CHECK(loss.value().flat(0) == doctest::Approx(std::log(2.0)).epsilon(std::is_same_v<T, float> ? 1e-6 : 1e-14));
    t.backward(loss);
    CHECK(x.grad().flat(0) == doctest::Approx(-0.5).epsilon(1e-6));
    CHECK(x.grad().flat(1) == doctest::Approx(0.5).epsilon(1e-6));
    CHECK(x.grad().flat(2) == T(0));
}

TEST_CASE("cross_entropy: huge tied logits keep the loss and gradient exact (float64 1e17, float32 1e5 and 1e30)")
{
    check_tied_top_logits<double>(1e17);
    check_tied_top_logits<double>(1e300);
    check_tied_top_logits<float>(1e4f);
    check_tied_top_logits<float>(1e5f);
    check_tied_top_logits<float>(1e30f);
}

TEST_CASE("cross_entropy: NaN in a kept row makes the loss NaN; an ignored row is not read")
{
    const f64 X = random_array({3, 4}, 80);
    f64 with_nan = X;
    with_nan(1, 2) = not_a_number;

    tape<double> t;
    auto x = t.input(with_nan);
    const auto loss = ops::cross_entropy(x, make_ids({3}, {0, 3, 1}));
    CHECK(std::isnan(loss.value().flat(0)));

    tape<double> t2;
    auto x2 = t2.input(with_nan);
    const ids_t ignore_nan_row = make_ids({3}, {0, -1, 1});
    const auto loss2 = ops::cross_entropy(x2, ignore_nan_row);
    CHECK(loss2.value().flat(0) == doctest::Approx(ref_cross_entropy(X, ignore_nan_row)).epsilon(1e-14));
    t2.backward(loss2);
    CHECK(count_nan(x2.grad()) == 0);
    XGRAD_CHECK_CLOSE(x2.grad(), ref_cross_entropy_grad(X, ignore_nan_row), 1e-14, 1e-16);
}

TEST_CASE("cross_entropy: float32 agrees with float64; the gradient flows through earlier ops")
{
    const f64 X = random_array({6, 40}, 90, -4.0, 4.0);
    const ids_t targets = random_targets({6}, 40, 91, 4);
    tape<double> t64;
    tape<float> t32;
    auto x64 = t64.input(X);
    auto x32 = t32.input(to_float_type<float>(X));
    const auto l64 = ops::cross_entropy(x64, targets);
    const auto l32 = ops::cross_entropy(x32, targets);
    CHECK(l32.value().flat(0) == doctest::Approx(l64.value().flat(0)).epsilon(1e-6));
    t64.backward(l64);
    t32.backward(l32);
    XGRAD_CHECK_CLOSE(x32.grad(), to_float_type<float>(x64.grad()), 1e-4, 1e-7);

    // logits = A @ W: the loss's gradient reaches both through matmul.
    const ids_t t3 = make_ids({2, 3}, {1, -1, 4, 0, 2, 2});
    XGRAD_CHECK_GRADIENTS(
        [t3](tape<double>&, const vars& v) { return ops::cross_entropy(ops::matmul(v[0], v[1]), t3); },
        {random_array({2, 3, 4}, 92), random_array({4, 5}, 93)});
}

TEST_CASE("cross_entropy: saves the logits, not its output or a softmax copy")
{
    tape<double> t;
    auto x = t.input(random_array({4, 5}, 95));
    ops::cross_entropy(x, make_ids({4}, {0, 1, 2, 3}));
    const auto nodes = t.nodes();
    REQUIRE(nodes.size() == 2);
    CHECK(nodes[0].saved_for_backward);
    CHECK(!nodes[1].saved_for_backward);
}

TEST_CASE("cross_entropy: bad targets name the op, the value, the position and the shapes")
{
    tape<double> t;
    auto x = t.input(filled<double>({2, 3, 5}, 0.0));
    std::string message = invalid_argument_message([&] { ops::cross_entropy(x, make_ids({2, 3}, {0, 1, 2, 3, 4, 5})); });
    CHECK(contains(message, "cross_entropy"));
    CHECK(contains(message, "target 5"));
    CHECK(contains(message, "(1, 2)"));
    CHECK(contains(message, "(2, 3, 5)"));
    message = invalid_argument_message([&] { ops::cross_entropy(x, make_ids({2, 3}, {0, -2, 2, 3, 4, 0})); });
    CHECK(contains(message, "target -2"));
    CHECK(contains(message, "(0, 1)"));

    message = invalid_argument_message([&] { ops::cross_entropy(x, make_ids({3, 2}, {0, 0, 0, 0, 0, 0})); });
    CHECK(contains(message, "cross_entropy"));
    CHECK(contains(message, "(3, 2)"));
    CHECK(contains(message, "(2, 3, 5)"));
    message = invalid_argument_message([&] { ops::cross_entropy(x, make_ids({2, 3, 5}, std::vector<std::int64_t>(30, 0))); });
    CHECK(contains(message, "(2, 3, 5)"));
    CHECK_THROWS_AS(ops::cross_entropy(x, make_ids({6}, std::vector<std::int64_t>(6, 0))), std::invalid_argument);
    CHECK_THROWS_AS(ops::cross_entropy(t.input(filled<double>({}, 0.0)), make_ids({}, {0})), std::invalid_argument);
    CHECK(t.size() == 2);  // nothing recorded by the failed calls
}

// ---- layer_norm ------------------------------------------------------------------------------------

TEST_CASE("layer_norm: forward matches a long double reference; d = 1 gives the bias")
{
    const std::vector<shape_t> shapes = {{1, 1}, {7}, {3, 5}, {2, 3, 8}, {2, 33}};
    unsigned seed = 100;
    for (const auto& shape : shapes)
    {
        for (double eps : {1e-5, 0.0, 0.5})
        {
            CAPTURE(shape_str(shape));
            CAPTURE(eps);
            const std::size_t d = shape.back();
            const f64 X = random_array(shape, seed++, -2.0, 2.0);
            const f64 W = random_array({d}, seed++, 0.5, 1.5), B = random_array({d}, seed++);
            tape<double> t;
            const auto y = ops::layer_norm(t.input(X), t.input(W), t.input(B), eps);
            CHECK(std::string(y.op()) == "layer_norm");
            if (d == 1 && eps == 0.0)
            {
                CHECK(count_nan(y.value()) == y.value().size());  // 0 / sqrt(0): IEEE says NaN, as PyTorch with eps 0
                continue;
            }
            XGRAD_CHECK_CLOSE(y.value(), ref_layer_norm(X, W, B, eps), 1e-13, 1e-14);
        }
    }
    // With w = 1, b = 0 every row has mean 0 and (biased) variance var / (var + eps).
    const f64 X = random_array({3, 16}, 130, -3.0, 3.0);
    tape<double> t;
    const f64 y = ops::layer_norm(t.input(X), t.input(filled<double>({16}, 1.0)), t.input(filled<double>({16}, 0.0)),
                                  0.0)
                      .value();
    for (std::size_t r = 0; r < 3; ++r)
    {
        double mean = 0, square = 0;
        for (std::size_t j = 0; j < 16; ++j)
        {
            mean += y(r, j) / 16;
            square += y(r, j) * y(r, j) / 16;
        }
        CHECK(std::abs(mean) < 1e-15);
        CHECK(square == doctest::Approx(1.0).epsilon(1e-14));
    }
}

TEST_CASE("layer_norm: gradcheck with respect to x, weight and bias")
{
    const std::vector<shape_t> shapes = {{1, 1}, {1, 2}, {6}, {3, 5}, {2, 3, 4}};
    unsigned seed = 140;
    for (const auto& shape : shapes)
    {
        for (double eps : {1e-5, 0.1})
        {
            CAPTURE(shape_str(shape));
            CAPTURE(eps);
            const std::size_t d = shape.back();
            XGRAD_CHECK_GRADIENTS([eps](tape<double>&, const vars& v) { return ops::layer_norm(v[0], v[1], v[2], eps); },
                                  {random_array(shape, seed, -2.0, 2.0), random_array({d}, seed + 1, 0.5, 1.5),
                                   random_array({d}, seed + 2)});
            seed += 3;
        }
    }
    // One input as both x's rows' source and the weight: reuse sums the gradients.
    XGRAD_CHECK_GRADIENTS(
        [](tape<double>&, const vars& v) { return ops::layer_norm(ops::reshape(v[0], {1, 5}), v[0], v[1]); },
        {random_array({5}, 170), random_array({5}, 171)});
}

TEST_CASE("layer_norm: dbias = column sums of g, dweight = column sums of g xhat, rows of dx sum to 0")
{
    const f64 X = random_array({4, 6}, 180, -2.0, 2.0), G = random_array({4, 6}, 181);
    const f64 W = random_array({6}, 182, 0.5, 1.5), B = random_array({6}, 183);
    tape<double> t;
    auto x = t.input(X), w = t.input(W), b = t.input(B);
    t.backward(ops::sum(ops::mul(ops::layer_norm(x, w, b), t.constant(G))));
    const f64 xhat = ref_layer_norm(X, filled<double>({6}, 1.0), filled<double>({6}, 0.0), 1e-5);
    f64 dw = filled<double>({6}, 0.0), db = filled<double>({6}, 0.0);
    for (std::size_t r = 0; r < 4; ++r)
    {
        double dx_sum = 0;
        for (std::size_t j = 0; j < 6; ++j)
        {
            dw(j) += G(r, j) * xhat(r, j);
            db(j) += G(r, j);
            dx_sum += x.grad()(r, j);
        }
        CHECK(std::abs(dx_sum) < 1e-14);  // the mean is subtracted: shifting a row changes nothing
    }
    XGRAD_CHECK_CLOSE(w.grad(), dw, 1e-13, 1e-15);
    XGRAD_CHECK_CLOSE(b.grad(), db, 1e-14, 1e-15);
}

TEST_CASE("layer_norm: a large mean keeps its precision; NaN stays in its row; float32 agrees with float64")
{
    // Rows 1e4 + N(0, 1e-2): a one-pass E[x^2] - E[x]^2 variance would lose about 8 of 16 digits.
    f64 X = normal_array<double>({3, 32}, 190, 1e-2);
    X += 1e4;
    const f64 W = random_array({32}, 191, 0.5, 1.5), B = random_array({32}, 192);
    tape<double> t;
    XGRAD_CHECK_CLOSE(ops::layer_norm(t.input(X), t.input(W), t.input(B)).value(), ref_layer_norm(X, W, B, 1e-5),
                      1e-9, 1e-9);

    f64 with_nan = random_array({3, 8}, 193);
    with_nan(2, 5) = not_a_number;
    tape<double> t2;
    auto x2 = t2.input(with_nan);
    auto w2 = t2.input(filled<double>({8}, 1.0));
    const auto y2 = ops::layer_norm(x2, w2, t2.input(filled<double>({8}, 0.0)));
    CHECK(count_nan(y2.value()) == 8);
    for (std::size_t j = 0; j < 8; ++j)
    {
        CHECK(std::isnan(y2.value()(2, j)));
    }
    t2.backward(ops::sum(y2));
    CHECK(count_nan(x2.grad()) == 8);  // row 2 only
    CHECK(count_nan(w2.grad()) == 8);  // every column sees row 2

    const f64 X3 = random_array({5, 48}, 194, -3.0, 3.0), G3 = random_array({5, 48}, 195);
    const f64 W3 = random_array({48}, 196, 0.5, 1.5), B3 = random_array({48}, 197);
    tape<double> t64;
    tape<float> t32;
    auto x64 = t64.input(X3), w64 = t64.input(W3), b64 = t64.input(B3);
    auto x32 = t32.input(to_float_type<float>(X3)), w32 = t32.input(to_float_type<float>(W3)),
         b32 = t32.input(to_float_type<float>(B3));
    const auto y64 = ops::layer_norm(x64, w64, b64);
    const auto y32 = ops::layer_norm(x32, w32, b32);
    XGRAD_CHECK_CLOSE(y32.value(), to_float_type<float>(y64.value()), 1e-5, 1e-5);
    t64.backward(ops::sum(ops::mul(y64, t64.constant(G3))));
    t32.backward(ops::sum(ops::mul(y32, t32.constant(to_float_type<float>(G3)))));
    XGRAD_CHECK_CLOSE(x32.grad(), to_float_type<float>(x64.grad()), 1e-4, 1e-5);
    XGRAD_CHECK_CLOSE(w32.grad(), to_float_type<float>(w64.grad()), 1e-4, 1e-5);
    XGRAD_CHECK_CLOSE(b32.grad(), to_float_type<float>(b64.grad()), 1e-5, 1e-6);
}

TEST_CASE("layer_norm: bad shapes or eps name the op and the shapes")
{
    tape<double> t;
    auto x = t.input(filled<double>({2, 4}, 1.0));
    auto w4 = t.input(filled<double>({4}, 1.0));
    auto w3 = t.input(filled<double>({3}, 1.0));
    auto w14 = t.input(filled<double>({1, 4}, 1.0));
    std::string message = invalid_argument_message([&] { ops::layer_norm(x, w3, w4); });
    CHECK(contains(message, "layer_norm"));
    CHECK(contains(message, "(3)"));
    CHECK(contains(message, "(2, 4)"));
    message = invalid_argument_message([&] { ops::layer_norm(x, w4, w14); });
    CHECK(contains(message, "layer_norm"));
    CHECK(contains(message, "(1, 4)"));
    CHECK(contains(message, "(2, 4)"));
    message = invalid_argument_message([&] { ops::layer_norm(x, w4, w4, -1.0); });
    CHECK(contains(message, "layer_norm"));
    CHECK(contains(message, "eps"));
    CHECK_THROWS_AS(ops::layer_norm(x, w4, w4, not_a_number), std::invalid_argument);
    message = invalid_argument_message([&] { ops::layer_norm(t.input(filled<double>({}, 1.0)), w4, w4); });
    CHECK(contains(message, "()"));
    CHECK(t.size() == 5);
}

// ---- threads ---------------------------------------------------------------------------------------

TEST_CASE("log_softmax, cross_entropy and layer_norm give the same bits on two threads as on one")
{
    const f64 X = random_array({300, 256}, 200, -4.0, 4.0);  // above the parallel threshold
    const ids_t targets = random_targets({300}, 256, 201, 5);
    const f64 W = random_array({256}, 202), B = random_array({256}, 203);
    auto run = [&] {
        tape<double> t;
        auto x = t.input(X), w = t.input(W), b = t.input(B);
        auto loss = ops::add(ops::add(ops::cross_entropy(x, targets), ops::mean(ops::log_softmax(x))),
                             ops::mean(ops::layer_norm(x, w, b)));
        t.backward(loss);
        return std::vector<f64>{loss.value(), x.grad(), w.grad(), b.grad()};
    };
    set_num_threads(1);
    const auto one = run();
    set_num_threads(2);
    const auto two = run();
    set_num_threads(1);
    for (std::size_t i = 0; i < one.size(); ++i)
    {
        CHECK(one[i] == two[i]);
    }
}

// ---- dropout ---------------------------------------------------------------------------------------

TEST_CASE("dropout: p = 0 and evaluation mode return the input itself (no node)")
{
    tape<double> t;
    auto x = t.input(random_array({3, 4}, 210));
    std::mt19937_64 generator(1);
    const auto before = generator;
    CHECK(ops::dropout(x, 0.0, generator).index() == x.index());
    CHECK(ops::dropout(x, 0.5, generator, false).index() == x.index());
    CHECK(t.size() == 1);
    CHECK(generator == before);  // no draws either
}

TEST_CASE("dropout: kept entries are x / (1 - p), dropped ones 0; the same seed gives the same mask")
{
    const f64 X = random_array({20, 30}, 220, 0.5, 1.5);  // no zeros: y == 0 means dropped
    const double p = 0.3;
    auto run = [&](std::uint64_t seed) {
        tape<double> t;
        std::mt19937_64 generator(seed);
        return f64(ops::dropout(t.input(X), p, generator).value());
    };
    const f64 a = run(7), b = run(7), c = run(8);
    CHECK(a == b);
    CHECK(a != c);
    std::size_t dropped = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
    {
        if (a.flat(i) == 0.0)
        {
            ++dropped;
        }
        else
        {
            CHECK(a.flat(i) == X.flat(i) * (1.0 / (1.0 - p)));
        }
    }
    CHECK(dropped > 0);
    CHECK(dropped < a.size());

    // Consecutive calls on one generator draw fresh masks.
    tape<double> t;
    std::mt19937_64 generator(7);
    auto x = t.input(X);
    CHECK(ops::dropout(x, p, generator).value() == a);
    CHECK(ops::dropout(x, p, generator).value() != a);

    // float32 with the same seed drops the same entries.
    tape<float> t32;
    std::mt19937_64 generator32(7);
    const f32 a32 = ops::dropout(t32.input(to_float_type<float>(X)), 0.3f, generator32).value();
    for (std::size_t i = 0; i < a.size(); ++i)
    {
        CHECK((a32.flat(i) == 0.0f) == (a.flat(i) == 0.0));
    }
}

TEST_CASE("dropout: the keep rate on a large tensor is close to 1 - p")
{
    for (double p : {0.1, 0.5, 0.9})
    {
        CAPTURE(p);
        const std::size_t n = 1 << 20;
        tape<float> t;
        std::mt19937_64 generator(static_cast<std::uint64_t>(p * 100));
        const f32 y = ops::dropout(t.input(filled<float>({n}, 1.0f)), static_cast<float>(p), generator).value();
        const auto kept = static_cast<double>(std::count_if(y.begin(), y.end(), [](float v) { return v != 0.0f; }));
        const double sigma = std::sqrt(n * p * (1 - p));
        CHECK(std::abs(kept - n * (1 - p)) < 5 * sigma);  // about 0.3% of n at p = 0.5
    }
}

TEST_CASE("dropout: the gradient multiplies by the same mask; gradcheck with a fixed seed")
{
    const f64 X = random_array({6, 7}, 230, 0.5, 1.5), G = random_array({6, 7}, 231);
    const double p = 0.4;
    tape<double> t;
    std::mt19937_64 generator(3);
    auto x = t.input(X);
    const auto y = ops::dropout(x, p, generator);
    t.backward(ops::sum(ops::mul(y, t.constant(G))));
    for (std::size_t i = 0; i < X.size(); ++i)
    {
        const double expected = y.value().flat(i) == 0.0 ? 0.0 : G.flat(i) / (1.0 - p);
        CHECK(x.grad().flat(i) == doctest::Approx(expected).epsilon(1e-15));
    }
    XGRAD_CHECK_GRADIENTS(
        [](tape<double>&, const vars& v) {
            std::mt19937_64 fixed(11);
            return ops::dropout(v[0], 0.25, fixed);
        },
        {random_array({4, 5}, 232)});
}

TEST_CASE("dropout: NaN stays NaN even where dropped; p outside [0, 1) names the op and p")
{
    f64 X = filled<double>({64}, not_a_number);
    tape<double> t;
    std::mt19937_64 generator(5);
    auto x = t.input(X);
    CHECK(count_nan(ops::dropout(x, 0.5, generator).value()) == 64);
    for (double p : {-0.1, 1.0, 1.5, not_a_number})
    {
        CAPTURE(p);
        const std::string message = invalid_argument_message([&] { ops::dropout(x, p, generator); });
        CHECK(contains(message, "dropout"));
        CHECK(contains(message, "p"));
        CHECK(contains(message, "(64)"));
    }
    CHECK(contains(invalid_argument_message([&] { ops::dropout(x, 1.5, generator); }), "1.5"));
    CHECK(contains(invalid_argument_message([&] { ops::dropout(x, 1.0, generator, false); }), "dropout"));
}

// ---- fused against composed ------------------------------------------------------------------------

namespace
{
struct value_and_grads
{
    f64 value;
    std::vector<f64> grads;
};

// f on a fresh tape at `inputs`, then backward with the seed `G` (of f's output shape): the value and
// every input's gradient.
value_and_grads evaluate_with_grads(const checked_function<double>& f, const std::vector<f64>& inputs, const f64& G)
{
    tape<double> t;
    vars xs;
    for (const auto& x : inputs)
    {
        xs.push_back(t.input(x));
    }
    const auto y = f(t, xs);
    t.backward(y, G);
    value_and_grads out{y.value(), {}};
    for (const auto& x : xs)
    {
        out.grads.push_back(x.grad());
    }
    return out;
}

// The fused op and its composed twin agree to 1e-12 relative in value and every gradient (an absolute
// floor of 1e-12 times the largest entry, for entries that cancel to about 0).
void check_fused_equals_composed(const checked_function<double>& fused, const checked_function<double>& composed,
                                 const std::vector<f64>& inputs, const f64& G)
{
    const auto a = evaluate_with_grads(fused, inputs, G);
    const auto b = evaluate_with_grads(composed, inputs, G);
    XGRAD_CHECK_CLOSE(a.value, b.value, 1e-12, 1e-12 * max_abs(b.value));
    for (std::size_t k = 0; k < inputs.size(); ++k)
    {
        CAPTURE(k);
        XGRAD_CHECK_CLOSE(a.grads[k], b.grads[k], 1e-12, 1e-12 * max_abs(b.grads[k]));
    }
}
}  // namespace

TEST_CASE("log_softmax equals composed::log_softmax (values and gradients, 1e-12 relative)")
{
    const std::vector<shape_t> shapes = {{1}, {1, 1}, {6}, {3, 7}, {2, 3, 16}, {2, 37}};
    unsigned seed = 300;
    for (const auto& shape : shapes)
    {
        for (double scale : {1.0, 30.0})
        {
            CAPTURE(shape_str(shape));
            CAPTURE(scale);
            check_fused_equals_composed([](tape<double>&, const vars& v) { return ops::log_softmax(v[0]); },
                                        [](tape<double>&, const vars& v) { return ops::composed::log_softmax(v[0]); },
                                        {random_array(shape, seed, -scale, scale)}, random_array(shape, seed + 1));
            seed += 2;
        }
    }
}

TEST_CASE("cross_entropy equals composed::cross_entropy, with none, some and all targets ignored")
{
    struct ce_case
    {
        shape_t logits;
        std::size_t ignore_every;  // 0: none ignored
        bool all_ignored;
    };
    const std::vector<ce_case> cases = {{{1, 1}, 0, false}, {{5}, 0, false},     {{4, 5}, 0, false},
                                        {{4, 5}, 2, false}, {{2, 3, 11}, 3, false}, {{2, 3, 11}, 0, true},
                                        {{6, 40}, 4, false}};
    unsigned seed = 320;
    for (const auto& c : cases)
    {
        CAPTURE(shape_str(c.logits));
        CAPTURE(c.ignore_every);
        CAPTURE(c.all_ignored);
        const shape_t target_shape(c.logits.begin(), c.logits.end() - 1);
        ids_t targets = random_targets(target_shape, static_cast<std::int64_t>(c.logits.back()), seed++, c.ignore_every);
        if (c.all_ignored)
        {
            targets.fill(-1);
        }
        check_fused_equals_composed(
            [targets](tape<double>&, const vars& v) { return ops::cross_entropy(v[0], targets); },
            [targets](tape<double>&, const vars& v) { return ops::composed::cross_entropy(v[0], targets); },
            {random_array(c.logits, seed++, -3.0, 3.0)}, filled<double>({}, 1.7));
    }
}

TEST_CASE("layer_norm equals composed::layer_norm in value and the gradients of x, weight and bias")
{
    const std::vector<shape_t> shapes = {{1, 1}, {1, 2}, {7}, {3, 5}, {2, 3, 8}, {4, 33}};
    unsigned seed = 340;
    for (const auto& shape : shapes)
    {
        for (double eps : {1e-5, 0.1})
        {
            CAPTURE(shape_str(shape));
            CAPTURE(eps);
            const std::size_t d = shape.back();
            check_fused_equals_composed(
                [eps](tape<double>&, const vars& v) { return ops::layer_norm(v[0], v[1], v[2], eps); },
                [eps](tape<double>&, const vars& v) { return ops::composed::layer_norm(v[0], v[1], v[2], eps); },
                {random_array(shape, seed, -2.0, 2.0), random_array({d}, seed + 1, 0.5, 1.5),
                 random_array({d}, seed + 2)},
                random_array(shape, seed + 3));
            seed += 4;
        }
    }
}
}  // namespace test_ops_nn
