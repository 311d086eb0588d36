// oneDNN's dnnl_sgemm as a GEMM backend: row-major, JIT kernels for the widest vector ISA oneDNN finds
// on the CPU (it reads CPU features, not model numbers, so it knows CPUs newer than itself).
// Debian's oneDNN runs its threads on OpenMP and sizes them from omp_get_max_threads(); xgrad wants each
// call on the calling thread alone, so the calling thread's OpenMP thread count is 1 for the call and
// restored after it (LibTorch, in the same process, sets its own). Also the CPU check behind
// xgrad::bf16_supported() (kernels/precision.cpp).
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <stdexcept>
#include <string>

#include "kernels/gemm_backends.hpp"

namespace xgrad::kernels::backends
{
void onednn(const product& p, const float* a, const float* b, float beta, float* c)
{
    const int threads = omp_get_max_threads();
    if (threads != 1)
    {
        omp_set_num_threads(1);
    }
    const dnnl_status_t status = dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.m, p.n, p.k, 1.0f, a, p.lda, b,
                                            p.ldb, beta, c, p.ldc);
    if (threads != 1)
    {
        omp_set_num_threads(threads);
    }
    if (status != dnnl_success)
    {
        throw std::runtime_error("gemm: oneDNN's dnnl_sgemm failed with status " + std::to_string(status));
    }
}

bool onednn_has_bf16()
{
    // oneDNN's ISA values are nested bit sets: every ISA from avx512_core_bf16 up contains its bits.
    const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const unsigned bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
    return (isa & bf16) == bf16;
}
}  // namespace xgrad::kernels::backends
