// The bf16 matmul precision (kernels/precision.hpp): operands rounded to bfloat16 with ties to even and
// accumulation in float32, for every GEMM shape class and transpose flag (on both sides of the door's
// bf16 threshold: oneDNN's bf16 primitive, or the float32 rule on rounded operands), beta 0 and 1, padded
// leading dimensions; the setting's scope, its reach into worker threads, float64 left alone; the fused
// attention's products, also against a float64 reference that rounds exactly what its products take. On
// a CPU without bfloat16 dot products the scope must leave every product float32. (A small bf16 training
// run against float32's losses is in test_train.cpp: it needs train/.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/gemm.hpp"
#include "kernels/parallel.hpp"
#include "kernels/precision.hpp"
#include "test_util.hpp"

namespace test_precision
{
using xgrad::matmul_precision;
using xgrad::precision_scope;

namespace
{
// x rounded to the nearest bfloat16 (8 significant bits), ties to even, by frexp and nearbyint (the
// library rounds by integer bit arithmetic instead). Normal floats only, as the tests use.
float bf16_reference(float x)
{
    int exponent = 0;
    const double fraction = std::frexp(static_cast<double>(x), &exponent);  // |fraction| in [0.5, 1)
    return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(fraction, 8)), exponent - 8));
}

// a * b through the GEMM door as a 1 x 1 x 1 product.
float door_product(float a, float b)
{
    float c = 0;
    xgrad::kernels::gemm(false, false, 1, 1, 1, &a, 1, &b, 1, 0.0f, &c, 1);
    return c;
}

struct shape
{
    bool ta, tb;
    std::size_t m, n, k;
};

std::vector<float> random_floats(std::size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> v(n);
    for (auto& x : v)
    {
        x = u(rng);
    }
    return v;
}

struct errors
{
    double vs_rounded = 0;  // worst |C - ref(rounded operands)| / (sum |a~ b~| + |C before|)
    double vs_float = 0;    // worst |C - ref(float operands)| / (sum |a b| + |C before|)
    bool padding_intact = true;
};

// Runs C = op(A) op(B) + beta C through the door at the calling thread's precision and measures C
// against two double references: with the operands rounded to bfloat16, and as given.
errors measure(const shape& s, float beta, unsigned seed)
{
    const std::size_t pad = 3;
    const std::size_t a_rows = s.ta ? s.k : s.m, a_cols = s.ta ? s.m : s.k;
    const std::size_t b_rows = s.tb ? s.n : s.k, b_cols = s.tb ? s.k : s.n;
    const std::size_t lda = a_cols + pad, ldb = b_cols + pad, ldc = s.n + pad;
    const auto a = random_floats(a_rows * lda, seed), b = random_floats(b_rows * ldb, seed + 1);
    const auto c0 = random_floats(s.m * ldc, seed + 2);
    std::vector<float> a16 = a, b16 = b;
    for (auto* v : {&a16, &b16})
    {
        for (float& x : *v)
        {
            x = bf16_reference(x);
        }
    }
    auto c = c0;
    xgrad::kernels::gemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    errors e;
    for (std::size_t i = 0; i < s.m; ++i)
    {
        for (std::size_t j = 0; j < ldc; ++j)
        {
            if (j >= s.n)
            {
                e.padding_intact = e.padding_intact && c[i * ldc + j] == c0[i * ldc + j];
                continue;
            }
            double rounded = 0, exact = 0, rounded_abs = 0, exact_abs = 0;
            for (std::size_t q = 0; q < s.k; ++q)
            {
                const float av = s.ta ? a[q * lda + i] : a[i * lda + q];
                const float bv = s.tb ? b[j * ldb + q] : b[q * ldb + j];
                const double ar = s.ta ? a16[q * lda + i] : a16[i * lda + q];
                const double br = s.tb ? b16[j * ldb + q] : b16[q * ldb + j];
                rounded += ar * br;
                rounded_abs += std::fabs(ar * br);
                exact += static_cast<double>(av) * bv;
                exact_abs += std::fabs(static_cast<double>(av) * bv);
            }
            const double before = beta == 0.0f ? 0.0 : static_cast<double>(c0[i * ldc + j]);
            const double got = static_cast<double>(c[i * ldc + j]) - before;
            e.vs_rounded = std::max(e.vs_rounded, std::fabs(got - rounded) / (rounded_abs + std::fabs(before)));
            e.vs_float = std::max(e.vs_float, std::fabs(got - exact) / (exact_abs + std::fabs(before)));
        }
    }
    return e;
}

// The product classes of an MHA and GPT step (as in the bench's GEMM table) and the edges.
const shape shapes[] = {
    {false, false, 1, 1, 1},       {false, false, 1, 7, 5},       {false, false, 9, 1, 4},
    {false, false, 5, 6, 1},       {false, false, 16, 32, 32},    {false, true, 16, 16, 8},
    {false, false, 256, 128, 128}, {false, true, 64, 64, 32},     {false, true, 128, 128, 32},
    {false, false, 256, 64, 256},  {true, false, 256, 64, 256},   {false, true, 256, 256, 64},
    {false, false, 320, 384, 256}, {false, true, 320, 384, 256},  {true, false, 256, 384, 320},
    {true, true, 70, 33, 129},     {false, false, 300, 200, 100}, {true, false, 65, 64, 512},
};
}  // namespace

TEST_CASE("bf16 products: operands rounded to bfloat16 (ties to even), accumulated in float32")
{
    if (!xgrad::bf16_supported())
    {
        MESSAGE("no bf16 products (a CPU without AVX512_BF16 or AMX-BF16, or a build without oneDNN): "
                "only the float32 fallback is checked");
        return;
    }
    const precision_scope bf16(matmul_precision::bf16);
    REQUIRE(xgrad::current_matmul_precision() == matmul_precision::bf16);
    const float ulp = std::ldexp(1.0f, -7);  // bfloat16's spacing in [1, 2)
    CHECK(door_product(1.0f + ulp / 2, 1.0f) == 1.0f);                          // tie, down to even
    CHECK(door_product(1.0f + 3 * ulp / 2, 1.0f) == 1.0f + 2 * ulp);             // tie, up to even
    CHECK(door_product(1.0f + ulp / 2 + std::ldexp(1.0f, -20), 1.0f) == 1.0f + ulp);  // above the tie
    CHECK(door_product(-(1.0f + 3 * ulp / 2), 1.0f) == -(1.0f + 2 * ulp));
    CHECK(door_product(3.0f, 1.0f + ulp / 4) == 3.0f);  // the other operand is rounded too
    CHECK(std::isnan(door_product(std::nanf(""), 1.0f)));
    CHECK(bf16_reference(1.0f + 3 * ulp / 2) == 1.0f + 2 * ulp);  // the test's own rounding agrees
}

TEST_CASE("bf16 products of every shape class and transpose flag stay within bfloat16 rounding bounds")
{
    if (!xgrad::bf16_supported())
    {
        MESSAGE("no bf16 products (a CPU without AVX512_BF16 or AMX-BF16, or a build without oneDNN): "
                "the bounds are not checked");
        return;
    }
    const precision_scope bf16(matmul_precision::bf16);
    const double unit = std::ldexp(1.0, -8);  // bfloat16's unit roundoff
    unsigned seed = 1;
    for (const shape& s : shapes)
    {
        for (float beta : {0.0f, 1.0f})
        {
            const errors e = measure(s, beta, seed += 3);
            CAPTURE(s.ta);
            CAPTURE(s.tb);
            CAPTURE(s.m);
            CAPTURE(s.n);
            CAPTURE(s.k);
            CAPTURE(beta);
            // float32 accumulation of exactly representable products: (k + 2) float32 roundoffs
            CHECK(e.vs_rounded <= (static_cast<double>(s.k) + 2) * std::ldexp(1.0, -23));
            // each product of two rounded operands is off by at most 2u + u^2 of |a b|
            CHECK(e.vs_float <= (2 * unit + unit * unit) * 1.001 + (static_cast<double>(s.k) + 2) * std::ldexp(1.0, -23));
            CHECK(e.padding_intact);
            if (s.k >= 8)
            {
                CHECK(e.vs_float > 1e-5);  // the operands were rounded: far beyond float32's error
            }
        }
    }
}

TEST_CASE("the precision scope restores the previous setting, reaches worker threads, leaves float64 alone")
{
    const float halfway = 1.0f + std::ldexp(1.0f, -8);
    CHECK(xgrad::current_matmul_precision() == matmul_precision::fp32);
    CHECK(door_product(halfway, 1.0f) == halfway);
    {
        const precision_scope bf16(matmul_precision::bf16);
        const bool rounds = xgrad::bf16_supported();
        CHECK(door_product(halfway, 1.0f) == (rounds ? 1.0f : halfway));
        {
            const precision_scope fp32(matmul_precision::fp32);
            CHECK(door_product(halfway, 1.0f) == halfway);
        }
        CHECK(door_product(halfway, 1.0f) == (rounds ? 1.0f : halfway));
        const double halfway64 = 1.0 + std::ldexp(1.0, -8), one = 1.0;
        double c = 0;
        xgrad::kernels::gemm(false, false, 1, 1, 1, &halfway64, 1, &one, 1, 0.0, &c, 1);
        CHECK(c == halfway64);

        xgrad::set_num_threads(2);
        std::vector<float> results(64, 0.0f);
        xgrad::kernels::parallel_for(results.size(), [&](std::size_t i) { results[i] = door_product(halfway, 1.0f); });
        xgrad::set_num_threads(1);
        for (float r : results)
        {
            CHECK(r == (rounds ? 1.0f : halfway));
        }
    }
    CHECK(xgrad::current_matmul_precision() == matmul_precision::fp32);
    CHECK(door_product(halfway, 1.0f) == halfway);
}

TEST_CASE("precision names")
{
    CHECK(xgrad::parse_matmul_precision("fp32") == matmul_precision::fp32);
    CHECK(xgrad::parse_matmul_precision("bf16") == matmul_precision::bf16);
    CHECK(std::string(xgrad::name(matmul_precision::bf16)) == "bf16");
    CHECK(xgrad::test::invalid_argument_message([] { xgrad::parse_matmul_precision("fp16"); })
              .find("'fp16'") != std::string::npos);
}

TEST_CASE("the fused attention's products run in bf16 too, close to float32")
{
    using namespace xgrad;
    const std::size_t B = 2, H = 2, T = 70, dh = 16;  // two query tiles, a partial one
    auto run = [&](matmul_precision precision) {
        const precision_scope scope(precision);
        tape<float> t;
        const auto q = t.input(xt::cast<float>(test::random_array({B, H, T, dh}, 1)));
        const auto k = t.input(xt::cast<float>(test::random_array({B, H, T, dh}, 2)));
        const auto v = t.input(xt::cast<float>(test::random_array({B, H, T, dh}, 3)));
        const auto y = ops::attention(q, k, v, nullptr, true);
        t.backward(ops::sum(ops::mul(y, y)));
        return std::vector<array<float>>{y.value(), q.grad(), k.grad(), v.grad()};
    };
    const auto fp32 = run(matmul_precision::fp32);
    const auto bf16 = run(matmul_precision::bf16);
    for (std::size_t i = 0; i < fp32.size(); ++i)
    {
        const double scale = xt::amax(xt::abs(fp32[i]))();
        const double diff = xt::amax(xt::abs(fp32[i] - bf16[i]))();
        CAPTURE(i);
        CHECK(diff <= 0.03 * scale);  // a few bfloat16 roundoffs through two products and a softmax
        if (bf16_supported())
        {
            CHECK(diff > 1e-5 * scale);
        }
    }
}

namespace
{
using xgrad::array;

array<float> bf16_values(const array<float>& x)
{
    array<float> out = x;
    for (float& value : out)
    {
        value = bf16_reference(value);
    }
    return out;
}

// One head of causal attention with T <= 64 (one tile), in float64, rounding exactly the operands the
// fused kernel's products take at bf16 precision: Q, K, V and dO (given rounded), the forward's P (the
// unnormalised exp(scale S - row max)) and the backward's P and dS. `round_tiles` false leaves P and dS
// unrounded: the reference of a kernel that rounded only its inputs.
struct one_head_reference
{
    std::vector<double> out, dq, dk, dv;
};

one_head_reference reference_head(const float* q, const float* k, const float* v, const float* d_out,
                                  const float* d_out_rounded, std::size_t T, std::size_t dh, bool round_tiles)
{
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    auto rounded = [&](double x) { return round_tiles ? double(bf16_reference(static_cast<float>(x))) : x; };
    auto dot = [dh](const float* a, const float* b) {
        double s = 0;
        for (std::size_t c = 0; c < dh; ++c)
        {
            s += double(a[c]) * double(b[c]);
        }
        return s;
    };
    const std::vector<double> zeros(T * dh, 0.0);
    one_head_reference r{zeros, zeros, zeros, zeros};
    std::vector<double> lse(T);
    for (std::size_t i = 0; i < T; ++i)  // forward
    {
        double row_max = -INFINITY, l = 0;
        for (std::size_t j = 0; j <= i; ++j)
        {
            row_max = std::max(row_max, scale * dot(q + i * dh, k + j * dh));
        }
        for (std::size_t j = 0; j <= i; ++j)
        {
            const double p = std::exp(scale * dot(q + i * dh, k + j * dh) - row_max);
            l += p;
            for (std::size_t c = 0; c < dh; ++c)
            {
                r.out[i * dh + c] += rounded(p) * v[j * dh + c];
            }
        }
        for (std::size_t c = 0; c < dh; ++c)
        {
            r.out[i * dh + c] /= l;
        }
        lse[i] = row_max + std::log(l);
    }
    for (std::size_t i = 0; i < T; ++i)  // backward
    {
        double D = 0;
        for (std::size_t c = 0; c < dh; ++c)
        {
            D += double(d_out[i * dh + c]) * r.out[i * dh + c];
        }
        for (std::size_t j = 0; j <= i; ++j)
        {
            const double p = std::exp(scale * dot(q + i * dh, k + j * dh) - lse[i]);
            const double ds = rounded(scale * p * (dot(d_out_rounded + i * dh, v + j * dh) - D));
            for (std::size_t c = 0; c < dh; ++c)
            {
                r.dv[j * dh + c] += rounded(p) * d_out_rounded[i * dh + c];
                r.dq[i * dh + c] += ds * k[j * dh + c];
                r.dk[j * dh + c] += ds * q[i * dh + c];
            }
        }
    }
    return r;
}

// The median over rows of dh entries of ||a_row - b_row|| / ||b_row||. A rounding that lands on the other
// side of a bfloat16 tie in the kernel than in the float64 reference (their P and dS differ by float32
// roundoff) moves a whole row or two; the median ignores those, where a tile left unrounded moves all.
double median_row_distance(const array<float>& a, const std::vector<double>& b, std::size_t dh)
{
    std::vector<double> rows;
    for (std::size_t r = 0; r * dh < b.size(); ++r)
    {
        double diff = 0, norm = 0;
        for (std::size_t c = r * dh; c < (r + 1) * dh; ++c)
        {
            diff += (a.flat(c) - b[c]) * (a.flat(c) - b[c]);
            norm += b[c] * b[c];
        }
        rows.push_back(norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff));
    }
    std::nth_element(rows.begin(), rows.begin() + rows.size() / 2, rows.end());
    return rows[rows.size() / 2];
}
}  // namespace

TEST_CASE("the fused attention at bf16 rounds every operand of its products: Q, K, V, dO, and each P and dS tile")
{
    using namespace xgrad;
    if (!bf16_supported())
    {
        MESSAGE("this CPU has no bfloat16 dot products: nothing to compare");
        return;
    }
    const std::size_t T = 48, dh = 16;  // one head, one tile
    const array<float> q = xt::cast<float>(test::random_array({1, 1, T, dh}, 11, -2, 2));
    const array<float> k = xt::cast<float>(test::random_array({1, 1, T, dh}, 12, -2, 2));
    const array<float> v = xt::cast<float>(test::random_array({1, 1, T, dh}, 13));
    const array<float> d_out = xt::cast<float>(test::random_array({1, 1, T, dh}, 14));
    for (int threads : {1, 2})
    {
        CAPTURE(threads);
        set_num_threads(threads);
        const precision_scope bf16(matmul_precision::bf16);
        const auto fwd = kernels::attention_forward(q, k, v, nullptr, true);
        const auto grads =
            kernels::attention_backward(q, k, v, fwd.output, fwd.log_sum_exp, d_out, nullptr, true);
        const array<float> qr = bf16_values(q), kr = bf16_values(k), vr = bf16_values(v);
        const array<float> dor = bf16_values(d_out);
        for (bool round_tiles : {true, false})
        {
            CAPTURE(round_tiles);
            const one_head_reference ref =
                reference_head(qr.data(), kr.data(), vr.data(), d_out.data(), dor.data(), T, dh, round_tiles);
            const double distances[] = {
                median_row_distance(fwd.output, ref.out, dh), median_row_distance(grads.q, ref.dq, dh),
                median_row_distance(grads.k, ref.dk, dh), median_row_distance(grads.v, ref.dv, dh)};
            for (double distance : distances)
            {
                // float32 sums against float64 ones, ~1e-7 here; an unrounded P or dS tile costs ~1e-3
                if (round_tiles)
                {
                    CHECK(distance < 2e-6);
                }
                else
                {
                    CHECK(distance > 2e-4);
                }
            }
        }
    }
    set_num_threads(1);
}
}  // namespace test_precision
