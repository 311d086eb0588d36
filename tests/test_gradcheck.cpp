// gradcheck itself: it passes correct rules, fails wrong ones on both of its paths (full Jacobian and
// random directions), and refuses float32. Also: float32 and float64 agree on a small composite.
#include <doctest/doctest.h>

#include <stdexcept>

#include "autodiff/compare.hpp"
#include "autodiff/record.hpp"
#include "test_util.hpp"

namespace test_gradcheck
{
using namespace xgrad;
using namespace xgrad::test;

namespace
{
// y = 3 x, recorded directly on the tape with a hand-written rule: dL/dx = rule_factor * g.
// rule_factor 3 is right, anything else is a wrong backward.
var<double> times_three(const var<double>& x, double rule_factor)
{
    array<double> y = 3.0 * x.value();
    return detail::record("times_three", {x}, std::move(y), saves_nothing,
                          [rule_factor](backward_context<double>& ctx)
                          { ctx.accumulate(0, array<double>(rule_factor * ctx.grad())); });
}

// c = a - b with a sign error in dL/db (+g instead of -g); dL/da is right.
var<double> sub_with_wrong_sign(const var<double>& a, const var<double>& b)
{
    array<double> c = a.value() - b.value();
    return detail::record("bad_sub", {a, b}, std::move(c), saves_nothing,
                          [](backward_context<double>& ctx)
                          {
                              ctx.accumulate(0, array<double>(ctx.grad()));
                              ctx.accumulate(1, array<double>(ctx.grad()));
                          });
}

gradcheck_options random_directions_only()
{
    gradcheck_options options;
    options.full_jacobian_limit = 1;  // every input here has more Jacobian entries than this
    options.directions = 4;
    return options;
}
}  // namespace

TEST_CASE("gradcheck passes a correct custom rule on both paths")
{
    const f64 X = random_array({2, 3}, 1);
    const auto right = [](tape<double>&, const vars& x) { return times_three(x[0], 3.0); };

    const gradcheck_report full = gradcheck(right, {X});
    CHECK_MESSAGE(full.ok, full.summary());
    REQUIRE(full.inputs.size() == 1);
    CHECK(full.inputs[0].method == "full Jacobian");
    CHECK(full.inputs[0].entries_checked == 6 * 6);
    CHECK(full.inputs[0].shape == shape_t{2, 3});
    CHECK(full.inputs[0].max_abs_error < 1e-8);

    const gradcheck_report directions = gradcheck(right, {X}, random_directions_only());
    CHECK_MESSAGE(directions.ok, directions.summary());
    REQUIRE(directions.inputs.size() == 1);
    CHECK(directions.inputs[0].method == "random directions");
    CHECK(directions.inputs[0].entries_checked == 4);
    CHECK(directions.summary().find("yes") != std::string::npos);
}

TEST_CASE("gradcheck fails a backward rule that is wrong by a factor 2, on both paths")
{
    const f64 X = random_array({2, 3}, 2);
    const auto wrong = [](tape<double>&, const vars& x) { return times_three(x[0], 6.0); };

    const gradcheck_report full = gradcheck(wrong, {X});
    CHECK_FALSE(full.ok);
    REQUIRE(full.inputs.size() == 1);
    CHECK(full.inputs[0].method == "full Jacobian");
    CHECK_FALSE(full.inputs[0].ok);
    // Analytic 6 against numeric 3 on the diagonal: abs error 3, relative (to the larger) 1/2.
    CHECK(full.inputs[0].max_abs_error == doctest::Approx(3.0).epsilon(1e-6));
    CHECK(full.inputs[0].max_rel_error == doctest::Approx(0.5).epsilon(1e-6));
    CHECK(full.summary().find("NO") != std::string::npos);

    const gradcheck_report directions = gradcheck(wrong, {X}, random_directions_only());
    CHECK_FALSE(directions.ok);
    REQUIRE(directions.inputs.size() == 1);
    CHECK(directions.inputs[0].method == "random directions");
    CHECK_FALSE(directions.inputs[0].ok);

    // Inside a composite, and with a scalar output, the wrong rule is still caught on both paths.
    const auto composite = [](tape<double>&, const vars& x)
    { return ops::sum(ops::tanh(times_three(ops::matmul(x[0], x[1]), 6.0))); };
    const std::vector<f64> inputs = {random_array({3, 4}, 3, -0.3, 0.3), random_array({4, 2}, 4, -0.3, 0.3)};
    CHECK_FALSE(gradcheck(composite, inputs).ok);
    CHECK_FALSE(gradcheck(composite, inputs, random_directions_only()).ok);
}

TEST_CASE("gradcheck reports per input: only the input with the wrong rule fails")
{
    const std::vector<f64> inputs = {random_array({2, 2}, 5), random_array({2, 2}, 6)};
    const auto f = [](tape<double>&, const vars& x) { return sub_with_wrong_sign(x[0], x[1]); };
    for (const auto& options : {gradcheck_options{}, random_directions_only()})
    {
        const gradcheck_report report = gradcheck(f, inputs, options);
        CAPTURE(report.summary());
        CHECK_FALSE(report.ok);
        REQUIRE(report.inputs.size() == 2);
        CHECK(report.inputs[0].ok);
        CHECK_FALSE(report.inputs[1].ok);
    }
}

TEST_CASE("gradcheck mixes paths by input size")
{
    // Output (3, 2): x (3, 4) has 72 Jacobian entries, w (4, 2) has 48; a limit of 50 splits them.
    gradcheck_options options;
    options.full_jacobian_limit = 50;
    const auto f = [](tape<double>&, const vars& x) { return ops::tanh(ops::matmul(x[0], x[1])); };
    const gradcheck_report report = gradcheck(f, {random_array({3, 4}, 7), random_array({4, 2}, 8)}, options);
    CHECK_MESSAGE(report.ok, report.summary());
    REQUIRE(report.inputs.size() == 2);
    CHECK(report.inputs[0].method == "random directions");
    CHECK(report.inputs[1].method == "full Jacobian");
    CHECK(report.inputs[1].entries_checked == 48);
}

TEST_CASE("gradcheck with an input the output does not depend on")
{
    const auto f = [](tape<double>&, const vars& x) { return ops::exp(x[0]); };
    XGRAD_CHECK_GRADIENTS(f, {random_array({3}, 9), random_array({2}, 10)});
}

TEST_CASE("gradcheck refuses float32 with std::invalid_argument")
{
    const checked_function<float> f = [](tape<float>&, const std::vector<var<float>>& x)
    { return ops::exp(x[0]); };
    const std::vector<array<float>> inputs = {filled<float>({2}, 1.0f)};
    CHECK_THROWS_AS(gradcheck(f, inputs), std::invalid_argument);
}

// ---- float32 against float64 -----------------------------------------------------------------------

namespace
{
template <class T>
struct composite_result
{
    array<T> value;
    std::vector<array<T>> grads;
};

// L = 2 sum(C * masked_softmax(A B^T, mask, 0.5)) - sum(mean(tanh(permute(reshape(exp(A) * D)))))
//     + sum(log(relu(A - D) + 1)): every primitive op, in the precision T.
template <class T>
composite_result<T> composite(const std::vector<f64>& inputs, const mask_t& mask)
{
    tape<T> t;
    std::vector<var<T>> x;
    for (const auto& in : inputs)
    {
        x.push_back(t.input(to_float_type<T>(in)));
    }
    const var<T>& a = x[0];
    const var<T>& b = x[1];
    const var<T>& c = x[2];
    const var<T>& d = x[3];
    auto scores = ops::matmul(a, b, false, true);  // (2, 3, 4) @ (2, 5, 4)^T = (2, 3, 5)
    auto attention = ops::masked_softmax(scores, mask, T(0.5));
    auto l1 = ops::sum(ops::mul(attention, c));
    auto e = ops::reshape(ops::mul(ops::exp(a), d), {2, -1, 2});               // (2, 6, 2)
    auto l2 = ops::mean(ops::tanh(ops::permute(e, {2, 0, 1})), {0, 2}, true);  // (1, 2, 1)
    auto one = t.constant(filled<T>({1}, T(1)));
    auto l3 = ops::sum(ops::log(ops::add(ops::relu(ops::sub(a, d)), one)));
    auto loss = ops::add(ops::sub(ops::scale(l1, T(2)), ops::sum(l2)), l3);
    t.backward(loss);
    composite_result<T> r{loss.value(), {}};
    for (const auto& in : x)
    {
        r.grads.push_back(in.grad());
    }
    return r;
}
}  // namespace

TEST_CASE("float32 and float64 agree on a composite of every op")
{
    const std::vector<f64> inputs = {random_array({2, 3, 4}, 20), random_array({2, 5, 4}, 21),
                                     random_array({2, 3, 5}, 22), random_array({2, 3, 4}, 23)};
    mask_t mask = random_mask({3, 5}, 24);
    for (std::size_t j = 0; j < 5; ++j)
    {
        mask(1, j) = false;  // a fully masked row
    }
    const auto r64 = composite<double>(inputs, mask);
    const auto r32 = composite<float>(inputs, mask);
    XGRAD_CHECK_CLOSE(r32.value, to_float_type<float>(r64.value), 1e-5, 1e-6);
    for (std::size_t i = 0; i < inputs.size(); ++i)
    {
        CAPTURE(i);
        // float32 tolerance relative to the gradient's own scale (the softmax rule subtracts close numbers)
        const double scale = std::max(1e-3, max_abs(r64.grads[i]));
        CHECK(all_finite(r32.grads[i]));
        XGRAD_CHECK_CLOSE(r32.grads[i], to_float_type<float>(r64.grads[i]), 1e-5, 1e-5 * scale);
    }
}

TEST_CASE("float32 and float64 agree on attention-like scores with long rows")
{
    // L = sum(C * masked_softmax(A B^T / sqrt(8), mask)), rows of 19 keys (vector width and a tail)
    const std::vector<f64> inputs = {random_array({2, 3, 8}, 30), random_array({2, 19, 8}, 31),
                                     random_array({2, 3, 19}, 32)};
    mask_t mask = random_mask({2, 1, 1, 19}, 33);
    mask(0, 0, 0, 0) = true;
    const auto run = [&](auto zero)
    {
        using T = decltype(zero);
        tape<T> t;
        auto a = t.input(to_float_type<T>(inputs[0]));
        auto b = t.input(to_float_type<T>(inputs[1]));
        auto c = t.constant(to_float_type<T>(inputs[2]));
        auto scores = ops::reshape(ops::matmul(a, b, false, true), {2, 1, 3, 19});
        auto loss = ops::sum(ops::masked_softmax(scores, mask, T(1) / std::sqrt(T(8))) *
                             ops::reshape(c, {2, 1, 3, 19}));
        t.backward(loss);
        return composite_result<T>{loss.value(), {a.grad(), b.grad()}};
    };
    const auto r64 = run(0.0);
    const auto r32 = run(0.0f);
    XGRAD_CHECK_CLOSE(r32.value, to_float_type<float>(r64.value), 1e-5, 1e-6);
    for (std::size_t i = 0; i < 2; ++i)
    {
        CAPTURE(i);
        const double scale = std::max(1e-3, max_abs(r64.grads[i]));
        XGRAD_CHECK_CLOSE(r32.grads[i], to_float_type<float>(r64.grads[i]), 1e-5, 1e-5 * scale);
    }
}

TEST_CASE("compare: the one measure of how far apart two arrays are")
{
    const f64 a = xt::xarray<double>{1.0, -4.0, 0.5};
    const f64 b = xt::xarray<double>{1.0, -3.0, 0.5};
    const difference d = compare(a, b);
    CHECK(d.max_abs == 1.0);
    CHECK(d.scale == 4.0);  // the largest |entry| of either
    CHECK(d.max_rel == 0.25);
    CHECK(d.within(0.0, 0.25));
    CHECK_FALSE(d.within(0.0, 0.2));

    CHECK(compare(f64(xt::zeros<double>({3})), f64(xt::zeros<double>({3}))).max_rel == 0.0);
    const double nan = std::nan("");
    CHECK(compare(f64(xt::xarray<double>{nan, 1.0}), f64(xt::xarray<double>{nan, 1.0})).max_abs == 0.0);
    CHECK(std::isinf(compare(f64(xt::xarray<double>{nan, 1.0}), f64(xt::xarray<double>{0.0, 1.0})).max_abs));
    CHECK(std::isinf(compare(f64(xt::xarray<double>{nan}), f64(xt::xarray<double>{0.0})).max_rel));
    CHECK_THROWS_WITH_AS(compare(f64(xt::zeros<double>({2})), f64(xt::zeros<double>({3}))),
                         doctest::Contains("compare"), std::invalid_argument);
}
}  // namespace test_gradcheck
