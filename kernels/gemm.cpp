// GEMM: small products through LIBXSMM's JIT-generated kernels, the rest through OpenBLAS's CBLAS.
// Measured on this machine (f32, one thread): at the sizes of per-head attention (every side <= 128)
// LIBXSMM runs at 74-82 GFLOP/s where OpenBLAS gets 37-51 (its packing does not pay off there); from
// 256 on OpenBLAS is as fast or faster. xgrad runs both single-threaded and parallelises across
// independent matrices itself (see ops/matmul.cpp).
#include "kernels/gemm.hpp"

#include <cblas.h>
#include <libxsmm.h>

#include <array>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace xgrad::kernels
{
namespace
{
constexpr std::size_t small_side = 128;  // LIBXSMM when m, n and k are all at most this

// OpenBLAS starts one thread per core unless told otherwise; ask once, before the first GEMM.
void init_once()
{
    static const bool done = [] {
        openblas_set_num_threads(1);
        libxsmm_init();
        return true;
    }();
    (void)done;
}

CBLAS_TRANSPOSE flag(bool t)
{
    return t ? CblasTrans : CblasNoTrans;
}

// CBLAS takes int sizes: refuse anything that would wrap instead of multiplying garbage.
int i(std::size_t n)
{
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    {
        throw std::invalid_argument("matmul: size " + std::to_string(n) + " exceeds the BLAS limit of " +
                                    std::to_string(std::numeric_limits<int>::max()));
    }
    return static_cast<int>(n);
}

void cblas(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float beta,
           float* c, int ldc)
{
    cblas_sgemm(CblasRowMajor, flag(ta), flag(tb), m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

void cblas(bool ta, bool tb, int m, int n, int k, const double* a, int lda, const double* b, int ldb, double beta,
           double* c, int ldc)
{
    cblas_dgemm(CblasRowMajor, flag(ta), flag(tb), m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

libxsmm_smmfunction make_kernel(int m, int n, int k, int lda, int ldb, int ldc, float beta, int flags)
{
    const float alpha = 1;
    return libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
}

libxsmm_dmmfunction make_kernel(int m, int n, int k, int lda, int ldb, int ldc, double beta, int flags)
{
    const double alpha = 1;
    return libxsmm_dmmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
}

// LIBXSMM's own lookup hashes a whole descriptor (~1000 instructions, as much as a 16x16x8 product);
// an MHA step asks for the same few shapes again and again, so remember the last ones per thread.
template <class T>
auto kernel_for(int m, int n, int k, int lda, int ldb, int ldc, T beta, int flags)
{
    using kernel = decltype(make_kernel(m, n, k, lda, ldb, ldc, beta, flags));
    struct entry
    {
        std::array<int, 8> key{};
        kernel fn = nullptr;
    };
    thread_local std::array<entry, 64> cache{};
    const std::array<int, 8> key{m, n, k, lda, ldb, ldc, beta == T(0) ? 0 : 1, flags};
    std::size_t hash = 0;
    for (int v : key)
    {
        hash = hash * 31 + static_cast<std::size_t>(v);
    }
    entry& e = cache[hash % cache.size()];
    if (!e.fn || e.key != key)
    {
        e.key = key;
        e.fn = make_kernel(m, n, k, lda, ldb, ldc, beta, flags);
    }
    return e.fn;
}

// A rows x cols block with leading dimension ld, transposed into `out` (cols x rows, dense).
template <class T>
const T* transposed(const T* x, int rows, int cols, int ld, std::vector<T>& out)
{
    const std::size_t size = static_cast<std::size_t>(rows) * cols;
    if (out.size() < size)
    {
        out.resize(size);  // grows only: the buffer is reused across calls
    }
    T* dst = out.data();
    for (int c = 0; c < cols; ++c)
    {
        const T* src = x + c;
        for (int r = 0; r < rows; ++r)
        {
            dst[r] = src[static_cast<std::size_t>(r) * ld];
        }
        dst += rows;
    }
    return out.data();
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: LIBXSMM (column-major) gets
// op(B) as its left operand and op(A) as its right. A transposed A is the kernel's TRANS_B flag; its
// JIT kernels take no TRANS_A, so a transposed B is first copied into its plain layout (k n numbers,
// against m n k multiply-adds). Returns false when no kernel could be made (then OpenBLAS runs).
template <class T>
bool small_gemm(bool ta, bool tb, int m, int n, int k, const T* a, int lda, const T* b, int ldb, T beta, T* c,
                int ldc)
{
    thread_local std::vector<T> b_plain;
    const int flags = ta ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
    const auto kernel = kernel_for(n, m, k, tb ? n : ldb, lda, ldc, beta, flags);
    if (!kernel)
    {
        return false;
    }
    const T* left = tb ? transposed(b, n, k, ldb, b_plain) : b;  // op(B), row-major k x n
    kernel(left, a, c);
    return true;
}

template <class T>
void gemm_any(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda,
              const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc)
{
    init_once();
    const bool small = m <= small_side && n <= small_side && k <= small_side && k > 0;
    if (small && (beta == T(0) || beta == T(1)) &&
        small_gemm(ta, tb, i(m), i(n), i(k), a, i(lda), b, i(ldb), beta, c, i(ldc)))
    {
        return;
    }
    cblas(ta, tb, i(m), i(n), i(k), a, i(lda), b, i(ldb), beta, c, i(ldc));
}
}  // namespace

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

const char* gemm_backend()
{
    init_once();
    return openblas_get_corename();
}
}  // namespace xgrad::kernels
