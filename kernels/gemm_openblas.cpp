// OpenBLAS's CBLAS as a GEMM backend. Runs single-threaded: xgrad parallelises across independent
// matrices and blocks itself (kernels/matmul.cpp). OpenBLAS picks its kernels from the CPU it detects;
// on a CPU newer than the library it falls back to old ones (Debian's 0.3.21 runs "Prescott", SSE3
// kernels, on a 2023 Xeon), which is why kernels/gemm.cpp measures it against the other backends.
#include <cblas.h>

#include "kernels/gemm_backends.hpp"

namespace xgrad::kernels::backends
{
namespace
{
// OpenBLAS starts one thread per core unless told otherwise; ask once, before the first GEMM.
void single_threaded()
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
}  // namespace

void openblas(const product& p, const float* a, const float* b, float beta, float* c)
{
    single_threaded();
    cblas_sgemm(CblasRowMajor, flag(p.ta), flag(p.tb), p.m, p.n, p.k, 1.0f, a, p.lda, b, p.ldb, beta, c, p.ldc);
}

void openblas(const product& p, const double* a, const double* b, double beta, double* c)
{
    single_threaded();
    cblas_dgemm(CblasRowMajor, flag(p.ta), flag(p.tb), p.m, p.n, p.k, 1.0, a, p.lda, b, p.ldb, beta, c, p.ldc);
}

const char* openblas_core()
{
    single_threaded();
    return openblas_get_corename();
}
}  // namespace xgrad::kernels::backends
