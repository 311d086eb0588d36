// Anomaly mode (tape::detect_anomaly): the first op whose forward value or backward gradient turns
// non-finite from finite inputs throws anomaly_error naming the node; NaN already in an input only
// propagates; with nothing anomalous the mode changes no number.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "models/mha.hpp"
#include "test_util.hpp"

namespace test_anomaly
{
using namespace xgrad;
using namespace xgrad::test;

namespace
{
const double infinity = std::numeric_limits<double>::infinity();
const double not_a_number = std::numeric_limits<double>::quiet_NaN();

// Runs f, which must throw anomaly_error, and returns the error.
template <class F>
anomaly_error anomaly_of(F&& f)
{
    try
    {
        f();
    }
    catch (const anomaly_error& e)
    {
        return e;
    }
    FAIL("no anomaly_error was thrown");
    throw std::logic_error("unreachable");
}

bool all_finite(const f64& a)
{
    return std::all_of(a.begin(), a.end(), [](double v) { return std::isfinite(v); });
}
}  // namespace

TEST_CASE("anomaly mode is off by default: log of a negative number gives NaN silently")
{
    tape<double> t;
    CHECK_FALSE(t.detecting_anomaly());
    auto y = ops::log(t.input(f64{1.0, -2.0}, "x")).named("log_x");
    CHECK(std::isnan(y.value()(1)));
    t.backward(ops::sum(y));
    t.detect_anomaly(true);
    CHECK(t.detecting_anomaly());
    t.detect_anomaly(false);
    CHECK_FALSE(t.detecting_anomaly());
}

TEST_CASE("log of a negative number: the error names op, label, node, shapes, the first bad element, the trace")
{
    tape<double> t;
    t.detect_anomaly();
    auto unrelated = t.input(f64{7.0}, "unrelated");
    auto x = t.input(f64{{1.0, 2.0, 3.0}, {4.0, -5.0, -6.0}}, "x");
    auto doubled = ops::scale(x, 2.0).named("doubled");
    auto other = ops::exp(unrelated).named("other");
    const anomaly_error e = anomaly_of([&] { ops::log(doubled).named("log_doubled"); });

    CHECK(e.op == "log");
    CHECK(e.label == "log_doubled");
    CHECK(e.node == 4);
    CHECK_FALSE(e.in_backward);
    CHECK(e.element == 4);  // [1, 1]: log(-10), the first non-finite element in row-major order
    CHECK(std::isnan(e.value));
    CHECK(contains(e.summary, "anomaly in forward: %4 log 'log_doubled'(%2) gave nan at index [1, 1]"));
    CHECK(contains(e.summary, "of its output (2, 3) from finite inputs %2 (2, 3)"));
    CHECK(e.summary.find('\n') == std::string::npos);

    // The trace: the chain that fed the node, oldest first; not the unrelated nodes %0 and %3.
    REQUIRE(e.trace.size() == 3);
    CHECK(e.trace[0].rfind("%1 input 'x'", 0) == 0);
    CHECK(e.trace[1].rfind("%2 scale 'doubled'(%1)", 0) == 0);
    CHECK(e.trace[2].rfind("%4 log 'log_doubled'(%2)", 0) == 0);
    CHECK(contains(e.trace[2], "(2, 3)"));
    const std::string what = e.what();
    CHECK(what.rfind(e.summary + "\nforward trace", 0) == 0);
    CHECK(contains(what, "\n  %1 input 'x'"));
    CHECK_FALSE(contains(what, "unrelated"));
    CHECK_FALSE(contains(what, "other"));
    const std::runtime_error& as_runtime_error = e;  // catchable as a runtime_error
    CHECK(contains(as_runtime_error.what(), "log_doubled"));
    (void)other;
}

TEST_CASE("an op nobody names is checked when the next op reads it, or when backward starts")
{
    SUBCASE("read by the next op")
    {
        tape<double> t;
        t.detect_anomaly();
        auto x = t.input(f64{0.0, 1.0}, "x");
        auto y = ops::log(x);  // log(0) = -inf, not yet checked: it may still be named
        const anomaly_error e = anomaly_of([&] { ops::exp(y); });
        CHECK(e.op == "log");
        CHECK(e.label.empty());
        CHECK(e.node == 1);
        CHECK(e.value == -infinity);
        CHECK(contains(e.summary, "%1 log(%0) gave -inf at index [0]"));
    }
    SUBCASE("read by the user")
    {
        tape<double> t;
        t.detect_anomaly();
        auto y = ops::log(t.input(f64{-1.0}));
        CHECK_THROWS_AS(y.value(), anomaly_error);
    }
    SUBCASE("backward")
    {
        tape<double> t;
        t.detect_anomaly();
        auto y = ops::log(t.input(f64{1.0, -1.0}));
        CHECK_THROWS_AS(t.backward(y, f64{1.0, 1.0}), anomaly_error);
    }
    SUBCASE("an op that never went non-finite passes all of these")
    {
        tape<double> t;
        t.detect_anomaly();
        auto y = ops::log(t.input(f64{1.0, 2.0}));
        CHECK_NOTHROW(y.value());
        CHECK_NOTHROW(ops::exp(y).named("e"));
        CHECK_NOTHROW(t.backward(ops::sum(y)));
    }
}

TEST_CASE("0/0 and 1/0 in div: the first bad element, in row-major order, with both input shapes")
{
    tape<double> t;
    t.detect_anomaly();
    auto num = t.input(f64{{1.0, 0.0, 3.0}, {0.0, 5.0, 6.0}}, "num");
    auto den = t.input(f64{2.0, 0.0, 0.0}, "den");  // broadcast over the rows
    const anomaly_error e = anomaly_of([&] { ops::div(num, den).named("ratio"); });
    CHECK(e.op == "div");
    CHECK(e.label == "ratio");
    CHECK(e.element == 1);  // [0, 1]: 0/0; [0, 2] is 3/0 = inf, later in the order
    CHECK(std::isnan(e.value));
    CHECK(contains(e.summary, "%2 div 'ratio'(%0, %1) gave nan at index [0, 1] of its output (2, 3) from "
                              "finite inputs %0 (2, 3), %1 (3)"));
    CHECK(e.trace.size() == 3);

    tape<double> t2;
    t2.detect_anomaly();
    auto one = t2.input(f64{1.0}, "one");
    auto zero = t2.input(f64{0.0}, "zero");
    const anomaly_error e2 = anomaly_of([&] { ops::div(one, zero).named("r"); });
    CHECK(e2.value == infinity);
}

TEST_CASE("one_line(): the summary and the trace on one line, for a tool's stderr")
{
    tape<double> t;
    t.detect_anomaly();
    auto x = t.input(f64{-1.0}, "x");
    const anomaly_error e = anomaly_of([&] { ops::log(x).named("log_x"); });
    CHECK(e.one_line() == e.summary + "; forward trace: %0 input 'x' (1); %1 log 'log_x'(%0) (1)");
}

TEST_CASE("exp overflows to inf from finite inputs, in float64 and float32")
{
    tape<double> t;
    t.detect_anomaly();
    auto x = t.input(f64{1.0, 709.0, 710.0}, "x");  // exp(709) is finite in float64, exp(710) is not
    const anomaly_error e = anomaly_of([&] { ops::exp(x).named("e"); });
    CHECK(e.element == 2);
    CHECK(e.value == infinity);

    tape<float> t32;
    t32.detect_anomaly();
    auto x32 = t32.input(f32{88.0f, 89.0f}, "x");  // exp(88) < FLT_MAX < exp(89)
    const anomaly_error e32 = anomaly_of([&] { ops::exp(x32).named("e"); });
    CHECK(e32.element == 1);
    CHECK(e32.value == infinity);
}

TEST_CASE("finite values producing inf in backward")
{
    SUBCASE("log of a subnormal number: log(1e-310) is finite, its derivative 1/x is not")
    {
        tape<double> t;
        t.detect_anomaly();
        auto x = t.input(f64{0.5, 1e-310}, "x");
        auto y = ops::log(x).named("log_x");
        CHECK(all_finite(y.value()));
        const anomaly_error e = anomaly_of([&] { t.backward(ops::sum(y).named("loss")); });
        CHECK(e.in_backward);
        CHECK(e.op == "log");
        CHECK(e.label == "log_x");
        CHECK(e.node == 1);
        CHECK(e.element == 1);
        CHECK(e.value == infinity);
        CHECK(contains(e.summary, "anomaly in backward: %1 log 'log_x'(%0) gave inf at index [1] of the "
                                  "gradient (2) for input 0 (%0)"));
        CHECK(e.trace.size() == 2);
    }
    SUBCASE("a product whose forward is finite: u = a b = 1, L = sum(u c) = 1e200; dL/db = c a overflows")
    {
        tape<double> t;
        t.detect_anomaly();
        auto a = t.input(f64{1e200}, "a");
        auto b = t.input(f64{1e-200}, "b");
        auto c = t.input(f64{1e200}, "c");
        auto u = (a * b).named("u");
        auto loss = ops::sum(u * c).named("loss");
        CHECK(std::isfinite(loss.value()()));
        const anomaly_error e = anomaly_of([&] { t.backward(loss); });
        CHECK(e.label == "u");
        CHECK(e.op == "mul");
        CHECK(e.node == 3);
        CHECK(contains(e.summary, "gave inf at index [0] of the gradient (1) for input 1 (%1), from a finite "
                                  "incoming gradient (1) and finite values %0 (1), %1 (1)"));
    }
    SUBCASE("two finite gradients of a reused input whose sum overflows")
    {
        // x = 1e-300; L = sum(1e308 x - (-1e308) x) = 2e8, but dL/dx = 1e308 + 1e308 = inf.
        tape<double> t;
        t.detect_anomaly();
        auto x = t.input(f64{1e-300}, "x");
        auto up = ops::scale(x, 1e308).named("up");
        auto down = ops::scale(x, -1e308).named("down");
        auto loss = ops::sum(up - down).named("loss");
        CHECK(loss.value()() == doctest::Approx(2e8));
        const anomaly_error e = anomaly_of([&] { t.backward(loss); });
        CHECK(e.label == "up");  // the walk reaches `down` first; `up` adds the second 1e308
        CHECK(contains(e.summary, "gave a finite gradient, but adding it to the one already there gave inf"));
    }
    SUBCASE("the same graphs without anomaly mode run through and leave inf in the gradients")
    {
        tape<double> t;
        auto x = t.input(f64{0.5, 1e-310}, "x");
        t.backward(ops::sum(ops::log(x)));
        CHECK(x.grad()(1) == infinity);
    }
}

TEST_CASE("NaN or inf already in an input is not an anomaly of the ops that propagate it")
{
    tape<double> t;
    t.detect_anomaly();
    auto x = t.input(f64{1.0, not_a_number, 3.0}, "x");
    auto w = t.input(f64{infinity, 1.0, 2.0}, "w");
    auto y = ops::exp(x).named("exp_x");   // NaN in, NaN out
    auto z = (w - w).named("inf_minus_inf");  // inf - inf = NaN, but an input already held inf
    auto loss = ops::sum(y * z + ops::log(x)).named("loss");
    CHECK(std::isnan(loss.value()()));
    CHECK_NOTHROW(t.backward(loss));
    CHECK(std::isnan(x.grad()(1)));

    // A NaN seed gradient propagates through backward without an anomaly either.
    tape<double> t2;
    t2.detect_anomaly();
    auto a = t2.input(f64{1.0, 2.0}, "a");
    auto b = ops::exp(a).named("b");
    CHECK_NOTHROW(t2.backward(b, f64{not_a_number, 1.0}));
    CHECK(std::isnan(a.grad()(0)));
    CHECK(a.grad()(1) == doctest::Approx(std::exp(2.0)));
}

TEST_CASE("a long chain: the trace holds the newest nodes and counts the ones left out")
{
    tape<double> t;
    t.detect_anomaly();
    var<double> x = t.input(f64{1.0}, "x");
    for (int i = 0; i < 100; ++i)
    {
        x = ops::scale(x, 1.0);
    }
    const anomaly_error e = anomaly_of([&] { ops::log(ops::neg(x)).named("bad"); });
    CHECK(e.node == 102);
    REQUIRE(e.trace.size() == 32);
    CHECK(e.trace.front() == "... 72 earlier nodes");  // 103 nodes in the chain, 31 shown
    CHECK(e.trace.back().rfind("%102 log 'bad'(%101)", 0) == 0);
}

// ---- nothing anomalous: identical numbers --------------------------------------------------------

namespace
{
template <class T>
std::vector<array<T>> mha_forward_backward(bool detect)
{
    const models::mha_config config{8, 2};
    const auto params = models::mha_parameters<T>::init(config, 5);
    tape<T> t;
    t.detect_anomaly(detect);
    auto x = t.input(normal_array<T>({2, 5, 8}, 6), "X");
    auto weights = models::bind(t, params);
    const mask_t mask = random_mask({5, 5}, 7);
    auto r = models::self_attention(x, weights, config, {&mask, true});
    auto loss = ops::sum(r.output * t.constant(normal_array<T>({2, 5, 8}, 8)));
    t.backward(loss);
    return {r.output.value(), r.attention.value(), x.grad(),  params.W_Q.grad(),
            params.W_K.grad(), params.W_V.grad(), params.W_O.grad()};
}
}  // namespace

TEST_CASE("with nothing anomalous, anomaly mode changes no number (MHA forward and backward)")
{
    const auto off64 = mha_forward_backward<double>(false), on64 = mha_forward_backward<double>(true);
    REQUIRE(off64.size() == on64.size());
    for (std::size_t i = 0; i < off64.size(); ++i)
    {
        CHECK(off64[i] == on64[i]);
    }
    const auto off32 = mha_forward_backward<float>(false), on32 = mha_forward_backward<float>(true);
    for (std::size_t i = 0; i < off32.size(); ++i)
    {
        CHECK(off32[i] == on32[i]);
    }
}

// ---- an exploding learning rate --------------------------------------------------------------------

namespace
{
struct training_run
{
    int first_non_finite_loss = -1;      // first step whose loss is NaN or inf (mode off)
    int anomaly_step = -1;               // step whose forward or backward threw (mode on)
    bool parameters_finite_at_anomaly = false;
    std::optional<anomaly_error> anomaly;
};

// A student MHA layer trained by SGD to imitate a teacher, with learning rate `lr`, for at most `steps`.
training_run train(double lr, bool detect, int steps)
{
    const models::mha_config config{8, 2};
    const auto teacher = models::mha_parameters<double>::init(config, 1);
    auto student = models::mha_parameters<double>::init(config, 2);
    training_run run;
    for (int step = 0; step < steps; ++step)
    {
        tape<double> t;
        t.detect_anomaly(detect);
        auto x = t.input(normal_array<double>({2, 6, 8}, 100 + step), "X", false);
        f64 target;
        {
            auto no_grad = t.no_grad();
            target = models::self_attention(x, models::bind(t, teacher), config, {nullptr, true}).output.value();
        }
        try
        {
            auto y = models::self_attention(x, models::bind(t, student), config, {nullptr, true}).output;
            auto diff = (y - t.constant(target, "target")).named("diff");
            auto loss = ops::mean(diff * diff).named("loss");
            if (!std::isfinite(loss.value()()) && run.first_non_finite_loss < 0)
            {
                run.first_non_finite_loss = step;
                return run;
            }
            t.backward(loss);
        }
        catch (const anomaly_error& e)
        {
            run.anomaly_step = step;
            run.anomaly = e;
            run.parameters_finite_at_anomaly = true;
            for (auto* p : {&student.W_Q, &student.W_K, &student.W_V, &student.W_O})
            {
                run.parameters_finite_at_anomaly = run.parameters_finite_at_anomaly && all_finite(p->value());
            }
            return run;
        }
        for (auto* p : {&student.W_Q, &student.W_K, &student.W_V, &student.W_O})
        {
            p->value() -= lr * p->grad();
        }
        student.zero_grad();
    }
    return run;
}
}  // namespace

TEST_CASE("an exploding learning rate: anomaly mode stops at the op that overflowed, not steps later")
{
    const double lr = 1e6;
    const training_run plain = train(lr, false, 50);
    REQUIRE(plain.first_non_finite_loss > 0);  // the loss does overflow, after some finite steps
    const training_run checked = train(lr, true, 50);
    REQUIRE(checked.anomaly.has_value());
    CHECK(checked.first_non_finite_loss < 0);
    // The anomaly comes no later than the step whose loss went non-finite without the mode, while every
    // parameter is still finite: it names the op where the overflow began.
    CHECK(checked.anomaly_step <= plain.first_non_finite_loss);
    CHECK(checked.parameters_finite_at_anomaly);
    CHECK_FALSE(checked.anomaly->op.empty());
    CHECK_FALSE(std::isfinite(checked.anomaly->value));
    CHECK(checked.anomaly->trace.back().rfind("%" + std::to_string(checked.anomaly->node) + " ", 0) == 0);
    MESSAGE("lr " << lr << ": loss non-finite at step " << plain.first_non_finite_loss
                  << " without anomaly mode; with it, at step " << checked.anomaly_step << ": "
                  << checked.anomaly->summary);

    // A sane learning rate trains without an anomaly.
    const training_run sane = train(0.1, true, 5);
    CHECK_FALSE(sane.anomaly.has_value());
    CHECK(sane.first_non_finite_loss < 0);
}
}  // namespace test_anomaly
