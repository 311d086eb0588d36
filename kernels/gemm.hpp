// The one door to matrix products: a row-major GEMM on raw pointers, sent to whichever of the installed
// libraries (OpenBLAS, oneDNN, LIBXSMM) is fastest on this machine for products of that shape class and
// dtype (kernels/gemm.cpp measures it once per class, on first use). Kept free of xtensor so that no
// library header meets xtensor headers in one translation unit.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace xgrad::kernels
{
// C = op(A) op(B) + beta C, all row-major; op(A) is m x k, op(B) is k x n, C is m x n.
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, const float* a,
          std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc);
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, const double* a,
          std::size_t lda, const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc);

// The backends gemm chooses from.
//   openblas       OpenBLAS's CBLAS (its kernels are the ones it detects for this CPU)
//   onednn         oneDNN's dnnl_sgemm (float only: oneDNN has no double GEMM)
//   libxsmm        one LIBXSMM JIT kernel over the whole product (every side at most 256)
//   libxsmm_tiled  LIBXSMM JIT kernels over packed blocks of A and B (any size)
enum class gemm_backend
{
    openblas,
    onednn,
    libxsmm,
    libxsmm_tiled,
};
inline constexpr gemm_backend all_gemm_backends[] = {gemm_backend::openblas, gemm_backend::onednn,
                                                     gemm_backend::libxsmm, gemm_backend::libxsmm_tiled};
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

// One shape class measured so far: what each candidate backend ran at and which one gemm now uses.
struct gemm_class_report
{
    std::string dtype;  // "float32" or "float64"
    bool transpose_a = false, transpose_b = false;
    std::string m, n, k;  // the class's range of each side, e.g. "129-256" or "513+"
    std::size_t probe_m = 0, probe_n = 0, probe_k = 0;  // the product the calibration timed
    gemm_backend chosen = gemm_backend::openblas;
    std::vector<std::pair<gemm_backend, double>> gflops;  // per candidate, best of its timed runs
};
std::vector<gemm_class_report> gemm_calibration();

// The backend gemm uses for the class of this product; nothing while that class is not measured yet.
std::optional<gemm_backend> gemm_choice(bool double_precision, bool transpose_a, bool transpose_b, std::size_t m,
                                        std::size_t n, std::size_t k);

// The CPU core OpenBLAS detected (e.g. "Haswell", "Zen", or "Prescott" when it does not know the CPU).
const char* openblas_core();
}  // namespace xgrad::kernels
