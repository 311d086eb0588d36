// GEMM through OpenBLAS's CBLAS interface. xgrad runs the BLAS single-threaded and parallelises across
// independent matrices itself (see ops/matmul.cpp): threads inside small per-head GEMMs cost more than
// they gain.
#include "ops/gemm.hpp"

#include <cblas.h>

#include <limits>
#include <stdexcept>
#include <string>

namespace xgrad::kernels
{
namespace
{
// OpenBLAS starts one thread per core unless told otherwise; ask once, before the first GEMM.
void single_threaded_blas_once()
{
    static const bool done = [] {
        openblas_set_num_threads(1);
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
}  // namespace

void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
          const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc)
{
    single_threaded_blas_once();
    cblas_sgemm(CblasRowMajor, flag(ta), flag(tb), i(m), i(n), i(k), 1.0f, a, i(lda), b, i(ldb), beta, c, i(ldc));
}

void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const double* a, std::size_t lda,
          const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc)
{
    single_threaded_blas_once();
    cblas_dgemm(CblasRowMajor, flag(ta), flag(tb), i(m), i(n), i(k), 1.0, a, i(lda), b, i(ldb), beta, c, i(ldc));
}

const char* gemm_backend()
{
    return openblas_get_corename();
}
}  // namespace xgrad::kernels
