// GEMM: every product goes to the backend measured fastest for its shape class, by a fixed rule.
//
// Which library is fastest depends on the CPU and on the shape. OpenBLAS picks its kernels from the CPU
// model it recognises: on a CPU newer than Debian's 0.3.21 it falls back to SSE3 ("Prescott") kernels at
// a tenth of the FMA peak, and it did on the project's 2023 Xeon. oneDNN and LIBXSMM generate their
// kernels at run time for the vector ISA the CPU reports (AVX2, AVX-512, ...), whatever its model. The
// rule sends small products to LIBXSMM, large float32 ones to oneDNN, and large float64 ones to OpenBLAS
// only when its kernels are the best the CPU's flags allow, where the bench's GEMM table measured it
// ahead (docs/performance.md):
//
//   float32   every side <= 128, or every side <= 256 with B not transposed: one LIBXSMM kernel
//             otherwise: oneDNN's dnnl_sgemm (OpenBLAS's AVX2 kernels led it by 3-6 points of the FMA
//             peak on square products on an AMD EPYC, but fell far behind on the GPT's projections
//             over an inner side of 64, where their packing costs more than the products)
//   float64   every side <= 256: one LIBXSMM kernel
//             otherwise, when OpenBLAS runs the CPU's best kernels and the inner side k exceeds 64:
//             OpenBLAS (on an AMD EPYC's weight gradients 87-92% of the FMA peak against 46-55%)
//             otherwise: LIBXSMM kernels over packed blocks (oneDNN has no double GEMM)
//   float32 at bf16 matmul precision (kernels/precision.hpp): A and B rounded to bfloat16, then
//             at least 2^21 multiply-adds: oneDNN's matmul primitive on bfloat16 operands (AMX or
//             AVX512_BF16), float32 result; fewer: the float32 rule above on the rounded values
//
// OpenBLAS is the one backend every build has (CMakeLists.txt: XGRAD_WITH_ONEDNN, XGRAD_WITH_LIBXSMM).
// A product the rule sends to a backend this build lacks runs on OpenBLAS instead; without oneDNN there
// is no bf16 precision (xgrad::bf16_supported() is false) and bf16 scopes run float32. When the door runs
// OpenBLAS on older kernels than the CPU's flags allow, it says so once on stderr.
//
// The rule follows the bench's GEMM backend table (docs/performance.md), which times every backend on the
// products of an MHA step in every run. It depends on the CPU's flags and OpenBLAS's core alone, never on
// a timing (nor on a CPU's name): a first version timed each
// shape class on first use and kept the winner, and on a shared machine two processes then chose
// differently where two backends run within noise of each other, so the same inputs gave gradients
// differing in the last bits from one run of the .npy tool to the next. Results must not depend on timing.
#include "kernels/gemm.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/bf16.hpp"
#include "kernels/gemm_backends.hpp"
#include "kernels/precision.hpp"

namespace xgrad::kernels
{
namespace
{
// CBLAS, LIBXSMM and oneDNN's signatures take int sizes: refuse anything that would wrap.
int checked(std::size_t n)
{
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    {
        throw std::invalid_argument("matmul: size " + std::to_string(n) + " exceeds the GEMM limit of " +
                                    std::to_string(std::numeric_limits<int>::max()));
    }
    return static_cast<int>(n);
}

template <class T>
void run(gemm_backend backend, const backends::product& p, const T* a, const T* b, T beta, T* c)
{
    switch (backend)
    {
    case gemm_backend::openblas:
        return backends::openblas(p, a, b, beta, c);
#if XGRAD_HAVE_ONEDNN
    case gemm_backend::onednn:
        if constexpr (std::is_same_v<T, float>)
        {
            return backends::onednn(p, a, b, beta, c);
        }
        break;
    case gemm_backend::onednn_matmul:
        if constexpr (std::is_same_v<T, float>)
        {
            return backends::onednn_matmul(p, a, b, beta, c);
        }
        break;
#endif
#if XGRAD_HAVE_LIBXSMM
    case gemm_backend::libxsmm:
        return backends::libxsmm_whole(p, a, b, beta, c);
    case gemm_backend::libxsmm_tiled:
        return backends::libxsmm_tiled(p, a, b, beta, c);
#endif
    }
    throw std::logic_error("gemm: backend " + std::string(name(backend)) + " cannot run this product");
}

// The fixed rule above, on the backends this build has.
#if XGRAD_HAVE_LIBXSMM
constexpr gemm_backend small_products = gemm_backend::libxsmm, packed_double = gemm_backend::libxsmm_tiled;
#else
constexpr gemm_backend small_products = gemm_backend::openblas, packed_double = gemm_backend::openblas;
#endif
#if XGRAD_HAVE_ONEDNN
constexpr gemm_backend large_float = gemm_backend::onednn;
#else
constexpr gemm_backend large_float = gemm_backend::openblas;
#endif

// OpenBLAS packs both operands before it multiplies: over an inner side of 64 or less the packing
// costs more than the packed blocks of LIBXSMM, which win there.
gemm_backend large_double(std::size_t k)
{
    return backends::openblas_runs_the_cpus_best_kernels() && k > 64 ? gemm_backend::openblas : packed_double;
}

template <class T>
gemm_backend backend_for(bool tb, std::size_t m, std::size_t n, std::size_t k)
{
    const std::size_t largest = std::max({m, n, k});
    if constexpr (std::is_same_v<T, float>)
    {
        return largest <= 128 || (largest <= 256 && !tb) ? small_products : large_float;
    }
    else
    {
        return largest <= 256 ? small_products : large_double(k);
    }
}

#if XGRAD_HAVE_ONEDNN
// The bf16 rule: operands rounded to bfloat16 either way, so the two paths give the same products
// (exact in float32) up to the order of the float32 sums.
void gemm_bf16(const backends::product& p, const float* a, const float* b, float beta, float* c)
{
    const auto work = static_cast<std::uint64_t>(p.m) * static_cast<std::uint64_t>(p.n) * static_cast<std::uint64_t>(p.k);
    if (work >= bf16::library_work)
    {
        return backends::onednn_bf16(p, a, b, beta, c);
    }
    const backends::rounded_operands r = backends::round_operands_to_bf16(p, a, b);
    run(backend_for<float>(p.tb, static_cast<std::size_t>(p.m), static_cast<std::size_t>(p.n),
                           static_cast<std::size_t>(p.k)),
        r.p, r.a, r.b, beta, c);
}
#endif

// What every entry point shares: empty products, k = 0, any beta, the int limits. Then `body` runs the
// product with beta 0 or 1.
template <class T, class Body>
void with_checked_product(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, std::size_t lda,
                          std::size_t ldb, T beta, T* c, std::size_t ldc, Body&& body)
{
    if (m == 0 || n == 0)
    {
        return;
    }
    if (beta != T(0) && beta != T(1))
    {
        for (std::size_t i = 0; i < m; ++i)
        {
            for (std::size_t j = 0; j < n; ++j)
            {
                c[i * ldc + j] *= beta;
            }
        }
        beta = T(1);
    }
    if (k == 0)
    {
        if (beta == T(0))
        {
            for (std::size_t i = 0; i < m; ++i)
            {
                std::fill(c + i * ldc, c + i * ldc + n, T(0));
            }
        }
        return;
    }
    const backends::product p{ta, tb, checked(m), checked(n), checked(k), checked(lda), checked(ldb), checked(ldc)};
    body(p, beta);
}

template <class T>
void gemm_any(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda,
              const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc)
{
    with_checked_product(ta, tb, m, n, k, lda, ldb, beta, c, ldc, [&](const backends::product& p, T b01) {
#if XGRAD_HAVE_ONEDNN
        if constexpr (std::is_same_v<T, float>)
        {
            if (current_matmul_precision() == matmul_precision::bf16)
            {
                return gemm_bf16(p, a, b, b01, c);
            }
        }
#endif
        const gemm_backend backend = backend_for<T>(tb, m, n, k);
        if (backend == gemm_backend::openblas)
        {
            backends::say_once_if_openblas_kernels_are_old();
        }
        run(backend, p, a, b, b01, c);
    });
}

template <class T>
void gemm_with_any(gemm_backend backend, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a,
                   std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc)
{
    if (!gemm_backend_supports(backend, std::is_same_v<T, double>, m, n, k))
    {
        throw std::invalid_argument(std::string("gemm: backend ") + name(backend) + " cannot run a " +
                                    std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k) +
                                    (std::is_same_v<T, double> ? " float64" : " float32") + " product");
    }
    with_checked_product(ta, tb, m, n, k, lda, ldb, beta, c, ldc,
                         [&](const backends::product& p, T b01) { run(backend, p, a, b, b01, c); });
}
}  // namespace

const char* name(gemm_backend backend)
{
    switch (backend)
    {
    case gemm_backend::openblas:
        return "openblas";
#if XGRAD_HAVE_ONEDNN
    case gemm_backend::onednn:
        return "onednn";
    case gemm_backend::onednn_matmul:
        return "onednn_matmul";
#endif
#if XGRAD_HAVE_LIBXSMM
    case gemm_backend::libxsmm:
        return "libxsmm";
    case gemm_backend::libxsmm_tiled:
        return "libxsmm_tiled";
#endif
    }
    return "?";
}

// The sizes and dtype matter only to backends a build may lack.
bool gemm_backend_supports(gemm_backend backend, [[maybe_unused]] bool double_precision,
                           [[maybe_unused]] std::size_t m, [[maybe_unused]] std::size_t n,
                           [[maybe_unused]] std::size_t k)
{
    switch (backend)
    {
#if XGRAD_HAVE_ONEDNN
    case gemm_backend::onednn:
    case gemm_backend::onednn_matmul:
        return !double_precision;
#endif
#if XGRAD_HAVE_LIBXSMM
    case gemm_backend::libxsmm:
    {
        const auto side = static_cast<std::size_t>(backends::libxsmm_whole_side);
        return m <= side && n <= side && k <= side;
    }
#endif
    default:
        return true;
    }
}

void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
          const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc)
{
    gemm_any(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const double* a, std::size_t lda,
          const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc)
{
    gemm_any(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm_with(gemm_backend backend, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a,
               std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc)
{
    gemm_with_any(backend, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm_with(gemm_backend backend, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const double* a,
               std::size_t lda, const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc)
{
    gemm_with_any(backend, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

gemm_backend gemm_choice(bool double_precision, bool, bool tb, std::size_t m, std::size_t n, std::size_t k)
{
    return double_precision ? backend_for<double>(tb, m, n, k) : backend_for<float>(tb, m, n, k);
}

const char* gemm_backends_built()
{
    return XGRAD_HAVE_ONEDNN && XGRAD_HAVE_LIBXSMM ? "OpenBLAS, oneDNN, LIBXSMM"
           : XGRAD_HAVE_ONEDNN                     ? "OpenBLAS, oneDNN"
           : XGRAD_HAVE_LIBXSMM                    ? "OpenBLAS, LIBXSMM"
                                                   : "OpenBLAS";
}

const char* gemm_rule_in_use()
{
    static const std::string rule = std::string("float32 small: ") + name(small_products) +
                                    ", float32 large: " + name(large_float) + ", float64 small: " +
                                    name(small_products) + ", float64 large: " + name(large_double(65)) +
                                    ", float64 large with k <= 64: " + name(large_double(64)) +
                                    (XGRAD_HAVE_ONEDNN ? ", bf16 large: onednn_matmul" : ", bf16: not built");
    return rule.c_str();
}

const char* openblas_core()
{
    return backends::openblas_core();
}

bool openblas_runs_the_cpus_best_kernels()
{
    return backends::openblas_runs_the_cpus_best_kernels();
}
}  // namespace xgrad::kernels
