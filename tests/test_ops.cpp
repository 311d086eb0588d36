// The primitive ops: forward values against loop-written references, gradients against central
// differences (xgrad::gradcheck, float64) on size-1, broadcast and batched shapes, and the argument
// errors every op must raise with its name and the offending shapes.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"
#include "test_util.hpp"

namespace test_ops
{
using namespace xgrad;
using namespace xgrad::test;

namespace
{
using binary_op = var<double> (*)(const var<double>&, const var<double>&);

struct binary_case
{
    const char* name;
    binary_op op;
    std::function<double(double, double)> reference;
};

const std::vector<binary_case> binary_ops = {
    {"add", ops::add<double>, [](double a, double b) { return a + b; }},
    {"sub", ops::sub<double>, [](double a, double b) { return a - b; }},
    {"mul", ops::mul<double>, [](double a, double b) { return a * b; }},
};

// Shape pairs: equal, size 1, broadcasting either way and on both sides at once.
const std::vector<std::pair<shape_t, shape_t>> binary_shapes = {
    {{1}, {1}},
    {{1, 1}, {1, 1}},
    {{2, 3}, {2, 3}},
    {{3, 1}, {1, 4}},              // both sides broadcast
    {{2, 3, 4}, {4}},              // (B, T, C) + (C)
    {{4}, {2, 3, 4}},              // the other way round
    {{2, 1, 3, 4}, {2, 1, 3, 1}},  // (B, 1, T, H) * (B, 1, T, 1)
    {{2, 1, 3, 1}, {2, 1, 3, 4}},
    {{1}, {2, 3}},
    {{2, 3}, {1, 1}},
    {{}, {2, 3}},  // a 0-d operand
};

std::string pair_str(const std::pair<shape_t, shape_t>& p)
{
    return shape_str(p.first) + " and " + shape_str(p.second);
}

f64 run_unary(var<double> (*op)(const var<double>&), const f64& x)
{
    tape<double> t;
    return op(t.input(x)).value();
}
}  // namespace

// ---- elementwise -----------------------------------------------------------------------------------

TEST_CASE("add, sub, mul: forward values match loops under broadcasting")
{
    unsigned seed = 1;
    for (const auto& c : binary_ops)
    {
        for (const auto& shapes : binary_shapes)
        {
            CAPTURE(std::string(c.name));
            CAPTURE(pair_str(shapes));
            const f64 A = random_array(shapes.first, seed++), B = random_array(shapes.second, seed++);
            tape<double> t;
            const auto y = c.op(t.input(A), t.input(B));
            CHECK(std::string(y.op()) == c.name);
            XGRAD_CHECK_CLOSE(y.value(), ref_binary<double>(A, B, c.reference), 0.0, 0.0);
        }
    }
}

TEST_CASE("operators +, -, * and unary - are the ops")
{
    tape<double> t;
    const f64 A = {{1.0, -2.0}, {3.0, 4.5}};
    const f64 B = {{0.5, 2.0}, {-1.0, 2.0}};
    auto a = t.input(A), b = t.input(B);
    const f64 sum_ab = {{1.5, 0.0}, {2.0, 6.5}};
    const f64 diff_ab = {{0.5, -4.0}, {4.0, 2.5}};
    const f64 prod_ab = {{0.5, -4.0}, {-3.0, 9.0}};
    const f64 neg_a = {{-1.0, 2.0}, {-3.0, -4.5}};
    CHECK((a + b).value() == sum_ab);
    CHECK((a - b).value() == diff_ab);
    CHECK((a * b).value() == prod_ab);
    CHECK((-a).value() == neg_a);
    CHECK(std::string((-a).op()) == "neg");
}

TEST_CASE("add, sub, mul: gradcheck on size-1 and broadcast shapes")
{
    unsigned seed = 100;
    for (const auto& c : binary_ops)
    {
        for (const auto& shapes : binary_shapes)
        {
            CAPTURE(std::string(c.name));
            CAPTURE(pair_str(shapes));
            const binary_op op = c.op;
            XGRAD_CHECK_GRADIENTS([op](tape<double>&, const vars& x) { return op(x[0], x[1]); },
                                  {random_array(shapes.first, seed), random_array(shapes.second, seed + 1)});
            seed += 2;
        }
    }
}

TEST_CASE("broadcast gradients are the sums over the broadcast axes")
{
    // y = a + b with a (3, 1), b (1, 4); L = sum(w * y): dL/da_i = sum_j w_ij, dL/db_j = sum_i w_ij.
    const f64 W = random_array({3, 4}, 7);
    tape<double> t;
    auto a = t.input(random_array({3, 1}, 8));
    auto b = t.input(random_array({1, 4}, 9));
    auto w = t.constant(W);
    t.backward(ops::sum(ops::mul(ops::add(a, b), w)));
    f64 da = filled<double>({3, 1}, 0.0), db = filled<double>({1, 4}, 0.0);
    for (std::size_t i = 0; i < 3; ++i)
    {
        for (std::size_t j = 0; j < 4; ++j)
        {
            da(i, 0) += W(i, j);
            db(0, j) += W(i, j);
        }
    }
    XGRAD_CHECK_CLOSE(a.grad(), da, 1e-14, 1e-14);
    XGRAD_CHECK_CLOSE(b.grad(), db, 1e-14, 1e-14);
    CHECK(w.grad() == filled<double>({3, 4}, 0.0));  // a constant gets no gradient
}

TEST_CASE("scale, neg, exp, log, tanh, relu: forward values match loops")
{
    const std::vector<shape_t> shapes = {{1}, {1, 1}, {2, 3, 4}};
    unsigned seed = 200;
    for (const auto& shape : shapes)
    {
        CAPTURE(shape_str(shape));
        const f64 x = random_array(shape, seed++, -2.0, 2.0);
        const f64 positive = random_array(shape, seed++, 0.2, 3.0);
        XGRAD_CHECK_CLOSE(run_unary(ops::neg<double>, x), ref_unary<double>(x, [](double v) { return -v; }),
                          0.0, 0.0);
        XGRAD_CHECK_CLOSE(run_unary(ops::exp<double>, x),
                          ref_unary<double>(x, [](double v) { return std::exp(v); }), 1e-15, 0.0);
        XGRAD_CHECK_CLOSE(run_unary(ops::log<double>, positive),
                          ref_unary<double>(positive, [](double v) { return std::log(v); }), 1e-15, 1e-16);
        XGRAD_CHECK_CLOSE(run_unary(ops::tanh<double>, x),
                          ref_unary<double>(x, [](double v) { return std::tanh(v); }), 1e-15, 1e-16);
        XGRAD_CHECK_CLOSE(run_unary(ops::relu<double>, x),
                          ref_unary<double>(x, [](double v) { return v > 0 ? v : 0.0; }), 0.0, 0.0);
        for (double factor : {2.5, -0.5, 0.0, 1.0})
        {
            tape<double> t;
            XGRAD_CHECK_CLOSE(ops::scale(t.input(x), factor).value(),
                              ref_unary<double>(x, [factor](double v) { return factor * v; }), 0.0, 0.0);
        }
    }
}

TEST_CASE("unary ops: gradcheck on (1), (1, 1) and (2, 3, 4)")
{
    const std::vector<shape_t> shapes = {{1}, {1, 1}, {2, 3, 4}};
    unsigned seed = 300;
    for (const auto& shape : shapes)
    {
        CAPTURE(shape_str(shape));
        const f64 x = random_array(shape, seed++, -2.0, 2.0);
        for (double factor : {2.5, -0.5, 0.0})
        {
            CAPTURE(factor);
            XGRAD_CHECK_GRADIENTS([factor](tape<double>&, const vars& v) { return ops::scale(v[0], factor); },
                                  {x});
        }
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::neg(v[0]); }, {x});
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::exp(v[0]); }, {x});
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::tanh(v[0]); }, {x});
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::log(v[0]); },
                              {random_array(shape, seed++, 0.2, 3.0)});
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::relu(v[0]); },
                              {random_away_from_zero(shape, seed++, 0.1, 2.0)});
    }
}

TEST_CASE("relu: gradient is 1 where x > 0 and 0 where x <= 0 (subgradient 0 at the kink)")
{
    tape<double> t;
    const f64 X = {-1.5, -0.0, 0.0, 0.25, 3.0};
    auto x = t.input(X);
    auto y = ops::relu(x);
    const f64 expected_y = {0.0, 0.0, 0.0, 0.25, 3.0};
    CHECK(y.value() == expected_y);
    t.backward(ops::sum(y));
    const f64 expected_grad = {0.0, 0.0, 0.0, 1.0, 1.0};
    CHECK(x.grad() == expected_grad);
}

// ---- reductions ------------------------------------------------------------------------------------

namespace
{
struct reduce_case
{
    shape_t shape;
    std::vector<std::size_t> axes;
};

// Size 1, one axis, several axes (also unsorted), all axes, and a size-1 axis.
const std::vector<reduce_case> reduce_cases = {
    {{1}, {0}},          {{1, 1}, {0}},          {{1, 1}, {0, 1}},    {{2, 3, 4}, {0}},
    {{2, 3, 4}, {1}},    {{2, 3, 4}, {2}},       {{2, 3, 4}, {0, 2}}, {{2, 3, 4}, {2, 0}},
    {{2, 3, 4}, {1, 2}}, {{2, 3, 4}, {0, 1, 2}}, {{2, 1, 3}, {1}},
};

std::size_t reduced_count(const shape_t& shape, const std::vector<std::size_t>& axes)
{
    std::size_t n = 1;
    for (auto a : axes)
    {
        n *= shape[a];
    }
    return n;
}
}  // namespace

TEST_CASE("sum and mean: forward values match loops, over all axes and given axes, keep_dims or not")
{
    unsigned seed = 400;
    for (const auto& c : reduce_cases)
    {
        for (bool keep : {false, true})
        {
            CAPTURE(shape_str(c.shape));
            CAPTURE(axes_str(c.axes));
            CAPTURE(keep);
            const f64 X = random_array(c.shape, seed++);
            const f64 expected = ref_sum(X, c.axes, keep);
            const double n = static_cast<double>(reduced_count(c.shape, c.axes));
            tape<double> t;
            auto x = t.input(X);
            XGRAD_CHECK_CLOSE(ops::sum(x, c.axes, keep).value(), expected, 1e-14, 1e-15);
            XGRAD_CHECK_CLOSE(ops::mean(x, c.axes, keep).value(),
                              ref_unary<double>(expected, [n](double v) { return v / n; }), 1e-14, 1e-15);
        }
    }
    for (const shape_t& shape : {shape_t{1}, shape_t{1, 1}, shape_t{2, 3, 4}})
    {
        CAPTURE(shape_str(shape));
        const f64 X = random_array(shape, seed++);
        std::vector<std::size_t> all(shape.size());
        std::iota(all.begin(), all.end(), 0);
        const f64 expected = ref_sum(X, all, false);
        tape<double> t;
        auto x = t.input(X);
        auto s = ops::sum(x);
        auto m = ops::mean(x);
        CHECK(s.shape() == shape_t{});
        CHECK(m.shape() == shape_t{});
        CHECK(s.value()() == doctest::Approx(expected()).epsilon(1e-14));
        CHECK(m.value()() == doctest::Approx(expected() / static_cast<double>(X.size())).epsilon(1e-14));
    }
}

TEST_CASE("sum and mean: gradcheck over all axes and given axes, keep_dims true and false")
{
    unsigned seed = 500;
    for (const auto& c : reduce_cases)
    {
        for (bool keep : {false, true})
        {
            CAPTURE(shape_str(c.shape));
            CAPTURE(axes_str(c.axes));
            CAPTURE(keep);
            const f64 X = random_array(c.shape, seed++);
            const auto axes = c.axes;
            XGRAD_CHECK_GRADIENTS(
                [axes, keep](tape<double>&, const vars& x) { return ops::sum(x[0], axes, keep); }, {X});
            XGRAD_CHECK_GRADIENTS(
                [axes, keep](tape<double>&, const vars& x) { return ops::mean(x[0], axes, keep); }, {X});
        }
    }
    for (const shape_t& shape : {shape_t{1}, shape_t{1, 1}, shape_t{2, 3, 4}})
    {
        CAPTURE(shape_str(shape));
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& x) { return ops::sum(x[0]); },
                              {random_array(shape, seed++)});
        XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& x) { return ops::mean(x[0]); },
                              {random_array(shape, seed++)});
    }
}

TEST_CASE("sum and mean over an empty axis list leave the input unchanged (NumPy's axis=())")
{
    const f64 X = random_array({2, 3}, 550);
    tape<double> t;
    auto x = t.input(X);
    XGRAD_CHECK_CLOSE(ops::sum(x, {}, false).value(), X, 0.0, 0.0);
    XGRAD_CHECK_CLOSE(ops::mean(x, {}, true).value(), X, 0.0, 0.0);
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::sum(v[0], {}, false); }, {X});
}

// ---- shape ops -------------------------------------------------------------------------------------

TEST_CASE("reshape: values keep their row-major order; -1 is inferred; gradcheck")
{
    struct reshape_case
    {
        shape_t from;
        std::vector<long> to;
        shape_t expected;
    };
    const std::vector<reshape_case> cases = {
        {{2, 3, 4}, {24}, {24}},
        {{2, 3, 4}, {-1}, {24}},
        {{2, 3, 4}, {6, -1}, {6, 4}},
        {{2, 3, 4}, {4, -1, 3}, {4, 2, 3}},
        {{2, 3, 4}, {2, 3, 4, 1}, {2, 3, 4, 1}},
        {{2, 3, 4}, {1, -1}, {1, 24}},
        {{1}, {1, 1}, {1, 1}},
        {{1, 1}, {-1}, {1}},
        {{1}, {}, {}},
    };
    unsigned seed = 600;
    for (const auto& c : cases)
    {
        CAPTURE(shape_str(c.from));
        CAPTURE(shape_str(c.expected));
        const f64 X = random_array(c.from, seed++);
        tape<double> t;
        auto y = ops::reshape(t.input(X), c.to);
        REQUIRE(y.shape() == c.expected);
        CHECK(std::equal(X.begin(), X.end(), y.value().begin(), y.value().end()));
        const auto to = c.to;
        XGRAD_CHECK_GRADIENTS([to](tape<double>&, const vars& x) { return ops::reshape(x[0], to); }, {X});
    }
}

TEST_CASE("permute: every permutation of a 4-D array, forward against loops and gradcheck")
{
    const f64 X = random_array({2, 3, 4, 5}, 700);
    std::vector<std::size_t> axes = {0, 1, 2, 3};
    int count = 0;
    do
    {
        CAPTURE(axes_str(axes));
        tape<double> t;
        auto y = ops::permute(t.input(X), axes);
        XGRAD_CHECK_CLOSE(y.value(), ref_permute(X, axes), 0.0, 0.0);
        XGRAD_CHECK_GRADIENTS([axes](tape<double>&, const vars& x) { return ops::permute(x[0], axes); }, {X});
        ++count;
    } while (std::next_permutation(axes.begin(), axes.end()));
    CHECK(count == 24);
}

TEST_CASE("permute and transpose on small ranks and size-1 axes")
{
    struct permute_case
    {
        shape_t shape;
        std::vector<std::size_t> axes;
    };
    const std::vector<permute_case> cases = {
        {{1}, {0}},
        {{5}, {0}},
        {{1, 1}, {1, 0}},
        {{3, 4}, {1, 0}},
        {{3, 1, 2}, {2, 0, 1}},
        {{1, 3, 1}, {2, 1, 0}},
    };
    unsigned seed = 710;
    for (const auto& c : cases)
    {
        CAPTURE(shape_str(c.shape));
        CAPTURE(axes_str(c.axes));
        const f64 X = random_array(c.shape, seed++);
        tape<double> t;
        XGRAD_CHECK_CLOSE(ops::permute(t.input(X), c.axes).value(), ref_permute(X, c.axes), 0.0, 0.0);
        const auto axes = c.axes;
        XGRAD_CHECK_GRADIENTS([axes](tape<double>&, const vars& x) { return ops::permute(x[0], axes); }, {X});
    }

    const f64 X = random_array({2, 3, 4}, 720);
    for (auto [a1, a2] :
         std::vector<std::pair<std::size_t, std::size_t>>{{0, 2}, {2, 0}, {1, 2}, {0, 1}, {1, 1}})
    {
        CAPTURE(a1);
        CAPTURE(a2);
        std::vector<std::size_t> axes = {0, 1, 2};
        std::swap(axes[a1], axes[a2]);
        tape<double> t;
        auto y = ops::transpose(t.input(X), a1, a2);
        XGRAD_CHECK_CLOSE(y.value(), ref_permute(X, axes), 0.0, 0.0);
        XGRAD_CHECK_GRADIENTS(
            [a1 = a1, a2 = a2](tape<double>&, const vars& x) { return ops::transpose(x[0], a1, a2); }, {X});
    }
}

// ---- matmul ----------------------------------------------------------------------------------------

namespace
{
// op(A) is (batch_a..., m, k), op(B) is (batch_b..., k, n); the stored operands are swapped when the
// flag is set.
struct matmul_case
{
    shape_t batch_a, batch_b;
    std::size_t m, k, n;
};

const std::vector<matmul_case> matmul_cases = {
    {{}, {}, 3, 4, 5},          // 2-D
    {{}, {}, 1, 1, 1},          // size 1
    {{}, {}, 1, 4, 1},          // row times column
    {{2}, {2}, 3, 4, 2},        // batched, same batch
    {{2, 3}, {}, 4, 5, 6},      // (2,3,4,5) @ (5,6)
    {{}, {2, 3}, 4, 5, 6},      // (4,5) @ (2,3,5,6)
    {{2, 1}, {1, 3}, 4, 5, 6},  // (2,1,4,5) @ (1,3,5,6)
    {{1}, {3}, 2, 3, 2},        // a size-1 batch axis broadcast
    {{3}, {2, 1}, 2, 3, 2},     // batch ranks differ and both sides broadcast
    {{2, 3}, {1, 1}, 2, 3, 2},  // b's batch is all ones
};

shape_t stored_shape(const shape_t& batch, std::size_t rows, std::size_t cols, bool transposed)
{
    shape_t s = batch;
    s.push_back(transposed ? cols : rows);
    s.push_back(transposed ? rows : cols);
    return s;
}

std::string matmul_str(const matmul_case& c, bool ta, bool tb)
{
    return shape_str(stored_shape(c.batch_a, c.m, c.k, ta)) + (ta ? "^T" : "") + " @ " +
           shape_str(stored_shape(c.batch_b, c.k, c.n, tb)) + (tb ? "^T" : "");
}
}  // namespace

TEST_CASE(
    "matmul: forward values and multiply-add counts against loops, all transpose flags, broadcast batches")
{
    unsigned seed = 800;
    for (const auto& c : matmul_cases)
    {
        for (bool ta : {false, true})
        {
            for (bool tb : {false, true})
            {
                CAPTURE(matmul_str(c, ta, tb));
                const f64 A = random_array(stored_shape(c.batch_a, c.m, c.k, ta), seed++);
                const f64 B = random_array(stored_shape(c.batch_b, c.k, c.n, tb), seed++);
                tape<double> t;
                auto y = ops::matmul(t.input(A), t.input(B), ta, tb);
                const f64 expected = ref_matmul(A, B, ta, tb);
                XGRAD_CHECK_CLOSE(y.value(), expected, 1e-13, 1e-14);
                const shape_t batch = broadcast_pair(c.batch_a, c.batch_b);
                const std::uint64_t expected_macs = element_count(batch) * c.m * c.n * c.k;
                CHECK(t.nodes().back().multiply_adds == expected_macs);
                CHECK(t.multiply_adds() == expected_macs);
            }
        }
    }
}

TEST_CASE("matmul: gradcheck, all transpose flags, batched and broadcast both ways")
{
    gradcheck_options options;
    options.full_jacobian_limit = 30000;  // the full Jacobian for every case here
    unsigned seed = 900;
    for (const auto& c : matmul_cases)
    {
        for (bool ta : {false, true})
        {
            for (bool tb : {false, true})
            {
                CAPTURE(matmul_str(c, ta, tb));
                const f64 A = random_array(stored_shape(c.batch_a, c.m, c.k, ta), seed++);
                const f64 B = random_array(stored_shape(c.batch_b, c.k, c.n, tb), seed++);
                XGRAD_CHECK_GRADIENTS([ta = ta, tb = tb](tape<double>&, const vars& x)
                                      { return ops::matmul(x[0], x[1], ta, tb); },
                                      {A, B}, options);
            }
        }
    }
}

TEST_CASE("matmul: analytic gradients dA = G B^T, dB = A^T G on a hand-sized example")
{
    const f64 A = {{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}};     // (2, 3)
    const f64 B = {{1.0, -1.0}, {0.0, 2.0}, {3.0, 1.0}};  // (3, 2)
    const f64 G = {{1.0, 0.5}, {-2.0, 1.0}};              // (2, 2)
    tape<double> t;
    auto a = t.input(A), b = t.input(B);
    auto c = ops::matmul(a, b);
    const f64 C = {{10.0, 6.0}, {22.0, 12.0}};
    CHECK(c.value() == C);
    t.backward(c, G);
    // G B^T = [[1 - 0.5, 0 + 1, 3 + 0.5], [-2 - 1, 0 + 2, -6 + 1]]
    const f64 dA = {{0.5, 1.0, 3.5}, {-3.0, 2.0, -5.0}};
    // A^T G = [[1 - 8, 0.5 + 4], [2 - 10, 1 + 5], [3 - 12, 1.5 + 6]]
    const f64 dB = {{-7.0, 4.5}, {-8.0, 6.0}, {-9.0, 7.5}};
    CHECK(a.grad() == dA);
    CHECK(b.grad() == dB);
}

TEST_CASE("parallel_for: each index exactly once over thousands of quick calls, spinning or asleep, across resizes")
{
    std::size_t wrong = 0;
    for (int threads : {2, 1, 2})
    {
        set_num_threads(threads);
        for (std::size_t call = 0; call < 3000; ++call)
        {
            if (call % 500 == 499)
            {
                std::this_thread::sleep_for(std::chrono::microseconds(300));  // past the spin: workers asleep
            }
            std::vector<int> hits(call % 7 + 1, 0);
            xgrad::kernels::parallel_for(hits.size(), [&](std::size_t i) { ++hits[i]; });
            wrong += hits.size() - static_cast<std::size_t>(std::count(hits.begin(), hits.end(), 1));
        }
    }
    CHECK(wrong == 0);
    CHECK_THROWS_AS(xgrad::kernels::parallel_for(4, [](std::size_t i) {
                        if (i == 3)
                        {
                            throw std::runtime_error("body");  // on the worker's chunk
                        }
                    }),
                    std::runtime_error);
    std::vector<int> after(5, 0);
    xgrad::kernels::parallel_for(after.size(), [&](std::size_t i) { ++after[i]; });  // the pool still runs
    CHECK(std::count(after.begin(), after.end(), 1) == 5);
    set_num_threads(1);
}

TEST_CASE("matmul: a weight gradient X^T G folded over the batch splits across threads by C's rows or columns")
{
    // C = sum_b X_b^T G_b as one (m, B T) x (B T, n) product; with two threads it splits by C's rows
    // when only m has room for two blocks of 32 (256 x 40, and 100 x 48 at an uneven edge), by its
    // columns otherwise. Every entry of C is still one dot product, so one and two threads give
    // products equal to the triple loop's.
    struct wide_side
    {
        std::size_t m, n;
    };
    for (const wide_side c : {wide_side{256, 40}, wide_side{100, 48}, wide_side{64, 256}, wide_side{256, 64}})
    {
        CAPTURE(c.m);
        CAPTURE(c.n);
        const std::size_t batch = 4, rows = 256;
        const f64 X = random_array({batch, rows, c.m}, 70), G = random_array({batch, rows, c.n}, 71);
        f64 expected = xt::zeros<double>({c.m, c.n});
        for (std::size_t b = 0; b < batch; ++b)
        {
            for (std::size_t r = 0; r < rows; ++r)
            {
                for (std::size_t i = 0; i < c.m; ++i)
                {
                    for (std::size_t j = 0; j < c.n; ++j)
                    {
                        expected(i, j) += X(b, r, i) * G(b, r, j);
                    }
                }
            }
        }
        for (int threads : {1, 2})
        {
            CAPTURE(threads);
            set_num_threads(threads);
            f64 product = f64::from_shape({c.m, c.n});
            kernels::matmul_into(X, true, G, false, product);
            XGRAD_CHECK_CLOSE(product, expected, 1e-12, 1e-12);
        }
        set_num_threads(1);
    }
}

// ---- masked_softmax --------------------------------------------------------------------------------

TEST_CASE("masked_softmax: hand-computed values")
{
    tape<double> t;
    const f64 X = {1.0, 2.0, 3.0};
    auto x = t.input(X);
    mask_t keep_ends = {true, false, true};

    // Kept logits 1 and 3: weights 1 / (1 + e^2) and e^2 / (1 + e^2); the masked entry is 0.
    const double e2 = std::exp(2.0);
    const f64 expected = {1.0 / (1.0 + e2), 0.0, e2 / (1.0 + e2)};
    XGRAD_CHECK_CLOSE(ops::masked_softmax(x, keep_ends).value(), expected, 1e-15, 0.0);

    // scale 0.5: logits 0.5 and 1.5, weights 1 / (1 + e) and e / (1 + e).
    const double e1 = std::exp(1.0);
    const f64 expected_half = {1.0 / (1.0 + e1), 0.0, e1 / (1.0 + e1)};
    XGRAD_CHECK_CLOSE(ops::masked_softmax(x, keep_ends, 0.5).value(), expected_half, 1e-15, 0.0);

    // softmax of [0, ln 3] is [1/4, 3/4]; a single entry is 1.
    const f64 Z = {0.0, std::log(3.0)};
    const f64 quarter = {0.25, 0.75};
    XGRAD_CHECK_CLOSE(ops::softmax(t.input(Z)).value(), quarter, 1e-15, 0.0);
    CHECK(ops::softmax(t.input(filled<double>({1}, 7.0))).value() == filled<double>({1}, 1.0));
    CHECK(ops::softmax(t.input(filled<double>({1, 1}, -3.0))).value() == filled<double>({1, 1}, 1.0));

    // A single masked entry is a fully masked row.
    mask_t drop = {false};
    CHECK(ops::masked_softmax(t.input(filled<double>({1}, 7.0)), drop).value() == filled<double>({1}, 0.0));
}

namespace
{
struct softmax_case
{
    const char* name;
    shape_t x_shape;
    mask_t mask;
    double scale;
    double offset;  // added to every logit (1e3: large logits)
};

// (B, H, T, T) = (2, 2, 3, 3) scores with the masks attention uses.
std::vector<softmax_case> softmax_cases()
{
    const shape_t scores = {2, 2, 3, 3};
    std::vector<softmax_case> cases;
    mask_t mixed = random_mask(scores, 11);
    for (std::size_t j = 0; j < 3; ++j)
    {
        mixed(0, 1, 2, j) = false;  // one fully masked row
    }
    mixed(1, 0, 0, 1) = true;
    cases.push_back({"mixed (B,H,T,T) mask with a fully masked row", scores, mixed, 1.0, 0.0});
    cases.push_back({"all-true mask", scores, full_mask(scores, true), 1.0, 0.0});
    cases.push_back({"all-false mask", scores, full_mask(scores, false), 1.0, 0.0});

    mask_t causal = mask_t::from_shape({3, 3});
    for (std::size_t i = 0; i < 3; ++i)
    {
        for (std::size_t j = 0; j < 3; ++j)
        {
            causal(i, j) = j <= i;
        }
    }
    cases.push_back({"(T,T) causal mask over (B,H,T,T)", scores, causal, 1.0, 0.0});
    mask_t top_row_masked = causal;
    top_row_masked(0, 0) = false;  // query 0 attends to nothing, in every batch and head
    cases.push_back({"(T,T) mask with a fully masked row, scale 0.7", scores, top_row_masked, 0.7, 0.0});

    mask_t padding = mask_t::from_shape({2, 1, 1, 3});
    std::fill(padding.begin(), padding.end(), false);  // batch 1: no keys at all
    padding(0, 0, 0, 0) = true;
    padding(0, 0, 0, 1) = true;
    cases.push_back({"(B,1,1,T) padding mask, one batch fully padded", scores, padding, 1.0, 0.0});
    cases.push_back({"(B,1,T,T) mask", scores, random_mask({2, 1, 3, 3}, 12), 2.5, 0.0});

    mask_t rows_only = mask_t::from_shape({3, 1});
    rows_only(0, 0) = true;
    rows_only(1, 0) = false;
    rows_only(2, 0) = true;
    cases.push_back({"(T,1) mask, broadcast along the keys", scores, rows_only, 1.0, 0.0});
    cases.push_back({"(1) mask true", scores, full_mask({1}, true), 1.0, 0.0});

    cases.push_back({"logits around 1e3", scores, mixed, 1.0, 1e3});
    cases.push_back({"logits around 1e3, scale 2.5", scores, causal, 2.5, 1e3});
    cases.push_back({"logits around -1e3", scores, mixed, 1.0, -1e3});
    cases.push_back({"negative scale", scores, mixed, -1.5, 0.0});

    cases.push_back({"(1) input", {1}, full_mask({1}, true), 1.0, 0.0});
    cases.push_back({"(1,1) input", {1, 1}, full_mask({1, 1}, true), 3.0, 0.0});
    cases.push_back({"(B,T,Tk) with (Tq,Tk) mask, Tq != Tk", {2, 3, 5}, random_mask({3, 5}, 13), 1.0, 0.0});
    return cases;
}

f64 logits(const softmax_case& c, unsigned seed)
{
    f64 x = random_array(c.x_shape, seed, -3.0, 3.0);
    x += c.offset;
    return x;
}

// True when every entry of the rows the (broadcast) mask fully masks is exactly 0 in `a`.
bool masked_rows_are_zero(const f64& a, const mask_t& mask)
{
    const shape_t shape = to_shape(a.shape()), mshape = to_shape(mask.shape());
    const std::size_t n = shape.back();
    for (std::size_t row = 0; row < a.size() / n; ++row)
    {
        bool any = false;
        for (std::size_t j = 0; j < n; ++j)
        {
            any = any || mask.flat(broadcast_source(unravel(row * n + j, shape), mshape));
        }
        for (std::size_t j = 0; !any && j < n; ++j)
        {
            if (a.flat(row * n + j) != 0.0)
            {
                return false;
            }
        }
    }
    return true;
}

std::size_t fully_masked_rows(const shape_t& shape, const mask_t& mask)
{
    const shape_t mshape = to_shape(mask.shape());
    const std::size_t n = shape.back();
    std::size_t count = 0;
    for (std::size_t row = 0; row < element_count(shape) / n; ++row)
    {
        bool any = false;
        for (std::size_t j = 0; j < n; ++j)
        {
            any = any || mask.flat(broadcast_source(unravel(row * n + j, shape), mshape));
        }
        count += any ? 0 : 1;
    }
    return count;
}
}  // namespace

TEST_CASE("masked_softmax: forward matches a loop reference; no NaN; fully masked rows are exactly 0")
{
    unsigned seed = 1000;
    for (const auto& c : softmax_cases())
    {
        CAPTURE(std::string(c.name));
        const f64 X = logits(c, seed++);
        tape<double> t;
        auto x = t.input(X);
        auto y = ops::masked_softmax(x, c.mask, c.scale);
        const f64 expected = ref_masked_softmax(X, &c.mask, c.scale);
        CHECK(all_finite(y.value()));
        // scale * x is rounded to double before exp: a relative error of about ulp(|scale x|) remains.
        const double rtol = std::max(1e-13, 2e-15 * std::abs(c.scale) * (std::abs(c.offset) + 3.0));
        XGRAD_CHECK_CLOSE(y.value(), expected, rtol, 1e-16);
        CHECK(masked_rows_are_zero(y.value(), c.mask));

        // Kept rows sum to 1; masked entries are exactly 0.
        const std::size_t n = X.shape().back();
        const shape_t shape = to_shape(X.shape()), mshape = to_shape(c.mask.shape());
        std::size_t rows_summing_to_one = 0;
        bool masked_entries_zero = true;
        for (std::size_t row = 0; row < X.size() / n; ++row)
        {
            double total = 0;
            for (std::size_t j = 0; j < n; ++j)
            {
                const std::size_t i = row * n + j;
                total += y.value().flat(i);
                if (!c.mask.flat(broadcast_source(unravel(i, shape), mshape)))
                {
                    masked_entries_zero = masked_entries_zero && y.value().flat(i) == 0.0;
                }
            }
            rows_summing_to_one += std::abs(total - 1.0) < 1e-14 ? 1 : 0;
        }
        CHECK(masked_entries_zero);
        CHECK(rows_summing_to_one + fully_masked_rows(shape, c.mask) == X.size() / n);

        // Backward with a random seed: finite everywhere, exactly 0 on fully masked rows.
        t.backward(y, random_array(shape, seed++));
        CHECK(all_finite(x.grad()));
        CHECK(masked_rows_are_zero(x.grad(), c.mask));
    }
}

TEST_CASE("masked_softmax and softmax: gradcheck")
{
    unsigned seed = 1100;
    for (const auto& c : softmax_cases())
    {
        CAPTURE(std::string(c.name));
        const mask_t mask = c.mask;
        const double scale = c.scale;
        XGRAD_CHECK_GRADIENTS([mask, scale](tape<double>&, const vars& x)
                              { return ops::masked_softmax(x[0], mask, scale); },
                              {logits(c, seed++)});
    }
    for (const shape_t& shape : {shape_t{1}, shape_t{1, 1}, shape_t{3, 4}, shape_t{2, 3, 5}})
    {
        for (double scale : {1.0, 0.7})
        {
            CAPTURE(shape_str(shape));
            CAPTURE(scale);
            XGRAD_CHECK_GRADIENTS([scale](tape<double>&, const vars& x) { return ops::softmax(x[0], scale); },
                                  {random_array(shape, seed++, -2.0, 2.0)});
        }
    }
}

TEST_CASE("masked_softmax: an all-true mask is softmax; masked logits do not matter, however large")
{
    const f64 X = random_array({2, 3, 4}, 1200, -2.0, 2.0);
    tape<double> t;
    auto x = t.input(X);
    XGRAD_CHECK_CLOSE(ops::masked_softmax(x, full_mask({2, 3, 4}, true), 0.5).value(),
                      ops::softmax(x, 0.5).value(), 0.0, 0.0);
    XGRAD_CHECK_CLOSE(ops::softmax(x, 0.5).value(), ref_masked_softmax(X, nullptr, 0.5), 1e-14, 1e-16);

    mask_t mask = random_mask({3, 4}, 1201);
    mask(0, 0) = false;
    f64 with_huge = X;
    for (std::size_t b = 0; b < 2; ++b)
    {
        with_huge(b, 0, 0) = 1e300;  // masked everywhere: must not overflow into the row
    }
    auto y = ops::masked_softmax(t.input(with_huge), mask);
    CHECK(all_finite(y.value()));
    XGRAD_CHECK_CLOSE(y.value(), ops::masked_softmax(x, mask).value(), 0.0, 0.0);
}

TEST_CASE("masked_softmax: long rows and a large input (vectorised and multi-threaded kernels)")
{
    struct long_case
    {
        const char* name;
        shape_t x_shape;
        mask_t mask;
    };
    mask_t short_keys = random_mask({3, 17}, 1300);
    for (std::size_t j = 0; j < 17; ++j)
    {
        short_keys(2, j) = false;  // a fully masked row
    }
    mask_t big = random_mask({4, 1, 64, 64}, 1301, 0.3);
    for (std::size_t j = 0; j < 64; ++j)
    {
        big(1, 0, 5, j) = false;
    }
    const std::vector<long_case> cases = {
        {"(2,3,17) with a (3,17) mask", {2, 3, 17}, short_keys},
        {"(4,4,64,64) with a (4,1,64,64) mask", {4, 4, 64, 64}, big},
    };
    unsigned seed = 1310;
    for (const auto& c : cases)
    {
        CAPTURE(std::string(c.name));
        const f64 X = random_array(c.x_shape, seed++, -4.0, 4.0);
        const double scale = 0.8;
        tape<double> t;
        auto x = t.input(X);
        auto y = ops::masked_softmax(x, c.mask, scale);
        CHECK(all_finite(y.value()));
        XGRAD_CHECK_CLOSE(y.value(), ref_masked_softmax(X, &c.mask, scale), 1e-13, 1e-16);
        CHECK(masked_rows_are_zero(y.value(), c.mask));
        t.backward(y, random_array(c.x_shape, seed++));
        CHECK(all_finite(x.grad()));
        CHECK(masked_rows_are_zero(x.grad(), c.mask));

        const mask_t mask = c.mask;
        const gradcheck_report report = run_gradcheck([mask, scale](tape<double>&, const vars& v)
                                                      { return ops::masked_softmax(v[0], mask, scale); },
                                                      {X});
        CHECK_MESSAGE(report.ok, report.summary());
    }
}

// ---- argument errors -------------------------------------------------------------------------------

TEST_CASE("shape errors name the op and both shapes")
{
    tape<double> t;
    auto a = t.input(filled<double>({3, 2}, 1.0));
    auto b = t.input(filled<double>({4, 5}, 1.0));

    for (const auto& c : binary_ops)
    {
        CAPTURE(std::string(c.name));
        const std::string message = invalid_argument_message([&] { c.op(a, b); });
        CHECK(contains(message, c.name));
        CHECK(contains(message, "(3, 2)"));
        CHECK(contains(message, "(4, 5)"));
    }

    SUBCASE("matmul inner dimensions")
    {
        const std::string message = invalid_argument_message([&] { ops::matmul(a, b); });
        CHECK(contains(message, "matmul"));
        CHECK(contains(message, "(3, 2)"));
        CHECK(contains(message, "(4, 5)"));
        // With a transpose flag the inner dimension of (3, 2)^T is 3, still not 4.
        CHECK(contains(invalid_argument_message([&] { ops::matmul(a, b, true, false); }), "transposed"));
        // (3, 2)^T @ (3, 2) works: (2, 3) @ (3, 2).
        CHECK(ops::matmul(a, a, true, false).shape() == shape_t{2, 2});
    }
    SUBCASE("matmul batch axes that do not broadcast")
    {
        auto p = t.input(filled<double>({2, 3, 4}, 1.0));
        auto q = t.input(filled<double>({3, 4, 5}, 1.0));
        const std::string message = invalid_argument_message([&] { ops::matmul(p, q); });
        CHECK(contains(message, "matmul"));
        CHECK(contains(message, "(2, 3, 4)"));
        CHECK(contains(message, "(3, 4, 5)"));
    }
    SUBCASE("matmul rank < 2")
    {
        auto v = t.input(filled<double>({2}, 1.0));
        const std::string message = invalid_argument_message([&] { ops::matmul(v, a, false, true); });
        CHECK(contains(message, "matmul"));
        CHECK(contains(message, "(2)"));
        CHECK(contains(message, "(3, 2)"));
        CHECK_THROWS_AS(ops::matmul(a, v), std::invalid_argument);
    }
    SUBCASE("reshape to the wrong number of elements")
    {
        const std::string message = invalid_argument_message([&] { ops::reshape(a, {4, 2}); });
        CHECK(contains(message, "reshape"));
        CHECK(contains(message, "(3, 2)"));
        CHECK(contains(message, "(4, 2)"));
        CHECK_THROWS_AS(ops::reshape(a, {4, -1}), std::invalid_argument);   // 6 is not a multiple of 4
        CHECK_THROWS_AS(ops::reshape(a, {-1, -1}), std::invalid_argument);  // two inferred axes
        CHECK_THROWS_AS(ops::reshape(a, {-2, -3}), std::invalid_argument);
        CHECK_THROWS_AS(ops::reshape(a, {0, -1}), std::invalid_argument);
        CHECK_THROWS_AS(ops::reshape(a, {7}), std::invalid_argument);
    }
    SUBCASE("reshape to sizes whose product passes 2^64 (which would wrap to the input's count)")
    {
        auto four = t.input(filled<double>({4}, 1.0));
        const long wraps = (1L << 62) + 1;  // 4 (2^62 + 1) = 2^64 + 4: 4 once wrapped
        CHECK_THROWS_WITH_AS(ops::reshape(four, {wraps, 4}),
                             doctest::Contains("reshape: shape (4611686018427387905, 4) has more elements than 2^64"),
                             std::invalid_argument);
        CHECK_THROWS_WITH_AS(ops::reshape(four, {wraps, 4, -1}), doctest::Contains("more elements than 2^64"),
                             std::invalid_argument);
        const auto empty = ops::reshape(t.input(filled<double>({0}, 1.0)), {wraps, 4, 0});  // 0 elements
        CHECK(empty.shape() == shape_t{std::size_t(wraps), 4, 0});
    }
    SUBCASE("permute and transpose with bad axes")
    {
        for (const auto& axes : std::vector<std::vector<std::size_t>>{{0}, {0, 0}, {0, 2}, {1, 0, 2}})
        {
            CAPTURE(axes_str(axes));
            const std::string message = invalid_argument_message([&] { ops::permute(a, axes); });
            CHECK(contains(message, "permute"));
            CHECK(contains(message, "(3, 2)"));
        }
        const std::string message = invalid_argument_message([&] { ops::transpose(a, 0, 2); });
        CHECK(contains(message, "transpose"));
        CHECK(contains(message, "(3, 2)"));
    }
    SUBCASE("masked_softmax with a mask that does not broadcast")
    {
        auto s = t.input(filled<double>({2, 3, 4}, 1.0));
        for (const shape_t& mshape : {shape_t{3}, shape_t{4, 3}, shape_t{3, 3, 4}, shape_t{1, 2, 3, 4}})
        {
            CAPTURE(shape_str(mshape));
            const std::string message =
                invalid_argument_message([&] { ops::masked_softmax(s, full_mask(mshape, true)); });
            CHECK(contains(message, "masked_softmax"));
            CHECK(contains(message, shape_str(mshape)));
            CHECK(contains(message, "(2, 3, 4)"));
        }
        CHECK_THROWS_AS(ops::softmax(t.input(filled<double>({}, 2.0))),
                        std::invalid_argument);  // 0-d: no axis to normalise
    }
    SUBCASE("sum and mean with an out-of-range or repeated axis")
    {
        std::string message = invalid_argument_message([&] { ops::sum(a, {2}); });
        CHECK(contains(message, "sum"));
        CHECK(contains(message, "2"));
        CHECK(contains(message, "(3, 2)"));
        message = invalid_argument_message([&] { ops::mean(a, {0, 5}, true); });
        CHECK(contains(message, "mean"));
        CHECK(contains(message, "(3, 2)"));
        CHECK_THROWS_AS(ops::sum(a, {1, 1}), std::invalid_argument);
    }
}

TEST_CASE("a failed op leaves the tape unchanged")
{
    tape<double> t;
    auto a = t.input(filled<double>({3, 2}, 1.0));
    auto b = t.input(filled<double>({4, 5}, 1.0));
    CHECK_THROWS(ops::add(a, b));
    CHECK_THROWS(ops::matmul(a, b));
    CHECK_THROWS(ops::reshape(a, {5}));
    CHECK_THROWS(ops::sum(a, {3}));
    CHECK(t.size() == 2);
}

TEST_CASE("masked_softmax with scale 0: every kept entry weighs the same, masked ones 0, no NaN")
{
    tape<double> t;
    const f64 X = {{1.0, -2.0, 3.0, 7.0}, {0.5, 0.5, 0.5, 0.5}};
    const mask_t keep = {{true, false, true, true}, {false, false, false, false}};
    for (double scale : {0.0, -0.0})
    {
        auto y = ops::masked_softmax(t.input(X), keep, scale);
        const f64 expected = {{1.0 / 3, 0.0, 1.0 / 3, 1.0 / 3}, {0.0, 0.0, 0.0, 0.0}};
        XGRAD_CHECK_CLOSE(y.value(), expected, 1e-15, 0.0);
    }
}
}  // namespace test_ops
