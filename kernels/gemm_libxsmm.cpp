// LIBXSMM as a GEMM backend: JIT-generated kernels for the exact product shape, for the vector ISA of
// the CPU it runs on. LIBXSMM is column-major, so row-major C = op(A) op(B) is computed as column-major
// C^T = op(B)^T op(A)^T: op(B) is the kernel's left operand and op(A) its right one.
//
// libxsmm_whole: one kernel over the whole product, the operands read in place. A transposed A is the
//   kernel's TRANS_B flag; its kernels take no TRANS_A, so a transposed B is first copied into its plain
//   layout (k n numbers, against m n k multiply-adds). Best for per-head attention sizes.
// libxsmm_tiled: blocks of C, each a kernel over packed copies of a block of op(A) (tile_m x tile_k) and
//   of op(B) (tile_k x tile_n). Packing makes each block contiguous (no cache-set conflicts from large
//   power-of-two leading dimensions) and absorbs both transposes; a packed op(B) block serves every row
//   block of C, a packed op(A) block every column of its block. Any size; its kernels run at 70-90% of
//   the FMA peak, where Debian's OpenBLAS may be stuck on old kernels (kernels/gemm_openblas.cpp).
#include <libxsmm.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/gemm_backends.hpp"

namespace xgrad::kernels::backends
{
namespace
{
// Block sizes of libxsmm_tiled, measured on an AVX-512 Xeon (float and double alike): a 128 x 256 block
// of op(B) stays in L2, a 64 x 256 block of op(A) in L1 and L2.
constexpr int tile_m = 64, tile_n = 128, tile_k = 256;

void init_once()
{
    static const bool done = [] {
        libxsmm_init();
        return true;
    }();
    (void)done;
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
// Arguments in LIBXSMM's column-major terms.
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
        init_once();
        e.key = key;
        e.fn = make_kernel(m, n, k, lda, ldb, ldc, beta, flags);
        if (!e.fn)
        {
            throw std::runtime_error("gemm: LIBXSMM could not generate a kernel for a " + std::to_string(n) +
                                     " x " + std::to_string(m) + " x " + std::to_string(k) + " product");
        }
    }
    return e.fn;
}

// Copies the rows x cols block of op(X) whose top-left entry is (row0, col0) into `out`, dense
// row-major (leading dimension cols). X is stored with leading dimension ld, transposed if `t`.
template <class T>
void pack(const T* x, int ld, bool t, int row0, int col0, int rows, int cols, T* out)
{
    for (int r = 0; r < rows; ++r)
    {
        T* dst = out + static_cast<std::size_t>(r) * cols;
        if (!t)
        {
            std::memcpy(dst, x + static_cast<std::size_t>(row0 + r) * ld + col0, sizeof(T) * cols);
            continue;
        }
        const T* src = x + static_cast<std::size_t>(col0) * ld + row0 + r;  // op(X)[row][col] = X[col][row]
        for (int q = 0; q < cols; ++q)
        {
            dst[q] = src[static_cast<std::size_t>(q) * ld];
        }
    }
}

template <class T>
void whole(const product& p, const T* a, const T* b, T beta, T* c)
{
    thread_local std::vector<T> b_plain;
    const int flags = p.ta ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
    const auto kernel = kernel_for(p.n, p.m, p.k, p.tb ? p.n : p.ldb, p.lda, p.ldc, beta, flags);
    const T* left = b;  // op(B), row-major k x n
    if (p.tb)
    {
        b_plain.resize(std::max(b_plain.size(), static_cast<std::size_t>(p.k) * p.n));  // grows only
        pack(b, p.ldb, true, 0, 0, p.k, p.n, b_plain.data());
        left = b_plain.data();
    }
    kernel(left, a, c);
}

template <class T>
void tiled(const product& p, const T* a, const T* b, T beta, T* c)
{
    thread_local std::vector<T> a_block, b_block;
    a_block.resize(static_cast<std::size_t>(tile_m) * tile_k);
    b_block.resize(static_cast<std::size_t>(tile_k) * tile_n);
    for (int k0 = 0; k0 < p.k; k0 += tile_k)
    {
        const int kb = std::min(tile_k, p.k - k0);
        const T block_beta = k0 == 0 ? beta : T(1);  // later k blocks add to what the first one wrote
        for (int n0 = 0; n0 < p.n; n0 += tile_n)
        {
            const int nb = std::min(tile_n, p.n - n0);
            pack(b, p.ldb, p.tb, k0, n0, kb, nb, b_block.data());
            for (int m0 = 0; m0 < p.m; m0 += tile_m)
            {
                const int mb = std::min(tile_m, p.m - m0);
                pack(a, p.lda, p.ta, m0, k0, mb, kb, a_block.data());
                // C^T block (nb x mb) = op(B)^T block (nb x kb) op(A)^T block (kb x mb)
                const auto kernel = kernel_for(nb, mb, kb, nb, kb, p.ldc, block_beta, LIBXSMM_GEMM_FLAG_NONE);
                kernel(b_block.data(), a_block.data(), c + static_cast<std::size_t>(m0) * p.ldc + n0);
            }
        }
    }
}
}  // namespace

void libxsmm_whole(const product& p, const float* a, const float* b, float beta, float* c)
{
    whole(p, a, b, beta, c);
}
void libxsmm_whole(const product& p, const double* a, const double* b, double beta, double* c)
{
    whole(p, a, b, beta, c);
}
void libxsmm_tiled(const product& p, const float* a, const float* b, float beta, float* c)
{
    tiled(p, a, b, beta, c);
}
void libxsmm_tiled(const product& p, const double* a, const double* b, double beta, double* c)
{
    tiled(p, a, b, beta, c);
}
}  // namespace xgrad::kernels::backends
