// The one door to matrix products: a row-major GEMM on raw pointers, sent to the built library that the
// bench measured fastest for products of that shape and dtype (oneDNN or LIBXSMM when built, OpenBLAS
// otherwise; see the rule in kernels/gemm.cpp). Kept free of xtensor so that no library header meets
// xtensor headers in one translation unit.
#pragma once

#if !defined(XGRAD_HAVE_ONEDNN) || !defined(XGRAD_HAVE_LIBXSMM)
#error "kernels/gemm.hpp needs the xgrad target's compile definitions XGRAD_HAVE_ONEDNN, XGRAD_HAVE_LIBXSMM"
#endif

#include <cstddef>

namespace xgrad::kernels
{
// C = op(A) op(B) + beta C, all row-major; op(A) is m x k, op(B) is k x n, C is m x n. Float products
// run at the calling thread's matmul precision (kernels/precision.hpp): with bf16, A and B are rounded to
// bfloat16 and the product goes to oneDNN's bf16 matmul primitive, accumulating in float32 (a build
// without oneDNN has no bf16 precision: its products stay float32).
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, const float* a,
          std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc);
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, const double* a,
          std::size_t lda, const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc);

// The backends behind gemm that this build has (its rule picks among them; all run through gemm_with).
// OpenBLAS is always built; oneDNN and LIBXSMM when the configure found them (XGRAD_HAVE_ONEDNN and
// XGRAD_HAVE_LIBXSMM, 0 or 1, are compile definitions of the xgrad target).
//   openblas       OpenBLAS's CBLAS (its kernels are the ones it detects for this CPU)
//   onednn         oneDNN's dnnl_sgemm (float only: oneDNN has no double GEMM)
//   onednn_matmul  oneDNN's matmul primitive, float32 (its brgemm kernels; float only)
//   libxsmm        one LIBXSMM JIT kernel over the whole product (every side at most 256)
//   libxsmm_tiled  LIBXSMM JIT kernels over packed blocks of A and B (any size)
enum class gemm_backend
{
    openblas,
#if XGRAD_HAVE_ONEDNN
    onednn,
    onednn_matmul,
#endif
#if XGRAD_HAVE_LIBXSMM
    libxsmm,
    libxsmm_tiled,
#endif
};
inline constexpr gemm_backend all_gemm_backends[] = {
    gemm_backend::openblas,
#if XGRAD_HAVE_ONEDNN
    gemm_backend::onednn,
    gemm_backend::onednn_matmul,
#endif
#if XGRAD_HAVE_LIBXSMM
    gemm_backend::libxsmm,
    gemm_backend::libxsmm_tiled,
#endif
};
const char* name(gemm_backend backend);

// Whether `backend` can run an m x n x k product of this dtype (double_precision = false for float).
bool gemm_backend_supports(gemm_backend backend, bool double_precision, std::size_t m, std::size_t n,
                           std::size_t k);

// gemm through one given backend (the tests check each against a reference). Throws
// std::invalid_argument naming gemm if the backend cannot run this product.
void gemm_with(gemm_backend backend, bool transpose_a, bool transpose_b, std::size_t m, std::size_t n,
               std::size_t k, const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta,
               float* c, std::size_t ldc);
void gemm_with(gemm_backend backend, bool transpose_a, bool transpose_b, std::size_t m, std::size_t n,
               std::size_t k, const double* a, std::size_t lda, const double* b, std::size_t ldb, double beta,
               double* c, std::size_t ldc);

// The backend gemm uses for this product (the fixed rule of kernels/gemm.cpp; transpose_a does not
// matter to it).
gemm_backend gemm_choice(bool double_precision, bool transpose_a, bool transpose_b, std::size_t m, std::size_t n,
                         std::size_t k);

// The libraries this build's GEMM runs on, e.g. "OpenBLAS, oneDNN, LIBXSMM".
const char* gemm_backends_built();

// The backend the rule picks per shape class, e.g. "float32 small: libxsmm, float32 large: onednn,
// float64 small: libxsmm, float64 large: openblas, float64 large with k <= 64: libxsmm_tiled" on a CPU
// whose OpenBLAS runs its best kernels (small: as the rule of kernels/gemm.cpp says).
const char* gemm_rule_in_use();

// The CPU core OpenBLAS detected (e.g. "Haswell", "Zen", or "Prescott" when it does not know the CPU).
const char* openblas_core();
// Whether those are the kernels for the widest vector ISA the CPU's flags offer: the fact the rule's
// choice for large float64 products reads (kernels/gemm.cpp). Off x86, where the flags are not read,
// OpenBLAS's own choice is taken as the best: true.
bool openblas_runs_the_cpus_best_kernels();
}  // namespace xgrad::kernels
