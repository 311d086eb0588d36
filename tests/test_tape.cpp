// The tape: gradients of reused inputs, deep graphs, releasing and retaining the graph, stale and foreign
// handles, seeds, parameters, the no-grad guard, sum_to and introspection.
#include <doctest/doctest.h>

#include <random>
#include <stdexcept>

#include "autodiff/record.hpp"
#include "test_util.hpp"

namespace test_tape
{
using namespace xgrad;
using namespace xgrad::test;

namespace
{
std::size_t count_of(const std::string& text, const std::string& part)
{
    std::size_t count = 0;
    for (auto pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + part.size()))
    {
        ++count;
    }
    return count;
}

// G W^T by loops: the gradient of sum(G * (X W)) with respect to X.
f64 times_transposed(const f64& G, const f64& W)
{
    const std::size_t m = G.shape()[0], n = G.shape()[1], k = W.shape()[0];
    f64 out = filled<double>({m, k}, 0.0);
    for (std::size_t i = 0; i < m; ++i)
    {
        for (std::size_t q = 0; q < k; ++q)
        {
            for (std::size_t j = 0; j < n; ++j)
            {
                out(i, q) += G(i, j) * W(q, j);
            }
        }
    }
    return out;
}
}  // namespace

// ---- leaves and a first composite -------------------------------------------------------------------

TEST_CASE("leaves: input, constant, param; a composite with hand-computed value and gradients")
{
    tape<double> t;
    const f64 A = {{1.0, 2.0}, {3.0, 4.0}};
    const f64 B = {{1.0, 0.0}, {2.0, 0.0}};
    auto a = t.input(A, "a");
    auto b = t.input(B);
    CHECK(a.requires_grad());
    CHECK(b.requires_grad());
    CHECK_FALSE(t.constant(A).requires_grad());
    CHECK_FALSE(t.input(A, "frozen", false).requires_grad());
    CHECK(std::string(a.op()) == "input");
    CHECK(a.value() == A);
    CHECK(a.shape() == shape_t{2, 2});

    // L = sum((A B) * A).  AB = [[5, 0], [11, 0]], so L = 5 + 33 = 38.
    // dL/dA = AB + A B^T = [[5, 0], [11, 0]] + [[1, 2], [3, 6]];  dL/dB = A^T A.
    auto y = ops::sum(ops::matmul(a, b) * a);
    CHECK(y.value()() == 38.0);
    t.backward(y);
    const f64 dA = {{6.0, 2.0}, {14.0, 6.0}};
    const f64 dB = {{10.0, 14.0}, {14.0, 20.0}};
    CHECK(a.grad() == dA);
    CHECK(b.grad() == dB);
}

TEST_CASE("a gradient that reaches no input is zeros of the value's shape")
{
    tape<double> t;
    auto x = t.input(random_array({2, 3}, 1));
    auto unused = t.input(random_array({4}, 2));
    t.backward(ops::sum(ops::exp(x)));
    CHECK(unused.grad() == filled<double>({4}, 0.0));
}

// ---- reuse -----------------------------------------------------------------------------------------

TEST_CASE("reuse: a + a, b = a + a then c = b + b, x * x")
{
    const f64 X = random_array({2, 3}, 10);
    SUBCASE("a + a")
    {
        tape<double> t;
        auto a = t.input(X);
        t.backward(ops::sum(a + a));
        CHECK(a.grad() == filled<double>({2, 3}, 2.0));
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& x) { return x[0] + x[0]; }, {X});
    }
    SUBCASE("b = a + a, c = b + b")
    {
        tape<double> t;
        auto a = t.input(X);
        auto b = a + a;
        auto c = b + b;
        t.backward(ops::sum(c));
        CHECK(a.grad() == filled<double>({2, 3}, 4.0));
        XGRAD_CHECK_GRADIENTS(
            [](tape<double>&, const vars& x)
            {
                auto b = x[0] + x[0];
                return b + b;
            },
            {X});
    }
    SUBCASE("x * x")
    {
        tape<double> t;
        auto x = t.input(X);
        t.backward(ops::sum(x * x));
        XGRAD_CHECK_CLOSE(x.grad(), ref_unary<double>(X, [](double v) { return 2 * v; }), 0.0, 0.0);
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return v[0] * v[0]; }, {X});
    }
    SUBCASE("x * x * x through two nodes")
    {
        tape<double> t;
        auto x = t.input(X);
        t.backward(ops::sum(x * x * x));
        XGRAD_CHECK_CLOSE(x.grad(), ref_unary<double>(X, [](double v) { return 3 * v * v; }), 1e-15, 1e-15);
    }
}

TEST_CASE("reuse: one input feeding three matmuls receives the sum of the three gradients")
{
    const f64 X = random_array({3, 4}, 20);
    const std::vector<f64> W = {random_array({4, 2}, 21), random_array({4, 5}, 22), random_array({4, 3}, 23)};
    const std::vector<f64> G = {random_array({3, 2}, 24), random_array({3, 5}, 25), random_array({3, 3}, 26)};

    tape<double> t;
    auto x = t.input(X);
    var<double> loss;
    for (std::size_t i = 0; i < 3; ++i)
    {
        auto term = ops::sum(ops::matmul(x, t.constant(W[i])) * t.constant(G[i]));
        loss = i == 0 ? term : loss + term;
    }
    t.backward(loss);
    // dL/dX = G1 W1^T + G2 W2^T + G3 W3^T
    f64 expected = filled<double>({3, 4}, 0.0);
    for (std::size_t i = 0; i < 3; ++i)
    {
        expected += times_transposed(G[i], W[i]);
    }
    XGRAD_CHECK_CLOSE(x.grad(), expected, 1e-13, 1e-14);

    XGRAD_CHECK_GRADIENTS(
        [](tape<double>&, const vars& v)
        {
            return ops::sum(ops::tanh(ops::matmul(v[0], v[1]))) +
                   ops::sum(ops::matmul(v[0], v[2]) * ops::matmul(v[0], v[3]));
        },
        {X, W[0], random_array({4, 2}, 27), random_array({4, 2}, 28)});
}

TEST_CASE("reuse inside one matmul: x x^T (self-attention's q = k = x)")
{
    // L = sum(G * X X^T):  dL/dX = (G + G^T) X
    const f64 X = random_array({3, 4}, 30);
    const f64 G = random_array({3, 3}, 31);
    tape<double> t;
    auto x = t.input(X);
    t.backward(ops::sum(ops::matmul(x, x, false, true) * t.constant(G)));
    f64 expected = filled<double>({3, 4}, 0.0);
    for (std::size_t i = 0; i < 3; ++i)
    {
        for (std::size_t j = 0; j < 3; ++j)
        {
            for (std::size_t q = 0; q < 4; ++q)
            {
                expected(i, q) += (G(i, j) + G(j, i)) * X(j, q);
            }
        }
    }
    XGRAD_CHECK_CLOSE(x.grad(), expected, 1e-13, 1e-14);
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::matmul(v[0], v[0], false, true); },
                          {X});
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::matmul(v[0], v[0], true, false); },
                          {X});
}

// ---- deep graphs and memory -------------------------------------------------------------------------

TEST_CASE("a chain of 100000 ops: backward without recursion; the tape frees what it saved")
{
    constexpr std::size_t length = 100000;
    tape<double> t;
    const f64 X = {{0.5, -1.0}, {2.0, 0.25}};
    auto x = t.input(X);
    auto step = t.constant(filled<double>({2, 2}, 0.5));
    auto one = t.constant(filled<double>({2, 2}, 1.0));
    var<double> y = x;
    for (std::size_t i = 0; i < length; ++i)
    {
        y = i % 2 == 0 ? y + step : y * one;  // mul saves both operands for backward
    }
    auto loss = ops::sum(y);
    CHECK(t.size() == length + 4);
    // y = x + 50000 * 0.5, exactly.
    CHECK(y.value() == ref_unary<double>(X, [](double v) { return v + 25000.0; }));
    CHECK(t.bytes_saved_for_backward() > 0);

    t.backward(loss);
    CHECK(x.grad() == filled<double>({2, 2}, 1.0));  // d/dx of (x + c) * 1 * ... is 1
    CHECK(t.bytes_saved_for_backward() == 0);
    CHECK(t.bytes_held() > 0);

    t.clear();
    CHECK(t.size() == 0);
    CHECK(t.bytes_held() == 0);
    CHECK(t.bytes_saved_for_backward() == 0);
}

TEST_CASE("bytes_held counts values and gradients; bytes_saved_for_backward the values rules read")
{
    tape<double> t;
    auto a = t.input(filled<double>({2, 3}, 1.0));
    auto b = t.input(filled<double>({3, 4}, 1.0));
    CHECK(t.bytes_held() == (6 + 12) * sizeof(double));
    CHECK(t.bytes_saved_for_backward() == 0);
    auto c = ops::matmul(a, b);  // saves both operands
    CHECK(t.bytes_held() == (6 + 12 + 8) * sizeof(double));
    CHECK(t.bytes_saved_for_backward() == (6 + 12) * sizeof(double));
    auto e = ops::exp(c);  // saves its output
    CHECK(t.bytes_saved_for_backward() == (6 + 12 + 8) * sizeof(double));
    auto s = ops::sum(e);
    t.backward(s);
    CHECK(t.bytes_saved_for_backward() == 0);
    CHECK(t.bytes_held() >= (6 + 12 + 8 + 8 + 1 + 6 + 12) * sizeof(double));  // values + leaf gradients
}

TEST_CASE("bytes_saved_for_backward counts what rules keep themselves, until the backward frees them")
{
    tape<double> t;
    auto logits = t.input(random_array({3, 5}, 41));
    std::mt19937_64 rng(7);
    auto kept = ops::dropout(logits, 0.5, rng);  // the rule keeps one bool per entry: 15 bytes
    CHECK(t.bytes_saved_for_backward(false) == 15);
    const ids_t targets = {0, 4, -1};
    // saves its input (15 entries); keeps per row its max, the log of the shifted sum and the target
    auto loss = ops::cross_entropy(kept, targets);
    const std::size_t per_row = 2 * sizeof(double) + sizeof(std::int64_t);
    CHECK(t.bytes_saved_for_backward(false) == 15 + 15 * sizeof(double) + 3 * per_row);
    CHECK(t.bytes_held() == (15 + 15 + 1) * sizeof(double) + 15 + 3 * per_row);
    t.backward(loss);
    CHECK(t.bytes_saved_for_backward() == 0);

    tape<double> u;
    auto x = u.input(random_array({3, 5}, 42));
    {
        auto guard = u.no_grad();
        ops::dropout(x, 0.5, rng);
        ops::cross_entropy(x, targets);
    }
    CHECK(u.bytes_saved_for_backward() == 0);  // no rule was recorded, so nothing is kept
}

TEST_CASE("bytes_saved_for_backward counts the ids embedding keeps and the mask attention keeps")
{
    tape<double> t;
    auto table = t.input(random_array({6, 4}, 43));
    const ids_t ids = {{1, 5, 0}, {2, 2, 3}};
    auto rows = ops::embedding(table, ids);  // saves no value of the tape's; its rule keeps the 6 ids
    CHECK(t.bytes_saved_for_backward(false) == 6 * sizeof(std::int64_t));
    auto q = t.input(random_array({1, 1, 3, 2}, 44)), k = t.input(random_array({1, 1, 3, 2}, 45));
    mask_t keep = xt::ones<bool>({3, 3});
    keep(0, 2) = false;
    auto o = ops::attention(q, k, k, &keep);  // saves leaves, O (6) and the lse (3); its rule keeps the mask
    const std::size_t attention_bytes = (6 + 3) * sizeof(double) + 9 * sizeof(bool);
    CHECK(t.bytes_saved_for_backward(false) == 6 * sizeof(std::int64_t) + attention_bytes);
    t.backward(ops::add(ops::sum(rows), ops::sum(o)));
    CHECK(t.bytes_saved_for_backward() == 0);
}

// ---- releasing and retaining the graph --------------------------------------------------------------

TEST_CASE("a second backward without retain_graph throws std::logic_error")
{
    tape<double> t;
    auto x = t.input(random_array({3}, 40));
    auto y = ops::sum(ops::tanh(x) * x);
    t.backward(y);
    CHECK_THROWS_AS(t.backward(y), std::logic_error);
}

TEST_CASE("backward with retain_graph twice: the same gradient, accumulated in the leaves")
{
    const f64 X = random_array({2, 3}, 50);
    const f64 W = random_array({3, 2}, 51);
    tape<double> t;
    auto x = t.input(X);
    auto w = t.input(W);
    auto h = ops::tanh(ops::matmul(x, w));
    auto loss = ops::sum(h * h);

    t.backward(loss, true);
    const f64 once_x = x.grad();
    const f64 once_w = w.grad();
    const f64 once_h = h.grad();  // interior gradients are kept when the graph is retained
    CHECK(once_h != filled<double>({2, 2}, 0.0));
    t.backward(loss, true);
    XGRAD_CHECK_CLOSE(x.grad(), ref_unary<double>(once_x, [](double v) { return 2 * v; }), 1e-15, 0.0);
    XGRAD_CHECK_CLOSE(w.grad(), ref_unary<double>(once_w, [](double v) { return 2 * v; }), 1e-15, 0.0);
    XGRAD_CHECK_CLOSE(h.grad(), once_h, 0.0, 0.0);  // interior gradients are recomputed, not summed

    // A third, final backward without retain_graph still works; a fourth does not.
    t.backward(loss);
    XGRAD_CHECK_CLOSE(x.grad(), ref_unary<double>(once_x, [](double v) { return 3 * v; }), 1e-15, 0.0);
    CHECK_THROWS_AS(t.backward(loss), std::logic_error);
}

TEST_CASE("two losses on one tape: backward of the later loss does not release the earlier loss's graph")
{
    const f64 X = random_array({2, 3}, 55);
    tape<double> t;
    auto x = t.input(X);
    auto first = ops::sum(ops::exp(x));    // dL1/dx = e^x
    auto second = ops::sum(ops::tanh(x));  // dL2/dx = 1 - tanh^2
    t.backward(second);
    XGRAD_CHECK_CLOSE(x.grad(),
                      ref_unary<double>(X, [](double v) { return 1 - std::tanh(v) * std::tanh(v); }), 1e-14,
                      1e-15);
    CHECK(t.bytes_saved_for_backward() == X.size() * sizeof(double));  // exp's output, still needed
    t.backward(first);
    XGRAD_CHECK_CLOSE(
        x.grad(),
        ref_unary<double>(X, [](double v) { return 1 - std::tanh(v) * std::tanh(v) + std::exp(v); }), 1e-14,
        1e-15);
    CHECK(t.bytes_saved_for_backward() == 0);
    CHECK_THROWS_AS(t.backward(first), std::logic_error);
    CHECK_THROWS_AS(t.backward(second), std::logic_error);
}

// ---- handles ---------------------------------------------------------------------------------------

TEST_CASE("a handle used after tape.clear() throws std::logic_error, even when its index is reused")
{
    tape<double> t;
    auto x = t.input(random_array({2}, 60));
    auto y = ops::exp(x);
    t.clear();
    CHECK_THROWS_AS(x.value(), std::logic_error);
    CHECK_THROWS_AS(y.grad(), std::logic_error);
    CHECK_THROWS_AS(y.shape(), std::logic_error);
    CHECK_THROWS_AS(ops::add(x, y), std::logic_error);
    CHECK_THROWS_AS(t.backward(y), std::logic_error);

    auto fresh = t.input(random_array({2}, 61));  // takes index 0 again
    REQUIRE(fresh.index() == x.index());
    CHECK_THROWS_AS(x.value(), std::logic_error);
    CHECK_THROWS_AS(ops::add(x, fresh), std::logic_error);
    CHECK(fresh.value().size() == 2);

    var<double> empty;
    CHECK_FALSE(empty.valid());
    CHECK_THROWS_AS(empty.value(), std::logic_error);
}

TEST_CASE("vars of two tapes do not mix")
{
    tape<double> t1, t2;
    auto a = t1.input(random_array({2, 2}, 70));
    auto b = t2.input(random_array({2, 2}, 71));
    CHECK_THROWS_AS(ops::add(a, b), std::invalid_argument);
    CHECK_THROWS_AS(ops::matmul(a, b), std::invalid_argument);
    CHECK_THROWS_AS(ops::mul(b, a), std::invalid_argument);
    CHECK_THROWS_AS(t1.backward(ops::sum(b)), std::invalid_argument);
    CHECK(t1.size() == 1);
    t2.backward(ops::sum(b));  // t2 itself is fine
    CHECK(b.grad() == filled<double>({2, 2}, 1.0));
}

// ---- seeds -----------------------------------------------------------------------------------------

TEST_CASE("backward needs one element or a seed of the root's shape")
{
    tape<double> t;
    const f64 X = random_array({2, 3}, 80);
    const f64 W = random_array({2, 3}, 81);
    auto x = t.input(X);
    auto y = x * t.constant(W);
    CHECK_THROWS_AS(t.backward(y), std::invalid_argument);
    CHECK_THROWS_AS(t.backward(y, filled<double>({3, 2}, 1.0)), std::invalid_argument);
    CHECK_THROWS_AS(t.backward(y, filled<double>({6}, 1.0)), std::invalid_argument);
    CHECK_THROWS_AS(t.backward(t.constant(X), X), std::invalid_argument);  // nothing requires a gradient

    const f64 seed = random_array({2, 3}, 82);
    t.backward(y, seed);
    XGRAD_CHECK_CLOSE(x.grad(), ref_binary<double>(seed, W, [](double s, double w) { return s * w; }), 0.0,
                      0.0);

    // A one-element root of any rank takes the implicit seed 1.
    tape<double> u;
    auto z = u.input(filled<double>({1, 1}, 3.0));
    u.backward(z * z);
    CHECK(z.grad() == filled<double>({1, 1}, 6.0));
}

// ---- parameters ------------------------------------------------------------------------------------

TEST_CASE("parameter: the gradient accumulates across tapes and backward calls until zero_grad")
{
    const f64 P = random_array({2, 3}, 90);
    const f64 X1 = random_array({2, 3}, 91), X2 = random_array({2, 3}, 92);
    parameter<double> p(P, "p");
    CHECK(p.name() == "p");
    CHECK(p.grad() == filled<double>({2, 3}, 0.0));
    {
        tape<double> t;
        auto w = t.param(p);
        CHECK(std::string(w.op()) == "param");
        t.backward(ops::sum(w * t.constant(X1)));  // dL/dp = X1
    }
    XGRAD_CHECK_CLOSE(p.grad(), X1, 0.0, 0.0);
    {
        tape<double> t;
        auto w = t.param(p);
        t.backward(ops::sum(w * t.constant(X2)));
    }
    XGRAD_CHECK_CLOSE(p.grad(), ref_binary<double>(X1, X2, [](double a, double b) { return a + b; }), 1e-15,
                      0.0);
    {
        // Bound twice on one tape: both uses count.
        tape<double> t;
        auto w1 = t.param(p);
        auto w2 = t.param(p);
        t.backward(ops::sum(w1 + w2));
    }
    XGRAD_CHECK_CLOSE(p.grad(), ref_binary<double>(X1, X2, [](double a, double b) { return a + b + 2.0; }),
                      1e-15, 0.0);
    CHECK(p.value() == P);  // backward never touches the value

    parameter<double> copy = p;  // copies share value and gradient
    p.zero_grad();
    CHECK(p.grad() == filled<double>({2, 3}, 0.0));
    CHECK(copy.grad() == filled<double>({2, 3}, 0.0));
    {
        tape<double> t;
        t.backward(ops::sum(ops::scale(t.param(copy), 3.0)));
    }
    CHECK(p.grad() == filled<double>({2, 3}, 3.0));
}

TEST_CASE("parameter: after zero_grad a backward gives exactly the tape's gradient; a later write is kept")
{
    const f64 X = random_array({2, 3}, 93);
    parameter<double> p(random_array({2, 3}, 94));
    const auto backward_once = [&] {
        tape<double> t;
        t.backward(ops::sum(t.param(p) * t.constant(X)));  // dL/dp = X
    };
    const parameter<double>& read_only = p;
    p.zero_grad();
    backward_once();
    CHECK(read_only.grad() == X);  // taken, not added to zeros: exactly X
    backward_once();
    const f64 twice = ref_binary<double>(X, X, [](double a, double b) { return a + b; });
    XGRAD_CHECK_CLOSE(read_only.grad(), twice, 0.0, 0.0);
    p.zero_grad();
    p.grad() += 1.0;  // a caller's write after zero_grad (clipping, an all-reduce) must not be overwritten
    backward_once();
    XGRAD_CHECK_CLOSE(read_only.grad(), ref_binary<double>(X, X, [](double a, double) { return a + 1.0; }), 0.0,
                      0.0);
}

TEST_CASE("parameter: retained double backward counts twice")
{
    parameter<double> p(filled<double>({2}, 1.5));
    tape<double> t;
    auto w = t.param(p);
    auto loss = ops::sum(w * w);  // dL/dw = 2w = 3
    t.backward(loss, true);
    t.backward(loss);
    CHECK(p.grad() == filled<double>({2}, 6.0));
}

// ---- no_grad ---------------------------------------------------------------------------------------

TEST_CASE("no_grad: ops record no rule and pass no gradient")
{
    tape<double> t;
    const f64 X = random_array({2, 3}, 100);
    auto x = t.input(X);
    var<double> frozen;
    {
        auto guard = t.no_grad();
        frozen = ops::exp(x * x);
        CHECK_FALSE(frozen.requires_grad());
        CHECK_FALSE(t.input(X).requires_grad());   // leaves made under the guard want no gradient either
        CHECK(t.bytes_saved_for_backward() == 0);  // nothing saved for a backward that cannot happen
        CHECK_THROWS_AS(t.backward(ops::sum(frozen)), std::invalid_argument);
        {
            auto inner = t.no_grad();
        }
        CHECK_FALSE((x + x).requires_grad());  // still inside the outer guard
    }
    auto y = x + x;
    CHECK(y.requires_grad());

    // L = sum(frozen * x): frozen is a constant, so dL/dx = frozen = exp(x^2), not its full derivative.
    t.backward(ops::sum(frozen * x));
    XGRAD_CHECK_CLOSE(x.grad(), ref_unary<double>(X, [](double v) { return std::exp(v * v); }), 1e-15, 0.0);
    CHECK(frozen.grad() == filled<double>({2, 3}, 0.0));
}

TEST_CASE("no_grad over a parameter: no gradient reaches it")
{
    parameter<double> p(filled<double>({3}, 2.0));
    tape<double> t;
    auto x = t.input(filled<double>({3}, 1.0));
    var<double> w;
    {
        auto guard = t.no_grad();
        w = t.param(p);
    }
    t.backward(ops::sum(w * x));
    CHECK(x.grad() == filled<double>({3}, 2.0));
    CHECK(p.grad() == filled<double>({3}, 0.0));
}

// ---- sum_to ----------------------------------------------------------------------------------------

TEST_CASE("sum_to reduces broadcast axes and rejects shapes that do not broadcast")
{
    const f64 G = random_array({2, 3, 4}, 110);
    CHECK(sum_to(f64(G), {2, 3, 4}) == G);
    XGRAD_CHECK_CLOSE(sum_to(f64(G), {4}), ref_sum(G, {0, 1}, false), 1e-15, 1e-15);
    f64 expected = ref_sum(G, {0, 2}, true);
    expected.reshape({3, 1});
    XGRAD_CHECK_CLOSE(sum_to(f64(G), {3, 1}), expected, 1e-15, 1e-15);
    XGRAD_CHECK_CLOSE(sum_to(f64(G), {2, 1, 4}), ref_sum(G, {1}, true), 1e-15, 1e-15);
    XGRAD_CHECK_CLOSE(sum_to(f64(G), {}), ref_sum(G, {0, 1, 2}, false), 1e-15, 1e-15);
    CHECK_THROWS_AS(sum_to(f64(G), {3}), std::logic_error);
    CHECK_THROWS_AS(sum_to(f64(G), {1, 2, 3, 4}), std::logic_error);
}

// ---- introspection ---------------------------------------------------------------------------------

TEST_CASE("nodes(), trace(), to_dot() and multiply_adds() describe the graph")
{
    tape<double> t;
    auto a = t.input(random_array({2, 3}, 120), "a");
    auto b = t.input(random_array({3, 4}, 121));
    auto c = ops::matmul(a, b);
    c.named("scores");
    auto d = c + c;
    auto s = ops::sum(d);

    const auto nodes = t.nodes();
    REQUIRE(nodes.size() == 5);
    const std::vector<std::string> op_names = {"input", "input", "matmul", "add", "sum"};
    const std::vector<shape_t> shapes = {{2, 3}, {3, 4}, {2, 4}, {2, 4}, {}};
    for (std::size_t i = 0; i < nodes.size(); ++i)
    {
        CAPTURE(i);
        CHECK(nodes[i].index == i);
        CHECK(nodes[i].op == op_names[i]);
        CHECK(nodes[i].shape == shapes[i]);
        CHECK(nodes[i].value_bytes == element_count(shapes[i]) * sizeof(double));
    }
    CHECK(nodes[0].label == "a");
    CHECK(nodes[2].label == "scores");
    CHECK(nodes[0].inputs.empty());
    CHECK(nodes[2].inputs == std::vector<std::uint32_t>{0, 1});
    CHECK(nodes[3].inputs == std::vector<std::uint32_t>{2, 2});
    CHECK(nodes[4].inputs == std::vector<std::uint32_t>{3});
    CHECK(nodes[0].saved_for_backward);  // matmul reads its operands
    CHECK(nodes[1].saved_for_backward);
    CHECK_FALSE(nodes[2].saved_for_backward);
    CHECK(nodes[2].multiply_adds == 2 * 4 * 3);
    CHECK(nodes[3].multiply_adds == 0);
    CHECK(t.multiply_adds() == 24);

    const std::string dot = t.to_dot();
    CHECK(dot.find("digraph") != std::string::npos);
    CHECK(count_of(dot, "->") == 2 + 2 + 1);  // one edge per input, the reused one twice
    CHECK(count_of(dot, "n0 -> n2") == 1);
    CHECK(count_of(dot, "n2 -> n3") == 2);
    CHECK(dot.find("scores") != std::string::npos);

    const std::string trace = t.trace();
    CHECK(count_of(trace, "\n") == 5);
    CHECK(trace.find("matmul") != std::string::npos);
    CHECK(trace.find("(2, 4)") != std::string::npos);
    CHECK(trace.find("24 multiply-adds") != std::string::npos);
    (void)s;
}

TEST_CASE("multiply_adds counts M*N*K*batch for batched and broadcast matmuls, summed over the tape")
{
    tape<double> t;
    auto a = t.input(random_array({2, 3, 4, 5}, 130));
    auto b = t.input(random_array({5, 6}, 131));
    auto c = t.input(random_array({2, 1, 6, 4}, 132));
    ops::matmul(a, b);               // 6 * 4 * 6 * 5 = 720
    ops::matmul(a, c, true, true);   // (2,3,5,4) @ (2,1,4,6): 6 * 5 * 6 * 4 = 720
    ops::matmul(b, b, true, false);  // (6,5) @ (5,6): 6 * 6 * 5 = 180
    CHECK(t.multiply_adds() == 720 + 720 + 180);
}

TEST_CASE("the buffer pool refuses sizes that would overflow instead of returning a small block")
{
    CHECK_THROWS_AS(pool_allocator<double>().allocate(std::size_t(1) << 62), std::bad_array_new_length);
    CHECK_THROWS_AS(pool_allocator<char>().allocate(std::size_t(-1) - 100), std::bad_array_new_length);
    CHECK_THROWS_AS(detail::pool_allocate(std::size_t(-1) - 100), std::bad_alloc);
    pool_allocator<float> a;
    float* p = a.allocate(1000);  // an ordinary request still works
    p[999] = 1.0f;
    a.deallocate(p, 1000);
}

TEST_CASE("the buffer pool keeps freed buffers for reuse, within its limit, until released")
{
    release_cached_buffers();
    CHECK(cached_buffer_bytes() == 0);
    {
        tape<double> t;
        auto x = t.input(xt::ones<double>({64, 64}));  // 32 KiB
        t.backward(ops::sum(x * x));
    }
    CHECK(cached_buffer_bytes() >= 64 * 64 * sizeof(double));  // the tape's buffers came back to the pool
    release_cached_buffers();
    CHECK(cached_buffer_bytes() == 0);

    set_buffer_cache_limit(0);  // nothing is kept: every buffer goes straight back to the system
    {
        array<double> a = xt::ones<double>({64, 64});
    }
    CHECK(cached_buffer_bytes() == 0);
    set_buffer_cache_limit(std::size_t(2) << 30);
}

// ---- what a rule may read ---------------------------------------------------------------------------

namespace
{
// y = x * w, whose rule reads the inputs it declared in `saved` (dy/dx = w, dy/dw = x).
var<double> product_declaring(const var<double>& x, const var<double>& w, unsigned saved)
{
    array<double> y = x.value() * w.value();
    return detail::record("product", {x, w}, std::move(y), saved, [](backward_context<double>& ctx) {
        const array<double> g = ctx.grad();
        ctx.accumulate(0, g * ctx.input(1));
        ctx.accumulate(1, g * ctx.input(0));
    });
}
}  // namespace

TEST_CASE("a backward rule reads only the values it declared: reading more is a logic_error naming the op")
{
    tape<double> t;
    const var<double> x = t.input(filled<double>({2}, 3.0)), w = t.input(filled<double>({2}, 5.0));
    t.backward(ops::sum(product_declaring(x, w, saves_input0 | saves_input1)));
    CHECK(x.grad()(0) == 5.0);
    CHECK(w.grad()(1) == 3.0);

    tape<double> u;
    const var<double> a = u.input(filled<double>({2}, 3.0)), b = u.input(filled<double>({2}, 5.0));
    const var<double> y = product_declaring(a, b, saves_input0);  // input 1 is read but not declared
    CHECK(u.bytes_saved_for_backward() == 2 * sizeof(double));
    try
    {
        u.backward(ops::sum(y));
        FAIL("the undeclared read was allowed");
    }
    catch (const std::logic_error& e)
    {
        CHECK(contains(e.what(), "product backward reads input 1"));
    }
}
}  // namespace test_tape
