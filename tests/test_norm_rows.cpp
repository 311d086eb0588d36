// The one-sweep row kernels of layer_norm and rms_norm (kernels/norm.hpp): fused == composed in float64 to
// 1e-12, values and every gradient, on rows shorter than a SIMD batch, with a tail, several batches
// long; rows on a large mean, constant rows, rows whose first entries lie far out (the second, centred
// sweep); float32 against float64 on inputs float32 holds exactly, so only the kernels' rounding counts;
// only dx, or only dw and db, wanted; the same bits on one thread and two (dw, db summed per block of
// rows).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "test_util.hpp"

#include "kernels/parallel.hpp"
#include "ops/composed.hpp"

namespace test_norm_rows
{
using namespace xgrad;

namespace
{
enum class rows_kind
{
    normal,       // N(0, 1)
    large_mean,   // 1e3 + N(0, 1): the plain sum of squares would lose 6 digits to cancellation
    far_first,    // the first 8 entries at +-100, the rest N(0, 1): the one-sweep shift is far off
    constant,     // every entry 2.5: var = 0
};

// (rows, d) values of the kind, rounded to float32 so both precisions see the same numbers.
test::f64 rows_of(rows_kind kind, std::size_t rows, std::size_t d, unsigned seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    test::f64 x = test::f64::from_shape({rows, d});
    for (std::size_t r = 0; r < rows; ++r)
    {
        for (std::size_t j = 0; j < d; ++j)
        {
            double v = normal(rng);
            if (kind == rows_kind::large_mean)
            {
                v += 1e3;
            }
            if (kind == rows_kind::far_first && j < 8)
            {
                v = r % 2 ? 100.0 : -100.0;
            }
            if (kind == rows_kind::constant)
            {
                v = 2.5;
            }
            x(r, j) = static_cast<float>(v);
        }
    }
    return x;
}

test::f64 float32_normal(const shape_t& shape, unsigned seed, double mean, double scale)
{
    test::f64 a = test::normal_array<double>(shape, seed, scale);
    for (double& v : a)
    {
        v = static_cast<float>(mean + v);
    }
    return a;
}

auto layer_norm = [](const auto& v) { return ops::layer_norm(v[0], v[1], v[2]); };
auto layer_norm_composed = [](const auto& v) { return ops::composed::layer_norm(v[0], v[1], v[2]); };
auto rms_norm = [](const auto& v) { return ops::rms_norm(v[0], v[1]); };
auto rms_norm_composed = [](const auto& v) { return ops::composed::rms_norm(v[0], v[1]); };

// x (rows, d), weight and (for LayerNorm) bias.
std::vector<test::f64> norm_inputs(const test::f64& x, unsigned seed, bool with_bias)
{
    const std::size_t d = x.shape()[1];
    std::vector<test::f64> in{x, float32_normal({d}, seed, 1.0, 0.2)};
    if (with_bias)
    {
        in.push_back(float32_normal({d}, seed + 1, 0.0, 0.2));
    }
    return in;
}

template <class F, class G>
void check_fused_equals_composed(F fused, G composed, const std::vector<test::f64>& in, unsigned seed)
{
    const auto a = test::evaluate_in<double>(fused, in, seed);
    const auto b = test::evaluate_in<double>(composed, in, seed);
    CHECK(test::max_relative_difference(a.value, b.value) <= 1e-12);
    for (std::size_t k = 0; k < in.size(); ++k)
    {
        CAPTURE(k);
        CHECK(test::max_relative_difference(a.grads[k], b.grads[k]) <= 1e-12);
    }
}

const rows_kind every_kind[] = {rows_kind::normal, rows_kind::large_mean, rows_kind::far_first,
                                rows_kind::constant};
}  // namespace

TEST_CASE("layer_norm, rms_norm row kernels = composed: d = 1, 7, 19, 128, 130; large mean, far first rows")
{
    unsigned seed = 1;
    for (std::size_t d : {1, 7, 19, 128, 130})
    {
        for (rows_kind kind : every_kind)
        {
            CAPTURE(d);
            CAPTURE(static_cast<int>(kind));
            const test::f64 x = rows_of(kind, 5, d, seed);
            const auto with_bias = norm_inputs(x, seed + 1, true), without = norm_inputs(x, seed + 1, false);
            check_fused_equals_composed(layer_norm, layer_norm_composed, with_bias, seed + 2);
            if (d > 1)  // at d = 1 RMSNorm's dx = r g w eps / (x^2 + eps) is all cancellation: its own test
            {           // (test_ops_variants.cpp) compares it against a floor of its terms' size
                check_fused_equals_composed(rms_norm, rms_norm_composed, without, seed + 2);
            }
            seed += 3;
        }
    }
}

TEST_CASE("layer_norm of a constant row: var = 0, y = bias and dw = 0 exactly, rows of dx sum to 0")
{
    const test::f64 x = rows_of(rows_kind::constant, 3, 19, 5);
    const std::vector<test::f64> in = norm_inputs(x, 6, true);
    const auto r = test::evaluate_in<double>(layer_norm, in, 7);
    for (std::size_t i = 0; i < r.value.size(); ++i)
    {
        CHECK(r.value.flat(i) == in[2].flat(i % 19));
    }
    CHECK(r.grads[1] == xt::zeros<double>({19}));
    for (std::size_t row = 0; row < 3; ++row)
    {
        double sum = 0, size = 0;
        for (std::size_t j = 0; j < 19; ++j)
        {
            sum += r.grads[0](row, j);
            size = std::max(size, std::abs(r.grads[0](row, j)));
        }
        CHECK(size > 0);
        CHECK(std::abs(sum) <= 1e-13 * size);
    }
}

namespace
{
// The float32 result's largest difference from the float64 one, over the largest |entry|: the value's,
// then each input's gradient's.
template <class F>
std::vector<double> float32_errors(F f, const std::vector<test::f64>& in)
{
    const auto lo = test::evaluate_in<float>(f, in, 13);
    const auto hi = test::evaluate_in<double>(f, in, 13);
    std::vector<double> errors{test::max_relative_difference(test::f64(lo.value), hi.value)};
    for (std::size_t k = 0; k < in.size(); ++k)
    {
        errors.push_back(test::max_relative_difference(test::f64(lo.grads[k]), hi.grads[k]));
    }
    return errors;
}
}  // namespace

TEST_CASE("layer_norm and rms_norm in float32 against float64: no worse than the two-pass kernels")
{
    // Inputs float32 holds exactly, so what is left is the kernels' rounding. The two-pass kernels these
    // replaced measured, over 4096 rows of 128: at most 6e-7 for y and dx and 2e-6 for dw and db (one
    // running sum over the rows) on N(0, 1) rows and rows with one far entry; on rows of mean 1e3, where
    // the mean's own rounding (3e-5 of 1e3's spacing, over a spread of 1) shows, 3e-5 for y, dx and dw.
    // A plain sum of squares would lose about 1e-1 there.
    for (rows_kind kind : every_kind)
    {
        for (std::size_t d : {19, 128})
        {
            CAPTURE(static_cast<int>(kind));
            CAPTURE(d);
            const double bound = kind == rows_kind::large_mean ? 4e-5 : 1e-6;
            const test::f64 x = rows_of(kind, 256, d, 11);
            for (double e : float32_errors(layer_norm, norm_inputs(x, 12, true)))
            {
                CHECK(e <= bound);
            }
            for (double e : float32_errors(rms_norm, norm_inputs(x, 12, false)))
            {
                CHECK(e <= 1e-6);
            }
        }
    }
}

TEST_CASE("layer_norm and rms_norm: only dx, or only dw and db, wanted")
{
    const test::f64 x = rows_of(rows_kind::normal, 6, 19, 21);
    const std::vector<test::f64> in = norm_inputs(x, 22, true);
    const test::f64 G = test::random_array({6, 19}, 23);
    for (bool x_wanted : {true, false})
    {
        CAPTURE(x_wanted);
        std::vector<array<double>> fused, composed;  // dx, or dw and db
        for (bool twin : {false, true})
        {
            tape<double> t;
            auto vx = t.input(in[0], "x", x_wanted), vw = t.input(in[1], "w", !x_wanted);
            auto vb = t.input(in[2], "b", !x_wanted);
            auto y = twin ? ops::composed::layer_norm(vx, vw, vb) : ops::layer_norm(vx, vw, vb);
            auto z = twin ? ops::composed::rms_norm(vx, vw) : ops::rms_norm(vx, vw);
            t.backward(ops::sum(ops::mul(ops::add(y, z), t.constant(G))));
            auto& out = twin ? composed : fused;
            if (x_wanted)
            {
                out = {vx.grad()};
            }
            else
            {
                out = {vw.grad(), vb.grad()};
            }
        }
        for (std::size_t k = 0; k < fused.size(); ++k)
        {
            CHECK(test::max_relative_difference(fused[k], composed[k]) <= 1e-12);
        }
    }
}

TEST_CASE("layer_norm and rms_norm: dw and db, summed per block of rows, are the same on 1 and 2 threads")
{
    // 1000 rows of 130: four blocks of partial sums, shared by two threads
    const test::f64 x = rows_of(rows_kind::normal, 1000, 130, 31);
    for (bool rms : {false, true})
    {
        CAPTURE(rms);
        const std::vector<test::f64> in = norm_inputs(x, 32, !rms);
        auto f = [rms](const auto& v) {
            return rms ? ops::rms_norm(v[0], v[1]) : ops::layer_norm(v[0], v[1], v[2]);
        };
        const int threads_before = num_threads();
        set_num_threads(1);
        const auto serial = test::evaluate_in<float>(f, in, 33);
        set_num_threads(2);
        const auto parallel = test::evaluate_in<float>(f, in, 33);
        set_num_threads(threads_before);
        CHECK(serial.value == parallel.value);
        for (std::size_t k = 0; k < in.size(); ++k)
        {
            CAPTURE(k);
            CHECK(serial.grads[k] == parallel.grads[k]);
        }
    }
}
}  // namespace test_norm_rows
