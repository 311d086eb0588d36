// The one door to the BLAS library: a row-major GEMM on raw pointers. Kept free of xtensor so that
// <cblas.h> never meets xtensor headers in one translation unit.
#pragma once

#include <cstddef>

namespace xgrad::kernels
{
// C = op(A) op(B) + beta C, all row-major; op(A) is m x k, op(B) is k x n, C is m x n.
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, const float* a,
          std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc);
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, const double* a,
          std::size_t lda, const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc);

// Which BLAS core is in use (e.g. "Haswell", "Zen") — shown by the benchmark.
const char* gemm_backend();
}  // namespace xgrad::kernels
