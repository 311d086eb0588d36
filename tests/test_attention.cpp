// The fused attention op (ops::attention, kernels/attention.cpp) against the composed graph and the
// hand-derived MHA backward (models::manual), for every mask case of docs/spec.md: float64 to 1e-12 relative,
// central differences, float32 against float64, the memory it saves for backward, the causal tiles it
// skips, errors, NaN, large logits and threads.
#include <doctest/doctest.h>

#include "mha_problem.hpp"
#include "test_util.hpp"

#include <cmath>
#include <limits>
#include <optional>

#include "kernels/parallel.hpp"
#include "models/mha_manual.hpp"

namespace test_attention
{
using namespace xgrad;
using namespace xgrad::models;

namespace
{
template <class T>
using problem = test::mha_problem<T>;
using test::make_mha_problem;

// Y and the gradients of Xq, Xk, Xv, W_Q, W_K, W_V, W_O (self: X's in slot 0, slots 1 and 2 empty).
template <class T>
struct result
{
    array<T> output;
    std::vector<array<T>> grads;
    std::size_t saved_bytes = 0;
};

template <class T>
result<T> tape_result(const problem<T>& p, bool fused)
{
    tape<T> t;
    var<T> xq = t.input(p.xq), xk = p.self ? xq : t.input(p.xk), xv = p.self ? xq : t.input(p.xv);
    mha_weights<T> w{t.input(p.w_q), t.input(p.w_k), t.input(p.w_v), t.input(p.w_o)};
    mha_result<T> r = multi_head_attention(xq, xk, xv, w, p.config, p.options(fused));
    CHECK(r.attention.valid() == !fused);
    result<T> out{r.output.value(), {}, t.bytes_saved_for_backward(false)};
    t.backward(r.output, p.grad_y);
    out.grads = {xq.grad(), p.self ? array<T>() : xk.grad(), p.self ? array<T>() : xv.grad(),
                 w.W_Q.grad(), w.W_K.grad(), w.W_V.grad(), w.W_O.grad()};
    return out;
}

result<double> manual_result(const problem<double>& p)
{
    auto f = manual::mha_forward(p.xq, p.xk, p.xv, p.w_q, p.w_k, p.w_v, p.w_o, p.config, p.options(false));
    auto g = manual::mha_backward(p.grad_y, f.cache);
    result<double> out{f.output, {}};
    if (p.self)
    {
        out.grads = {array<double>(g.xq + g.xk + g.xv), array<double>(), array<double>(), g.w_q, g.w_k, g.w_v, g.w_o};
    }
    else
    {
        out.grads = {g.xq, g.xk, g.xv, g.w_q, g.w_k, g.w_v, g.w_o};
    }
    return out;
}

// max |a - b| / max(|a|, |b|) over the whole tensor.
template <class A, class B>
double max_rel_diff(const array<A>& a, const array<B>& b)
{
    REQUIRE(test::shapes_equal(a, b));
    double diff = 0, scale = 1e-300;
    for (std::size_t i = 0; i < a.size(); ++i)
    {
        const double x = static_cast<double>(a.flat(i)), y = static_cast<double>(b.flat(i));
        diff = std::isnan(x - y) ? INFINITY : std::max(diff, std::abs(x - y));
        scale = std::max({scale, std::abs(x), std::abs(y)});
    }
    return a.size() ? diff / scale : 0.0;
}

const char* const names[] = {"Xq", "Xk", "Xv", "W_Q", "W_K", "W_V", "W_O"};

// fused tape = composed tape = manual backward, to `tolerance` relative, no NaN anywhere.
void check_fused(const problem<double>& p, double tolerance = 1e-12)
{
    const auto fused = tape_result(p, true);
    const auto composed = tape_result(p, false);
    const auto manual = manual_result(p);
    CHECK(test::all_finite(fused.output));
    CHECK(max_rel_diff(fused.output, composed.output) < tolerance);
    CHECK(max_rel_diff(fused.output, manual.output) < tolerance);
    for (std::size_t k = 0; k < 7; ++k)
    {
        if (fused.grads[k].size() == 0 && composed.grads[k].size() == 0)
        {
            continue;  // self-attention: X's gradient is in slot 0
        }
        CAPTURE(names[k]);
        CHECK(test::all_finite(fused.grads[k]));
        CHECK(max_rel_diff(fused.grads[k], composed.grads[k]) < tolerance);
        CHECK(max_rel_diff(fused.grads[k], manual.grads[k]) < tolerance);
    }
}

// The op alone on (B, H, Tq, dh) and (B, G, Tk, dh) inputs, against models::attention (the composed
// graph on the same q, k, v) with the combined mask; returns the fused output for further checks.
array<double> check_op(std::size_t B, std::size_t H, std::size_t G, std::size_t Tq, std::size_t Tk, std::size_t dh,
                       const mask_t* mask, bool causal, unsigned seed, double tolerance = 1e-12)
{
    const auto q0 = test::normal_array<double>({B, H, Tq, dh}, seed);
    const auto k0 = test::normal_array<double>({B, G, Tk, dh}, seed + 1);
    const auto v0 = test::normal_array<double>({B, G, Tk, dh}, seed + 2);
    const auto g0 = test::normal_array<double>({B, H, Tq, dh}, seed + 3);
    std::vector<array<double>> grads[2];
    array<double> outputs[2];
    for (int fused = 0; fused < 2; ++fused)
    {
        tape<double> t;
        var<double> q = t.input(q0), k = t.input(k0), v = t.input(v0);
        var<double> out;
        if (fused)
        {
            out = ops::attention(q, k, v, mask, causal);
        }
        else
        {
            const auto combined = combined_mask("attention", mask, causal, B, H, Tq, Tk);
            out = models::attention(q, k, v, combined ? &*combined : nullptr).first;
        }
        outputs[fused] = out.value();
        t.backward(out, g0);
        grads[fused] = {q.grad(), k.grad(), v.grad()};
    }
    CHECK(test::all_finite(outputs[1]));
    CHECK(max_rel_diff(outputs[1], outputs[0]) < tolerance);
    for (std::size_t i = 0; i < 3; ++i)
    {
        CAPTURE(i);
        CHECK(test::all_finite(grads[1][i]));
        CHECK(max_rel_diff(grads[1][i], grads[0][i]) < tolerance);
    }
    return outputs[1];
}
}  // namespace

TEST_CASE("fused attention = composed graph = hand-derived backward: no mask, causal with Tq = Tk, Tq < Tk, Tq > Tk")
{
    SUBCASE("no mask, cross-attention") { check_fused(make_mha_problem<double>(2, 5, 7, 8, 2)); }
    SUBCASE("causal self-attention")
    {
        auto p = test::make_self_mha_problem<double>(2, 6, 8, 2);
        p.causal = true;
        check_fused(p);
    }
    SUBCASE("causal, Tq < Tk (every row sees Tk - Tq extra keys)")
    {
        auto p = make_mha_problem<double>(2, 3, 7, 8, 2);
        p.causal = true;
        check_fused(p);
    }
    SUBCASE("causal, Tq > Tk (the first Tq - Tk rows see nothing)")
    {
        auto p = make_mha_problem<double>(2, 7, 3, 8, 2);
        p.causal = true;
        check_fused(p);
    }
}

TEST_CASE("fused attention: padding masks, fully masked rows and an all-false mask")
{
    SUBCASE("padding (B, 1, 1, Tk) with a sequence of length 0")
    {
        auto p = make_mha_problem<double>(3, 4, 6, 8, 2);
        p.mask = padding_mask({6, 0, 2}, 6);
        check_fused(p);
    }
    SUBCASE("causal AND padding: rows fully masked by the combination")
    {
        auto p = make_mha_problem<double>(2, 6, 6, 8, 2);
        p.mask = padding_mask({3, 5}, 6);
        p.causal = true;
        check_fused(p);
    }
    SUBCASE("a (Tq, Tk) mask with one fully false row")
    {
        auto p = make_mha_problem<double>(2, 5, 6, 8, 2);
        mask_t m = test::random_mask({5, 6}, 11);
        for (std::size_t j = 0; j < 6; ++j)
        {
            m(2, j) = false;
        }
        p.mask = m;
        check_fused(p);
    }
    SUBCASE("all-false mask: output 0 before W_O, every input gradient 0")
    {
        auto p = make_mha_problem<double>(2, 4, 5, 8, 2);
        p.mask = test::full_mask({4, 5}, false);
        check_fused(p);
        const auto fused = tape_result(p, true);
        CHECK(test::max_abs(fused.output) == 0.0);
        for (std::size_t k : {0u, 1u, 2u, 3u, 4u, 5u, 6u})
        {
            CAPTURE(names[k]);
            CHECK(test::max_abs(fused.grads[k]) == 0.0);
        }
    }
}

TEST_CASE("fused attention: grouped-query (G = 2) and multi-query (G = 1) attention")
{
    for (std::size_t g : {1u, 2u})
    {
        CAPTURE(g);
        auto p = make_mha_problem<double>(2, 5, 7, 8, 4, g);
        p.causal = true;
        p.mask = padding_mask({7, 4}, 7);
        check_fused(p);
        check_op(2, 4, g, 9, 6, 3, nullptr, true, 40 + g);
    }
}

TEST_CASE("fused attention over several tiles: online softmax across key tiles, causal tiles skipped")
{
    // Tiles are 64 x 64: these sizes make partial tiles, rows that become visible mid-way, and skips.
    check_op(1, 2, 2, 150, 150, 5, nullptr, true, 1);
    check_op(1, 2, 1, 70, 200, 4, nullptr, true, 2);
    check_op(1, 2, 2, 200, 70, 4, nullptr, true, 3);
    check_op(2, 2, 2, 130, 130, 3, nullptr, false, 4);
    const mask_t padding = padding_mask({190, 0}, 200);
    check_op(2, 2, 2, 130, 200, 3, &padding, true, 5);
    mask_t random = test::random_mask({1, 2, 100, 140}, 6, 0.3);
    check_op(1, 2, 1, 100, 140, 4, &random, false, 7);
}

TEST_CASE("fused attention passes gradcheck (float64 central differences) with a mask and causal")
{
    const mask_t m = padding_mask({4, 2}, 4);
    auto f = [&m](tape<double>&, const std::vector<var<double>>& x) {
        return ops::attention(x[0], x[1], x[2], &m, true);
    };
    XGRAD_CHECK_GRADIENTS(f, {test::normal_array<double>({2, 4, 3, 3}, 1), test::normal_array<double>({2, 2, 4, 3}, 2),
                              test::normal_array<double>({2, 2, 4, 3}, 3)});
    auto plain = [](tape<double>&, const std::vector<var<double>>& x) { return ops::attention(x[0], x[1], x[2]); };
    XGRAD_CHECK_GRADIENTS(plain, {test::normal_array<double>({1, 2, 5, 2}, 4),
                                  test::normal_array<double>({1, 2, 3, 2}, 5),
                                  test::normal_array<double>({1, 2, 3, 2}, 6)});
}

TEST_CASE("fused attention in float32 agrees with float64")
{
    auto p64 = make_mha_problem<double>(2, 70, 90, 16, 4, 2);
    p64.causal = true;
    p64.mask = padding_mask({90, 50}, 90);
    const problem<float> p32 = test::cast_problem<float>(p64);
    const auto r32 = tape_result(p32, true);
    const auto r64 = tape_result(p64, true);
    CHECK(max_rel_diff(r32.output, r64.output) < 1e-5);
    for (std::size_t k = 0; k < 7; ++k)
    {
        CAPTURE(names[k]);
        CHECK(max_rel_diff(r32.grads[k], r64.grads[k]) < 1e-4);
    }
}

TEST_CASE("fused attention saves O(B H T) for backward: the output and one log-sum-exp per row")
{
    const std::size_t B = 2, H = 4, G = 2, Tq = 96, dh = 8;
    auto saved = [&](std::size_t Tk) {
        tape<double> t;
        var<double> q = t.input(test::normal_array<double>({B, H, Tq, dh}, 1));
        var<double> k = t.input(test::normal_array<double>({B, G, Tk, dh}, 2));
        var<double> v = t.input(test::normal_array<double>({B, G, Tk, dh}, 3));
        ops::attention(q, k, v, nullptr, true);
        return t.bytes_saved_for_backward(false);  // q, k, v are leaves: only what the op made
    };
    const std::size_t expected = (B * H * Tq * dh + B * H * Tq) * sizeof(double);  // O and lse
    CHECK(saved(96) == expected);
    CHECK(saved(960) == expected);  // independent of Tk: no (Tq, Tk) weights kept

    // Inside MHA: the composed graph keeps the weights P (B, H, T, T) and its joined heads, a copy of its
    // output; the fused op keeps lse, and its token-major output is itself what the W_O product reads.
    const std::size_t T = 96, d = 32, heads = 4;
    auto p = make_mha_problem<double>(B, T, T, d, heads);
    p.causal = true;
    const auto fused = tape_result(p, true);
    const auto composed = tape_result(p, false);
    CHECK(composed.saved_bytes - fused.saved_bytes == (B * heads * T * T - B * heads * T) * 8);
    CHECK(fused.saved_bytes * 3 < composed.saved_bytes);
}

TEST_CASE("fused attention does the work of the tiles it visits: causal skips the upper key tiles")
{
    const std::size_t B = 1, H = 2, T = 256, dh = 16;
    auto multiply_adds = [&](bool causal) {
        tape<double> t;
        var<double> q = t.input(test::normal_array<double>({B, H, T, dh}, 1));
        var<double> k = t.input(test::normal_array<double>({B, H, T, dh}, 2));
        var<double> v = t.input(test::normal_array<double>({B, H, T, dh}, 3));
        return ops::attention(q, k, v, nullptr, causal).node().multiply_adds;
    };
    // 64-row query tiles: the keys below the diagonal in products of all 64 rows (0, 64, 128, 192 keys),
    // the diagonal tile in 16-row strips of 16, 32, 48, 64 keys (kernels/attention.cpp).
    CHECK(multiply_adds(false) == 2ull * B * H * T * T * dh);
    CHECK(multiply_adds(true) == 2ull * B * H * (64 * (0 + 64 + 128 + 192) + 4 * 16 * (16 + 32 + 48 + 64)) * dh);
}

TEST_CASE("fused attention: bad shapes and masks throw, naming the op")
{
    tape<double> t;
    auto q = t.input(test::normal_array<double>({2, 4, 3, 5}, 1));
    auto k = t.input(test::normal_array<double>({2, 2, 6, 5}, 2));
    auto v3 = t.input(test::normal_array<double>({2, 3, 6, 5}, 3));
    auto k3 = t.input(test::normal_array<double>({2, 3, 6, 5}, 4));
    auto flat = t.input(test::normal_array<double>({2, 6, 5}, 5));
    CHECK_THROWS_WITH_AS(ops::attention(q, k, v3), doctest::Contains("attention"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::attention(q, k3, k3), doctest::Contains("multiple of key/value heads"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::attention(q, flat, flat), doctest::Contains("(B, H, Tq, dh)"), std::invalid_argument);
    const mask_t wrong = test::full_mask({4, 6}, true);
    CHECK_THROWS_WITH_AS(ops::attention(q, k, k, &wrong), doctest::Contains("does not broadcast"),
                         std::invalid_argument);
    auto p = make_mha_problem<double>(2, 3, 6, 8, 2);
    p.mask = wrong;
    CHECK_THROWS_WITH_AS(tape_result(p, true), doctest::Contains("multi_head_attention"), std::invalid_argument);
}

TEST_CASE("fused attention: large logits stay finite, NaN in a query propagates to its row only")
{
    SUBCASE("logits around 1e3")
    {
        auto p = make_mha_problem<double>(2, 5, 6, 8, 2, 0, 3, 30.0);
        p.causal = true;
        const auto fused = tape_result(p, true);
        const auto composed = tape_result(p, false);
        CHECK(test::all_finite(fused.output));
        CHECK(max_rel_diff(fused.output, composed.output) < 1e-11);  // exp amplifies the logits' rounding
        // A saturated softmax has dS = P (dP - D) with dP - D ~ 0 at the winning key: both paths lose the
        // same digits to that cancellation, but compute D differently (sum_j P dP against dO . O), so
        // their gradients agree only to ~1e-6 of the gradient's (tiny) size here.
        for (std::size_t k = 0; k < 7; ++k)
        {
            CAPTURE(names[k]);
            CHECK(test::all_finite(fused.grads[k]));
            CHECK(max_rel_diff(fused.grads[k], composed.grads[k]) < 1e-4);
        }
    }
    SUBCASE("NaN")
    {
        auto q0 = test::normal_array<double>({1, 2, 4, 3}, 1);
        q0(0, 1, 2, 0) = std::numeric_limits<double>::quiet_NaN();
        tape<double> t;
        var<double> q = t.input(q0), k = t.input(test::normal_array<double>({1, 2, 5, 3}, 2)),
                    v = t.input(test::normal_array<double>({1, 2, 5, 3}, 3));
        const array<double> out = ops::attention(q, k, v, nullptr, true).value();
        for (std::size_t h = 0; h < 2; ++h)
        {
            for (std::size_t i = 0; i < 4; ++i)
            {
                CAPTURE(h);
                CAPTURE(i);
                CHECK(std::isnan(out(0, h, i, 0)) == (h == 1 && i == 2));
            }
        }
    }
}

TEST_CASE("fused attention: two threads give bit-identical results to one")
{
    const std::size_t B = 2, H = 4, G = 2, T = 300, dh = 16;
    const auto q0 = test::normal_array<double>({B, H, T, dh}, 1);
    const auto k0 = test::normal_array<double>({B, G, T, dh}, 2);
    const auto v0 = test::normal_array<double>({B, G, T, dh}, 3);
    const auto g0 = test::normal_array<double>({B, H, T, dh}, 4);
    auto run = [&] {
        tape<double> t;
        var<double> q = t.input(q0), k = t.input(k0), v = t.input(v0);
        var<double> out = ops::attention(q, k, v, nullptr, true);
        t.backward(out, g0);
        return std::vector<array<double>>{out.value(), q.grad(), k.grad(), v.grad()};
    };
    const auto one = run();
    set_num_threads(2);
    const auto two = run();
    set_num_threads(1);
    for (std::size_t i = 0; i < one.size(); ++i)
    {
        CAPTURE(i);
        CHECK(max_rel_diff(one[i], two[i]) == 0.0);
    }
}
}  // namespace test_attention
