// ops::linear_gelu and ops::linear_gelu_exact, gelu(x W + b) in one node, against their composition from
// primitives (ops::composed::linear, then ops::composed::gelu or gelu_exact) in float64 to 1e-12, values
// and the gradients of x, W and b; central differences; one row, d = 1, n = 1, rows longer than a SIMD
// batch and not a multiple of it, broadcast batch axes, an input used twice; |x W + b| where tanh and erf
// saturate and where x^3 overflows float32; the same bits on one thread and two; float32 against
// float64; bad shapes. Then the GPT: gpt_forward with every_activation = false (the MLP's merged node)
// against the default, loss and every parameter's gradient.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "test_util.hpp"

#include "kernels/parallel.hpp"
#include "models/gpt.hpp"
#include "ops/composed.hpp"

namespace test_linear_gelu
{
using namespace xgrad;

namespace
{
enum class form
{
    tanh,
    exact
};

const char* name_of(form f)
{
    return f == form::tanh ? "linear_gelu" : "linear_gelu_exact";
}

template <class T>
var<T> fused(form f, const var<T>& x, const var<T>& w, const var<T>& b)
{
    return f == form::tanh ? ops::linear_gelu(x, w, b) : ops::linear_gelu_exact(x, w, b);
}

template <class T>
var<T> composed(form f, const var<T>& x, const var<T>& w, const var<T>& b)
{
    const var<T> h = ops::composed::linear(x, w, b);
    return f == form::tanh ? ops::composed::gelu(h) : ops::composed::gelu_exact(h);
}

// fused == composed in float64, values and every gradient, for inputs x, W, b.
void check_fused_equals_composed(form f, const std::vector<test::f64>& in, unsigned seed)
{
    CAPTURE(name_of(f));
    auto one = [f](const auto& x) { return fused(f, x[0], x[1], x[2]); };
    auto many = [f](const auto& x) { return composed(f, x[0], x[1], x[2]); };
    const auto a = test::evaluate_in<double>(one, in, seed);
    const auto b = test::evaluate_in<double>(many, in, seed);
    CHECK(test::all_finite(a.value));
    CHECK(test::max_relative_difference(a.value, b.value) <= 1e-12);
    for (std::size_t i = 0; i < 3; ++i)
    {
        CAPTURE(i);
        CHECK(test::all_finite(a.grads[i]));
        CHECK(test::max_relative_difference(a.grads[i], b.grads[i]) <= 1e-12);
    }
}

// x (xs), W (d, n), b (n): normal values, b scaled by bias_scale.
std::vector<test::f64> random_inputs(const shape_t& xs, std::size_t n, unsigned seed, double bias_scale = 1.0)
{
    const std::size_t d = xs.back();
    return {test::normal_array<double>(xs, seed), test::normal_array<double>({d, n}, seed + 1),
            test::normal_array<double>({n}, seed + 2, bias_scale)};
}
}  // namespace

TEST_CASE("linear_gelu(_exact) = composed linear then GELU: (B, T, d), (T, d), one row, d = 1, n = 1, tails")
{
    for (form f : {form::tanh, form::exact})
    {
        check_fused_equals_composed(f, random_inputs({3, 5, 4}, 6, 1), 11);
        check_fused_equals_composed(f, random_inputs({7, 3}, 2, 2), 12);
        check_fused_equals_composed(f, random_inputs({1, 1, 1}, 1, 3), 13);     // one row, d = 1, n = 1
        check_fused_equals_composed(f, random_inputs({1, 5}, 19, 4), 14);       // 19: two batches and a tail
        check_fused_equals_composed(f, random_inputs({4, 1}, 9, 5), 15);        // d = 1
        check_fused_equals_composed(f, random_inputs({2, 3, 2, 5}, 3, 6), 16);  // two broadcast batch axes
    }
}

TEST_CASE("linear_gelu(_exact): saturated and large pre-activations, positive and negative")
{
    // The bias pushes x W + b to about +-3, +-8, +-30 and -1e3: tanh(u) and erf round to +-1 there, the
    // exact form's float64 tail (x < -1, libm's erfc) and its e^{-x^2/2} underflow are read.
    const test::f64 bias = {3.0, -3.0, 8.0, -8.0, 30.0, -30.0, -1000.0, 0.5};
    for (form f : {form::tanh, form::exact})
    {
        CAPTURE(name_of(f));
        std::vector<test::f64> in = random_inputs({2, 3, 4}, 8, 21, 0.0);
        in[2] = bias;
        check_fused_equals_composed(f, in, 22);
        // gelu(h) -> h and gelu'(h) -> 1 for h >> 0, both -> 0 for h << 0
        tape<double> t;
        auto x = t.input(in[0]), w = t.input(in[1]), b = t.input(in[2]);
        auto y = fused(f, x, w, b);
        t.backward(ops::sum(y));
        const test::f64 h = test::ref_matmul(in[0], in[1], false, false) + in[2];
        for (std::size_t r = 0; r < 6; ++r)
        {
            CHECK(y.value().flat(r * 8 + 4) == doctest::Approx(h.flat(r * 8 + 4)).epsilon(1e-15));
            CHECK(std::abs(y.value().flat(r * 8 + 6)) < 1e-300);
        }
        CHECK(b.grad().flat(4) == doctest::Approx(6.0).epsilon(1e-15));  // six rows, slope 1 each
        CHECK(b.grad().flat(6) == 0.0);
    }
}

TEST_CASE("linear_gelu(_exact) in float32: finite where x^3 overflows, and agreeing with float64")
{
    for (form f : {form::tanh, form::exact})
    {
        CAPTURE(name_of(f));
        tape<float> t;
        auto x = t.input(array<float>{{1.0f, -2.0f}});
        auto w = t.input(array<float>{{1.0f, 1.0f, 1.0f}, {0.0f, 0.0f, 0.0f}});
        auto b = t.input(array<float>{1e13f, -1e13f, 0.0f});  // (1e13)^3 overflows float32
        auto y = fused(f, x, w, b);
        t.backward(ops::sum(y));
        CHECK(y.value()(0, 0) == doctest::Approx(1e13f));
        CHECK(y.value()(0, 1) == 0.0f);
        CHECK(test::all_finite(x.grad()));
        CHECK(test::all_finite(w.grad()));
        CHECK(b.grad()(0) == 1.0f);
        CHECK(b.grad()(1) == 0.0f);

        auto g = [f](const auto& v) { return fused(f, v[0], v[1], v[2]); };
        test::check_float32_agrees(g, {test::random_array({4, 9, 16}, 1), test::random_array({16, 12}, 2),
                                       test::random_array({12}, 3)});
    }
}

TEST_CASE("linear_gelu(_exact) pass gradcheck (float64 central differences), also with x as the weight")
{
    for (form f : {form::tanh, form::exact})
    {
        CAPTURE(name_of(f));
        auto g = [f](tape<double>&, const std::vector<var<double>>& x) { return fused(f, x[0], x[1], x[2]); };
        XGRAD_CHECK_GRADIENTS(g, random_inputs({2, 3, 4}, 5, 31));
        auto square = [f](tape<double>&, const std::vector<var<double>>& x) {
            return fused(f, x[0], x[0], x[1]);
        };
        XGRAD_CHECK_GRADIENTS(square,
                              {test::normal_array<double>({3, 3}, 34), test::normal_array<double>({3}, 35)});
    }
}

TEST_CASE("linear_gelu(_exact): the bias's gradient, summed in row blocks, is the same on 1 and 2 threads")
{
    // 600 rows of 130: two blocks of partial sums, each on a thread of its own with two threads. The
    // products stay below the GEMM's threading threshold, so only the row kernels are split.
    const std::vector<test::f64> in = random_inputs({3, 200, 7}, 130, 41);
    for (form f : {form::tanh, form::exact})
    {
        CAPTURE(name_of(f));
        auto one = [f](const auto& x) { return fused(f, x[0], x[1], x[2]); };
        const int threads_before = num_threads();
        set_num_threads(1);
        const auto serial = test::evaluate_in<float>(one, in, 42);
        set_num_threads(2);
        const auto parallel = test::evaluate_in<float>(one, in, 42);
        set_num_threads(threads_before);
        CHECK(serial.value == parallel.value);
        for (std::size_t i = 0; i < 3; ++i)
        {
            CAPTURE(i);
            CHECK(serial.grads[i] == parallel.grads[i]);
        }
        check_fused_equals_composed(f, in, 43);
    }
}

TEST_CASE("linear_gelu(_exact): the rule's slopes are counted as saved; no_grad computes none, same values")
{
    const std::vector<test::f64> in = random_inputs({2, 5}, 11, 51);  // x (2, 5), W (5, 11), b (11)
    for (form f : {form::tanh, form::exact})
    {
        CAPTURE(name_of(f));
        tape<double> t;
        auto x = t.input(in[0]);
        auto w = t.input(in[1]);
        auto b = t.input(in[2]);
        auto y = fused(f, x, w, b);
        // x and W (read by the backward products) are leaves; the slopes gelu'(x W + b), 2 x 11, are the
        // rule's own.
        CHECK(t.bytes_saved_for_backward(false) == 2 * 11 * sizeof(double));
        CHECK(t.bytes_saved_for_backward() == (2 * 5 + 5 * 11 + 2 * 11) * sizeof(double));
        t.backward(ops::sum(y));
        CHECK(t.bytes_saved_for_backward() == 0);

        tape<double> u;
        auto ux = u.input(in[0]);
        auto uw = u.input(in[1]);
        auto ub = u.input(in[2]);
        auto guard = u.no_grad();
        auto uy = fused(f, ux, uw, ub);
        CHECK(u.bytes_saved_for_backward() == 0);
        CHECK_FALSE(uy.requires_grad());
        CHECK(uy.value() == y.value());  // the value alone, the same arithmetic as with its slope
    }
}

TEST_CASE("linear_gelu(_exact): bad shapes throw, naming the op and the shapes")
{
    tape<double> t;
    auto x = t.input(test::normal_array<double>({2, 3, 4}, 1));
    auto w = t.input(test::normal_array<double>({4, 5}, 2));
    auto b = t.input(test::normal_array<double>({5}, 3));
    auto b6 = t.input(test::normal_array<double>({6}, 4));
    auto row = t.input(test::normal_array<double>({4}, 5));
    for (form f : {form::tanh, form::exact})
    {
        const std::string op = name_of(f);
        CAPTURE(op);
        auto message = [&](const var<double>& xs, const var<double>& ws, const var<double>& bs) {
            return test::invalid_argument_message([&] { fused(f, xs, ws, bs); });
        };
        CHECK(message(x, w, b6).rfind(op + ": ", 0) == 0);
        CHECK(test::contains(message(x, w, b6), "x (2, 3, 4), weight (4, 5), bias (6)"));
        CHECK(test::contains(message(x, x, b), "weight (2, 3, 4)"));
        CHECK(test::contains(message(row, w, b), "x (4)"));
        CHECK(test::contains(message(w, w, b), "x (4, 5), weight (4, 5)"));
    }
}

namespace
{
using models::gpt_config;
using models::gpt_options;
using models::gpt_parameters;

// The GPT's loss, logits, every parameter's gradient and the names of its activations.
struct gpt_run
{
    double loss = 0;
    array<double> logits;
    std::vector<array<double>> grads;
    std::vector<std::string> activations;
};

gpt_run run_gpt(gpt_parameters<double>& p, const gpt_options& options)
{
    const ids_t tokens = test::random_ids(2, 6, p.config.vocab_size, 51);
    ids_t targets = test::random_ids(2, 6, p.config.vocab_size, 52);
    targets(1, 2) = -1;
    tape<double> t;
    p.zero_grad();
    const auto r = models::gpt_forward(t, p, tokens, &targets, options);
    t.backward(r.loss);
    gpt_run out{r.loss.value()(), r.logits.value(), {}, {}};
    for (const auto& param : p.named_parameters())
    {
        out.grads.push_back(param.grad());
    }
    for (const auto& [name, v] : r.activations)
    {
        out.activations.push_back(name);
    }
    return out;
}

// Initialised, then every entry moved by N(0, 0.1): biases and norm weights away from 0 and 1.
gpt_parameters<double> shaken_gpt(const gpt_config& c)
{
    gpt_parameters<double> p = gpt_parameters<double>::init(c, 61);
    std::mt19937 rng(62);
    std::normal_distribution<double> noise(0.0, 0.1);
    for (auto& param : p.named_parameters())
    {
        for (double& v : param.value())
        {
            v += noise(rng);
        }
    }
    return p;
}

bool lists(const std::vector<std::string>& names, const std::string& name)
{
    return std::find(names.begin(), names.end(), name) != names.end();
}
}  // namespace

TEST_CASE("gpt_forward, every_activation = false: the MLP's merged node gives the same loss and gradients")
{
    for (models::mlp_kind kind : {models::mlp_kind::gelu_tanh, models::mlp_kind::gelu})
    {
        for (models::bias_kind bias : {models::bias_kind::mlp, models::bias_kind::none})
        {
            CAPTURE(static_cast<int>(kind));
            CAPTURE(static_cast<int>(bias));
            gpt_config c{11, 8, 2, 16, 4, 2};
            c.mlp = kind;
            c.bias = bias;
            gpt_parameters<double> p = shaken_gpt(c);
            gpt_options merged;
            merged.every_activation = false;
            const gpt_run a = run_gpt(p, {}), b = run_gpt(p, merged);
            CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-13));
            CHECK(test::max_relative_difference(b.logits, a.logits) <= 1e-13);
            const auto named = p.named_parameters();
            REQUIRE(a.grads.size() == b.grads.size());
            for (std::size_t k = 0; k < a.grads.size(); ++k)
            {
                const std::string name = named[k].name();
                CAPTURE(name);
                CHECK(test::max_relative_difference(b.grads[k], a.grads[k]) <= 1e-12);
            }
            // merged only where there is a bias to merge; the GELU's output is listed either way
            const bool has_bias = bias != models::bias_kind::none;
            CHECK(lists(a.activations, "blocks.1.mlp_hidden"));
            CHECK(lists(b.activations, "blocks.1.mlp_hidden") == !has_bias);
            CHECK(lists(b.activations, "blocks.1.mlp_gelu"));
            CHECK(b.activations.size() + (has_bias ? 2 : 0) == a.activations.size());
        }
    }
}
}  // namespace test_linear_gelu
