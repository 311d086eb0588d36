// Multi-head attention: the tape's composition, the hand-derived backward and central differences
// must agree (Exercise 20.4), for self- and cross-attention, every mask kind and the edge sizes.
#include <doctest/doctest.h>

#include "mha_problem.hpp"
#include "test_util.hpp"

#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include "autodiff/gradcheck.hpp"
#include "models/mha_manual.hpp"
#include "kernels/parallel.hpp"

namespace test_mha
{
using namespace xgrad;
using namespace xgrad::models;

namespace
{
template <class T>
using problem = test::mha_problem<T>;
using test::make_mha_problem;
using test::make_self_mha_problem;

// Gradients in the order xq, xk, xv, w_q, w_k, w_v, w_o (self: x in slot 0, slots 1, 2 empty).
template <class T>
struct gradients
{
    array<T> output, attention;
    std::vector<array<T>> grads;
};

template <class T>
gradients<T> tape_gradients(const problem<T>& p, std::uint64_t* multiply_adds = nullptr)
{
    tape<T> t;
    var<T> xq = t.input(p.xq), xk = p.self ? xq : t.input(p.xk), xv = p.self ? xq : t.input(p.xv);
    mha_weights<T> w{t.input(p.w_q), t.input(p.w_k), t.input(p.w_v), t.input(p.w_o)};
    mha_result<T> r = multi_head_attention(xq, xk, xv, w, p.config, p.options());
    if (multiply_adds)
    {
        *multiply_adds = t.multiply_adds();
    }
    gradients<T> g{r.output.value(), r.attention.value(), {}};
    t.backward(r.output, p.grad_y);
    g.grads = {xq.grad(), p.self ? array<T>() : xk.grad(), p.self ? array<T>() : xv.grad(),
               w.W_Q.grad(), w.W_K.grad(), w.W_V.grad(), w.W_O.grad()};
    return g;
}

template <class T>
gradients<T> manual_gradients(const problem<T>& p)
{
    auto f = manual::mha_forward(p.xq, p.xk, p.xv, p.w_q, p.w_k, p.w_v, p.w_o, p.config, p.options());
    auto g = manual::mha_backward(p.grad_y, f.cache);
    gradients<T> out{f.output, f.cache.weights, {}};
    if (p.self)
    {
        out.grads = {array<T>(g.xq + g.xk + g.xv), array<T>(), array<T>(), g.w_q, g.w_k, g.w_v, g.w_o};
    }
    else
    {
        out.grads = {g.xq, g.xk, g.xv, g.w_q, g.w_k, g.w_v, g.w_o};
    }
    return out;
}

// Central differences of sum(Y * G) of the manual forward, one entry at a time. For self-attention the
// one X feeds all three projections.
gradients<double> numeric_gradients(problem<double> p)
{
    auto loss = [&p] {
        const auto& xk = p.self ? p.xq : p.xk;
        const auto& xv = p.self ? p.xq : p.xv;
        auto f = manual::mha_forward(p.xq, xk, xv, p.w_q, p.w_k, p.w_v, p.w_o, p.config, p.options());
        return double(xt::sum(f.output * p.grad_y)());
    };
    gradients<double> g;
    auto tensors = p.tensors();
    for (std::size_t k = 0; k < tensors.size(); ++k)
    {
        const bool unused = p.self && (k == 1 || k == 2);
        g.grads.push_back(unused ? array<double>() : numeric_gradient(loss, *tensors[k]));
    }
    return g;
}

template <class T>
double max_rel_diff(const array<T>& a, const array<T>& b)
{
    REQUIRE(a.shape() == b.shape());
    const double scale = std::max<double>(1e-30, std::max<double>(xt::amax(xt::abs(a))(), xt::amax(xt::abs(b))()));
    return a.size() ? double(xt::amax(xt::abs(a - b))()) / scale : 0.0;
}

bool all_finite(const array<double>& a)
{
    return xt::all(xt::isfinite(a));
}

const char* const names[] = {"Xq", "Xk", "Xv", "W_Q", "W_K", "W_V", "W_O"};

// The three-way check: tape = manual to ~1e-12 relative, and both = central differences.
void check_three_way(const problem<double>& p, bool with_numeric = true)
{
    const auto tape = tape_gradients(p);
    const auto manual = manual_gradients(p);
    CHECK(max_rel_diff(tape.output, manual.output) < 1e-12);
    CHECK(max_rel_diff(tape.attention, manual.attention) < 1e-12);
    for (std::size_t k = 0; k < 7; ++k)
    {
        CAPTURE(names[k]);
        CHECK(all_finite(tape.grads[k]));
        CHECK(max_rel_diff(tape.grads[k], manual.grads[k]) < 1e-12);
    }
    if (!with_numeric)
    {
        return;
    }
    const auto numeric = numeric_gradients(p);
    for (std::size_t k = 0; k < 7; ++k)
    {
        CAPTURE(names[k]);
        CHECK(max_rel_diff(manual.grads[k], numeric.grads[k]) < 1e-6);
        CHECK(max_rel_diff(tape.grads[k], numeric.grads[k]) < 1e-6);
    }
}
}  // namespace

TEST_CASE("self-attention: tape = manual = finite differences, with and without a causal mask")
{
    for (bool causal : {false, true})
    {
        CAPTURE(causal);
        auto p = make_self_mha_problem<double>(2, 5, 8, 2);
        p.causal = causal;
        check_three_way(p);
    }
}

TEST_CASE("self-attention gradient is the sum of the three paths")
{
    auto self = make_self_mha_problem<double>(2, 4, 6, 3);
    self.causal = true;
    auto copies = self;
    copies.self = false;  // the same values fed as three separate inputs
    const auto g_self = tape_gradients(self);
    const auto g_copies = tape_gradients(copies);
    const array<double> sum = g_copies.grads[0] + g_copies.grads[1] + g_copies.grads[2];
    CHECK(max_rel_diff(g_self.grads[0], sum) < 1e-13);
    CHECK(max_rel_diff(g_copies.grads[0], g_copies.grads[1]) > 1e-3);  // the paths really differ
    for (std::size_t k = 3; k < 7; ++k)
    {
        CHECK(max_rel_diff(g_self.grads[k], g_copies.grads[k]) < 1e-13);
    }
}

TEST_CASE("tape gradients pass gradcheck through the composed layer")
{
    auto p = make_mha_problem<double>(2, 3, 4, 4, 2);
    p.causal = true;
    const mha_config config = p.config;
    auto f = [config](tape<double>&, const std::vector<var<double>>& x) {
        mha_weights<double> w{x[3], x[4], x[5], x[6]};
        return multi_head_attention(x[0], x[1], x[2], w, config, {nullptr, true}).output;
    };
    auto report = gradcheck(f, {p.xq, p.xk, p.xv, p.w_q, p.w_k, p.w_v, p.w_o});
    INFO(report.summary());
    CHECK(report.ok);
}

TEST_CASE("cross-attention with Tq < Tk and Tq > Tk, plain and causal (bottom-right)")
{
    for (auto [tq, tk] : {std::pair<std::size_t, std::size_t>{3, 6}, {6, 3}})
    {
        for (bool causal : {false, true})
        {
            CAPTURE(tq);
            CAPTURE(causal);
            auto p = make_mha_problem<double>(2, tq, tk, 6, 2, 0, 10 + unsigned(tq));
            p.causal = causal;
            check_three_way(p);
        }
    }
}

TEST_CASE("causal mask is bottom-right aligned: query i sees key j iff j <= i + (Tk - Tq)")
{
    auto p = make_mha_problem<double>(1, 3, 5, 4, 2);
    p.causal = true;
    const auto g = tape_gradients(p);
    for (std::size_t h = 0; h < 2; ++h)
    {
        for (std::size_t i = 0; i < 3; ++i)
        {
            double row = 0;
            for (std::size_t j = 0; j < 5; ++j)
            {
                const double w = g.attention(0, h, i, j);
                row += w;
                if (j > i + 2)
                {
                    CHECK(w == 0.0);
                }
                else
                {
                    CHECK(w > 0.0);
                }
            }
            CHECK(row == doctest::Approx(1.0));
        }
    }
    // Tq > Tk: the first Tq - Tk queries see no key at all: zero weights, zero output rows before W_O.
    auto q = make_mha_problem<double>(1, 5, 2, 4, 2);
    q.causal = true;
    const auto gq = tape_gradients(q);
    for (std::size_t i = 0; i < 3; ++i)
    {
        for (std::size_t j = 0; j < 2; ++j)
        {
            CHECK(gq.attention(0, 0, i, j) == 0.0);
        }
        for (std::size_t c = 0; c < 4; ++c)
        {
            CHECK(gq.output(0, i, c) == 0.0);  // Y row = 0 W_O = 0
        }
    }
    CHECK(causal_mask(2, 2) == mask_t{{true, false}, {true, true}});
}

TEST_CASE("padding masks per batch, rows fully masked by padding and by causal + padding")
{
    auto p = make_mha_problem<double>(3, 4, 4, 4, 2, 0, 7);
    p.mask = padding_mask({4, 2, 0}, 4);  // sequence 2 has no key at all
    check_three_way(p);
    const auto g = tape_gradients(p);
    for (std::size_t i = 0; i < 4; ++i)
    {
        for (std::size_t j = 0; j < 4; ++j)
        {
            CHECK(g.attention(2, 1, i, j) == 0.0);
            if (j >= 2)
            {
                CHECK(g.attention(1, 0, i, j) == 0.0);
            }
        }
    }
    CHECK(xt::all(xt::equal(xt::view(g.output, 2), 0.0)));
    CHECK(xt::all(xt::equal(xt::view(g.grads[0], 2), 0.0)));  // fully masked rows give no gradient to Xq

    // causal + padding whose first key is padding: query 0 of sequence 1 keeps nothing.
    auto c = make_mha_problem<double>(2, 3, 3, 4, 2, 0, 9);
    mask_t pad = mask_t::from_shape({2, 1, 1, 3});
    pad.fill(true);
    pad(1, 0, 0, 0) = false;
    c.mask = pad;
    c.causal = true;
    check_three_way(c);
    const auto gc = tape_gradients(c);
    CHECK(gc.attention(1, 0, 0, 0) == 0.0);
    CHECK(xt::all(xt::equal(xt::view(gc.output, 1, 0), 0.0)));
    CHECK(xt::all(xt::equal(xt::view(gc.grads[0], 1, 0), 0.0)));
}

TEST_CASE("an all-false mask gives zeros everywhere and no NaN")
{
    auto p = make_mha_problem<double>(2, 3, 4, 4, 2);
    p.mask = mask_t(xt::zeros<bool>({std::size_t(3), std::size_t(4)}));
    check_three_way(p, false);
    const auto g = tape_gradients(p);
    CHECK(xt::all(xt::equal(g.output, 0.0)));
    CHECK(xt::all(xt::equal(g.attention, 0.0)));
    for (std::size_t k = 0; k < 7; ++k)
    {
        CHECK(xt::all(xt::equal(g.grads[k], 0.0)));
    }
}

TEST_CASE("logits around 1e3 stay finite and the paths still agree")
{
    auto p = make_mha_problem<double>(1, 4, 4, 4, 2, 0, 3, 60.0);  // scores of order 1e3
    p.causal = true;
    const auto g = tape_gradients(p);
    CHECK(all_finite(g.output));
    CHECK(xt::amax(xt::abs(g.attention))() <= 1.0);
    check_three_way(p, false);
}

TEST_CASE("edge sizes: H = 1, dh = 1, T = 1, B = 1")
{
    check_three_way(make_self_mha_problem<double>(2, 3, 4, 1));    // H = 1
    check_three_way(make_self_mha_problem<double>(2, 3, 3, 3));    // dh = 1
    check_three_way(make_mha_problem<double>(2, 1, 1, 4, 2));      // T = 1
    check_three_way(make_mha_problem<double>(1, 1, 3, 4, 2, 0, 5));  // B = 1, Tq = 1
}

TEST_CASE("grouped-query and multi-query attention: tape = manual = finite differences")
{
    check_three_way(make_mha_problem<double>(2, 3, 4, 8, 4, 2));  // G = 2
    auto mqa = make_mha_problem<double>(1, 4, 4, 8, 4, 1);        // G = 1
    mqa.causal = true;
    check_three_way(mqa);
}

TEST_CASE("bad configurations and shapes throw, naming the problem")
{
    tape<double> t;
    auto x = t.input(xt::zeros<double>({2, 3, 6}));
    auto w = t.input(xt::zeros<double>({6, 6}));
    mha_weights<double> weights{w, w, w, w};
    CHECK_THROWS_WITH_AS(self_attention(x, weights, {6, 4}), doctest::Contains("not divisible by heads 4"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(self_attention(x, weights, {6, 3, 2}), doctest::Contains("not divisible by kv_heads 2"),
                         std::invalid_argument);
    auto wrong = t.input(xt::zeros<double>({6, 5}));
    CHECK_THROWS_WITH_AS(self_attention(x, {w, wrong, w, w}, {6, 2}), doctest::Contains("W_K must be (6, 6), got (6, 5)"),
                         std::invalid_argument);
    mask_t bad = mask_t(xt::ones<bool>({std::size_t(4), std::size_t(3)}));
    CHECK_THROWS_WITH_AS(self_attention(x, weights, {6, 2}, {&bad, false}),
                         doctest::Contains("mask of shape (4, 3) does not broadcast"), std::invalid_argument);
    array<double> xa = xt::zeros<double>({2, 3, 6}), wa = xt::zeros<double>({6, 6});
    CHECK_THROWS_WITH_AS(manual::mha_forward(xa, xa, xa, wa, wa, wa, wa, mha_config{6, 4}),
                         doctest::Contains("not divisible"), std::invalid_argument);
}

TEST_CASE("float32 agrees with float64 to float32 rounding")
{
    auto p64 = make_mha_problem<double>(2, 4, 5, 8, 2);
    p64.causal = true;
    const problem<float> p32 = test::cast_problem<float>(p64);
    const auto g64 = tape_gradients(p64);
    const auto g32 = tape_gradients(p32);
    const auto m32 = manual_gradients(p32);
    CHECK(max_rel_diff<double>(xt::cast<double>(g32.output), g64.output) < 1e-5);
    for (std::size_t k = 0; k < 7; ++k)
    {
        CAPTURE(names[k]);
        CHECK(max_rel_diff<double>(xt::cast<double>(g32.grads[k]), g64.grads[k]) < 1e-4);
        CHECK(max_rel_diff<float>(g32.grads[k], m32.grads[k]) < 1e-5);
    }
}

TEST_CASE("counting: 4 d^2 parameters and the tape's multiply-adds equal (20.5) exactly")
{
    CHECK(parameter_count(16) == 4 * 16 * 16);
    CHECK(parameter_count(mha_config{16, 4, 4}) == 4 * 16 * 16);
    CHECK(parameter_count(mha_config{16, 4, 1}) == 2 * 16 * 16 + 2 * 16 * 4);  // G dh = 4
    CHECK(self_attention_multiply_adds(2, 5, 8) == 4 * 2 * 5 * 64 + 2 * 2 * 25 * 8);

    std::uint64_t counted = 0;
    auto s = make_self_mha_problem<double>(2, 5, 8, 2);
    s.causal = true;  // masked entries are still counted: dense computation
    tape_gradients(s, &counted);
    CHECK(counted == self_attention_multiply_adds(2, 5, 8));

    auto c = make_mha_problem<double>(3, 4, 7, 8, 4);
    tape_gradients(c, &counted);
    CHECK(counted == 2ull * 3 * 4 * 64 + 2ull * 3 * 7 * 64 + 2ull * 3 * 4 * 7 * 8);
    CHECK(counted == cross_attention_multiply_adds(3, 4, 7, c.config));

    auto g = make_mha_problem<double>(2, 3, 5, 8, 4, 2);  // GQA: K, V projections are d x (G dh)
    tape_gradients(g, &counted);
    CHECK(counted == 2ull * 2 * 3 * 64 + 2ull * 2 * 5 * 8 * 4 + 2ull * 2 * 3 * 5 * 8);
    CHECK(counted == cross_attention_multiply_adds(2, 3, 5, g.config));
}

TEST_CASE("parameters: a fresh tape per step, gradients accumulate until zero_grad")
{
    auto params = mha_parameters<double>::init({8, 2}, 3);
    const array<double> x = test::normal_array<double>({2, 3, 8}, 4);
    auto step = [&] {
        tape<double> t;
        auto w = bind(t, params);
        auto y = self_attention(t.input(x, "X", false), w, params.config, {nullptr, true}).output;
        t.backward(ops::sum(y));
    };
    step();
    const array<double> once = params.W_Q.grad();
    CHECK(xt::amax(xt::abs(once))() > 0);
    step();
    CHECK(max_rel_diff<double>(params.W_Q.grad(), 2.0 * once) < 1e-14);
    params.zero_grad();
    CHECK(xt::all(xt::equal(params.W_Q.grad(), 0.0)));
}

TEST_CASE("two threads give the same gradients as one")
{
    auto p = make_mha_problem<double>(4, 64, 80, 128, 4);  // large enough to split GEMMs and softmax rows
    p.causal = true;
    const auto one = tape_gradients(p);
    set_num_threads(2);
    tape_gradients(p);
    set_num_threads(1);  // shrinking and growing the pool again must not replay an old job
    set_num_threads(2);
    const auto two = tape_gradients(p);
    const auto manual = manual_gradients(p);
    set_num_threads(1);
    CHECK(max_rel_diff(one.output, two.output) < 1e-14);
    for (std::size_t k = 0; k < 7; ++k)
    {
        CAPTURE(names[k]);
        CHECK(max_rel_diff(one.grads[k], two.grads[k]) < 1e-14);
        CHECK(max_rel_diff(manual.grads[k], two.grads[k]) < 1e-12);
    }
}

TEST_CASE("two user threads can share the thread pool")
{
    auto p = make_mha_problem<double>(4, 64, 80, 128, 4);
    p.causal = true;
    const auto expected = tape_gradients(p);
    set_num_threads(2);
    std::vector<gradients<double>> results(2);
    std::thread first([&] { results[0] = tape_gradients(p); });
    std::thread second([&] { results[1] = tape_gradients(p); });
    first.join();
    second.join();
    set_num_threads(1);
    for (const auto& r : results)
    {
        for (std::size_t k = 0; k < 7; ++k)
        {
            CHECK(max_rel_diff(r.grads[k], expected.grads[k]) < 1e-14);
        }
    }
}

TEST_CASE("NaN in an input propagates the same way through tape and manual")
{
    auto p = make_mha_problem<double>(1, 2, 3, 4, 2);
    p.xk(0, 1, 2) = std::numeric_limits<double>::quiet_NaN();  // key 1 of every head's scores
    const auto tape = tape_gradients(p);
    const auto manual = manual_gradients(p);
    for (std::size_t h = 0; h < 2; ++h)
    {
        for (std::size_t i = 0; i < 2; ++i)
        {
            for (std::size_t j = 0; j < 3; ++j)
            {
                CHECK(std::isnan(tape.attention(0, h, i, j)));
                CHECK(std::isnan(manual.attention(0, h, i, j)));
            }
        }
    }
}
}  // namespace test_mha
