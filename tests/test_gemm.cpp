// kernels::gemm and each of its backends against a plain triple loop: transposed operands, beta = 0, 1
// and other values, odd sizes, k = 1, empty products, leading dimensions wider than the row, float and
// double, and sizes on both sides of the door's 128 and 256 boundaries and of the tiled backend's blocks.
// Only the backends this build has exist (kernels/gemm.hpp); cases about a missing one say so and skip.
#include <doctest/doctest.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm.hpp"

namespace test_gemm
{
namespace
{
using xgrad::kernels::gemm_backend;

struct problem
{
    bool ta, tb;
    std::size_t m, n, k;
    std::size_t pad_a = 0, pad_b = 0, pad_c = 0;  // leading dimension = row length + pad
};

std::string describe(const problem& p, gemm_backend backend, const char* dtype, double beta)
{
    return std::string(dtype) + " " + xgrad::kernels::name(backend) + (p.ta ? " A^T" : " A") + (p.tb ? " B^T" : " B") +
           " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
           " pads=" + std::to_string(p.pad_a) + "," + std::to_string(p.pad_b) + "," + std::to_string(p.pad_c) +
           " beta=" + std::to_string(beta);
}

template <class T>
std::vector<T> random_vector(std::size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<T> v(n);
    for (auto& x : v)
    {
        x = static_cast<T>(u(rng));
    }
    return v;
}

// One problem's operands and their product op(A) op(B) by the definition, summed in long double: made once
// per problem, and every backend and beta of the problem is checked against it.
template <class T>
struct operands
{
    std::size_t lda, ldb, ldc;
    std::vector<T> a, b;
    std::vector<long double> product;  // m x n, row-major
};

template <class T>
operands<T> make_operands(const problem& p, unsigned seed)
{
    const std::size_t a_rows = p.ta ? p.k : p.m, a_cols = p.ta ? p.m : p.k;
    const std::size_t b_rows = p.tb ? p.n : p.k, b_cols = p.tb ? p.k : p.n;
    operands<T> o{a_cols + p.pad_a, b_cols + p.pad_b, p.n + p.pad_c, {}, {}, {}};
    o.a = random_vector<T>(std::max<std::size_t>(a_rows * o.lda, 1), seed);
    o.b = random_vector<T>(std::max<std::size_t>(b_rows * o.ldb, 1), seed + 1);
    o.product.assign(p.m * p.n, 0.0L);
    for (std::size_t i = 0; i < p.m; ++i)
    {
        for (std::size_t j = 0; j < p.n; ++j)
        {
            long double acc = 0;
            for (std::size_t q = 0; q < p.k; ++q)
            {
                const T av = p.ta ? o.a[q * o.lda + i] : o.a[i * o.lda + q];
                const T bv = p.tb ? o.b[j * o.ldb + q] : o.b[q * o.ldb + j];
                acc += static_cast<long double>(av) * bv;
            }
            o.product[i * p.n + j] = acc;
        }
    }
    return o;
}

// Runs one problem through `backend` (or the calibrated door when backend is null) on a fresh C and
// compares every entry of C = op(A) op(B) + beta C with the definition, padding included (a GEMM must not
// write outside its m x n block).
template <class T>
void check(const problem& p, const operands<T>& o, const gemm_backend* backend, T beta, unsigned seed)
{
    const std::size_t ldc = o.ldc;
    auto c = random_vector<T>(std::max<std::size_t>(p.m * ldc, 1), seed);
    if (beta == T(0))
    {
        // beta = 0 overwrites C: a NaN already there must not leak into the result.
        for (std::size_t i = 0; i < p.m; ++i)
        {
            for (std::size_t j = 0; j < p.n; ++j)
            {
                c[i * ldc + j] = std::numeric_limits<T>::quiet_NaN();
            }
        }
    }
    auto expected = c;
    for (std::size_t i = 0; i < p.m; ++i)
    {
        for (std::size_t j = 0; j < p.n; ++j)
        {
            T& out = expected[i * ldc + j];
            const long double kept = beta == T(0) ? 0.0L : static_cast<long double>(beta) * out;
            out = static_cast<T>(o.product[i * p.n + j] + kept);
        }
    }
    if (backend)
    {
        xgrad::kernels::gemm_with(*backend, p.ta, p.tb, p.m, p.n, p.k, o.a.data(), o.lda, o.b.data(), o.ldb, beta,
                                  c.data(), ldc);
    }
    else
    {
        xgrad::kernels::gemm(p.ta, p.tb, p.m, p.n, p.k, o.a.data(), o.lda, o.b.data(), o.ldb, beta, c.data(), ldc);
    }
    const double tolerance = (sizeof(T) == 4 ? 2e-6 : 1e-14) * (static_cast<double>(p.k) + 2);
    double worst = 0;
    bool padding_intact = true;
    for (std::size_t i = 0; i < c.size(); ++i)
    {
        const bool inside = ldc > 0 && i / ldc < p.m && i % ldc < p.n;
        if (!inside)
        {
            padding_intact = padding_intact && c[i] == expected[i];
            continue;
        }
        const double err = std::abs(static_cast<double>(c[i]) - static_cast<double>(expected[i]));
        worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : std::max(worst, err);
    }
    const std::string what = describe(p, backend ? *backend : gemm_backend::openblas,
                                      sizeof(T) == 4 ? "float32" : "float64", static_cast<double>(beta)) +
                             (backend ? "" : " (calibrated door)");
    CHECK_MESSAGE(worst <= tolerance, what << ": max error " << worst << " > " << tolerance);
    CHECK_MESSAGE(padding_intact, what << ": wrote outside C's m x n block");
}

// Sizes around 16, 32, ..., 256 (the door switches backends at 128 and 256) and the tiled backend's
// blocks (64 x 128 x 256), odd sizes, k = 1 and empty sides.
const std::vector<problem>& problems()
{
    static const std::vector<problem> list = [] {
        std::vector<problem> out;
        const std::size_t shapes[][3] = {{1, 1, 1},    {3, 5, 7},     {16, 16, 16},  {17, 33, 1},   {64, 64, 64},
                                         {65, 129, 31}, {128, 128, 128}, {1, 300, 257}, {257, 3, 300}, {130, 260, 520},
                                         {0, 5, 4},    {5, 0, 4},     {5, 4, 0},     {33, 65, 1}};
        for (const auto& s : shapes)
        {
            for (int t = 0; t < 4; ++t)
            {
                out.push_back({(t & 1) != 0, (t & 2) != 0, s[0], s[1], s[2]});
            }
        }
        out.push_back({false, false, 37, 41, 43, 3, 5, 7});  // wider leading dimensions
        out.push_back({true, true, 37, 41, 43, 9, 1, 2});
        out.push_back({true, false, 70, 140, 270, 1, 2, 3});
        out.push_back({false, true, 70, 140, 270, 4, 0, 5});
        return out;
    }();
    return list;
}

// Says once per test case which backends this build lacks, so that a skipped case is never silent.
void note_missing_backends()
{
    if (!XGRAD_HAVE_ONEDNN)
    {
        MESSAGE("built without oneDNN (XGRAD_WITH_ONEDNN off or libdnnl-dev missing): its cases are skipped");
    }
    if (!XGRAD_HAVE_LIBXSMM)
    {
        MESSAGE("built without LIBXSMM (XGRAD_WITH_LIBXSMM off or libxsmm-dev missing): its cases are skipped");
    }
}

template <class T>
void check_every_backend()
{
    note_missing_backends();
    unsigned seed = 1;
    for (const problem& p : problems())
    {
        const operands<T> o = make_operands<T>(p, seed += 2);
        for (gemm_backend backend : xgrad::kernels::all_gemm_backends)
        {
            if (!xgrad::kernels::gemm_backend_supports(backend, sizeof(T) == 8, p.m, p.n, p.k))
            {
                continue;
            }
            for (T beta : {T(0), T(1), T(0.5)})
            {
                check<T>(p, o, &backend, beta, ++seed);
            }
        }
        for (T beta : {T(0), T(1)})
        {
            check<T>(p, o, nullptr, beta, ++seed);
        }
    }
}
}  // namespace

TEST_CASE("gemm: every backend agrees with the triple loop, float32")
{
    check_every_backend<float>();
}

TEST_CASE("gemm: every backend agrees with the triple loop, float64")
{
    check_every_backend<double>();
}

TEST_CASE("gemm: the build lists its backends, OpenBLAS always")
{
    const std::string built = xgrad::kernels::gemm_backends_built();
    CHECK(built.rfind("OpenBLAS", 0) == 0);
    CHECK((built.find("oneDNN") != std::string::npos) == bool(XGRAD_HAVE_ONEDNN));
    CHECK((built.find("LIBXSMM") != std::string::npos) == bool(XGRAD_HAVE_LIBXSMM));
    CHECK(std::size(xgrad::kernels::all_gemm_backends) == 1u + 2u * XGRAD_HAVE_ONEDNN + 2u * XGRAD_HAVE_LIBXSMM);
    CHECK(xgrad::kernels::all_gemm_backends[0] == gemm_backend::openblas);
    for (gemm_backend backend : xgrad::kernels::all_gemm_backends)
    {
        CHECK(std::string(xgrad::kernels::name(backend)) != "?");
    }
    MESSAGE("GEMM backends: " << built << "; rule: " << std::string(xgrad::kernels::gemm_rule_in_use()));
}

TEST_CASE("gemm: backends that cannot run a product refuse it by name")
{
    note_missing_backends();
#if XGRAD_HAVE_ONEDNN
    const double a = 1, b = 1;
    double c = 0;
    CHECK_FALSE(xgrad::kernels::gemm_backend_supports(gemm_backend::onednn, true, 4, 4, 4));
    CHECK_THROWS_WITH_AS(xgrad::kernels::gemm_with(gemm_backend::onednn, false, false, 1, 1, 1, &a, 1, &b, 1, 0.0, &c, 1),
                         doctest::Contains("onednn"), std::invalid_argument);
#endif
#if XGRAD_HAVE_LIBXSMM
    std::vector<float> big(300 * 300, 1.0f), out(300 * 300);
    CHECK_FALSE(xgrad::kernels::gemm_backend_supports(gemm_backend::libxsmm, false, 300, 300, 300));
    CHECK_THROWS_AS(xgrad::kernels::gemm_with(gemm_backend::libxsmm, false, false, 300, 300, 300, big.data(), 300,
                                              big.data(), 300, 0.0f, out.data(), 300),
                    std::invalid_argument);
#endif
    // OpenBLAS runs every size and dtype.
    for (bool dbl : {false, true})
    {
        CHECK(xgrad::kernels::gemm_backend_supports(gemm_backend::openblas, dbl, 3000, 3000, 3000));
    }
}

TEST_CASE("gemm: the door's rule sends each product to the fastest backend built, the same every time")
{
    using xgrad::kernels::gemm_choice;
    note_missing_backends();
    // OpenBLAS takes the large float64 products over an inner side above 64 when its kernels are the
    // CPU's best.
    const bool openblas_best = xgrad::kernels::openblas_runs_the_cpus_best_kernels();
    // doctest prints a const char* as a pointer; std::string prints the text.
    const std::string facts = std::string("OpenBLAS core ") + xgrad::kernels::openblas_core() +
                              (openblas_best ? ": " : ": not ") + "the CPU's best kernels";
    MESSAGE(facts);
    // Per-head sizes (every side <= 128, or <= 256 with B not transposed) and float64: LIBXSMM when built.
#if XGRAD_HAVE_LIBXSMM
    const gemm_backend small = gemm_backend::libxsmm, thin_double = gemm_backend::libxsmm_tiled;
    const gemm_backend large_double = openblas_best ? gemm_backend::openblas : gemm_backend::libxsmm_tiled;
#else
    const gemm_backend small = gemm_backend::openblas, thin_double = gemm_backend::openblas;
    const gemm_backend large_double = gemm_backend::openblas;
#endif
    // Larger float32 products: oneDNN's dnnl_sgemm when built.
#if XGRAD_HAVE_ONEDNN
    const gemm_backend large_float = gemm_backend::onednn;
#else
    const gemm_backend large_float = gemm_backend::openblas;
#endif
    CHECK(gemm_choice(false, false, true, 64, 64, 64) == small);
    CHECK(gemm_choice(false, true, false, 256, 64, 256) == small);
    CHECK(gemm_choice(false, false, true, 256, 256, 64) == large_float);
    CHECK(gemm_choice(false, false, false, 2048, 512, 512) == large_float);
    CHECK(gemm_choice(false, true, false, 512, 512, 2048) == large_float);
    CHECK(gemm_choice(true, false, true, 256, 256, 64) == small);
    CHECK(gemm_choice(true, false, false, 2048, 512, 512) == large_double);
    CHECK(gemm_choice(true, true, false, 512, 512, 2048) == large_double);
    CHECK(gemm_choice(true, false, true, 512, 512, 64) == thin_double);
    CHECK(gemm_choice(true, false, false, 1024, 192, 64) == thin_double);
    for (bool dbl : {false, true})
    {
        for (std::size_t side : {1u, 16u, 129u, 257u, 3000u})
        {
#if XGRAD_HAVE_LIBXSMM
            if (side <= 128)
            {
                CHECK(gemm_choice(dbl, false, false, side, side, side) == gemm_backend::libxsmm);
            }
#endif
            CHECK(xgrad::kernels::gemm_backend_supports(gemm_choice(dbl, false, true, side, 7, side), dbl, side, 7, side));
        }
    }
}
}  // namespace test_gemm
