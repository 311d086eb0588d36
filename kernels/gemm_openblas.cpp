// OpenBLAS's CBLAS as a GEMM backend, and its transposing copy (kernels::transpose). Runs
// single-threaded: xgrad parallelises across independent matrices and blocks itself (kernels/matmul.cpp).
// OpenBLAS picks its kernels from the CPU it detects; on a CPU newer than the library it falls back to old
// ones (Debian's 0.3.21 runs "Prescott", SSE3 kernels, on a 2023 Xeon), which is why kernels/gemm.cpp
// measures it against the other backends. OpenBLAS reads OPENBLAS_CORETYPE once, when the library loads,
// and offers no call to change its core after that; so when the door runs OpenBLAS on kernels older than
// the CPU's flags allow, it says so.
#include <cblas.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/gemm_backends.hpp"
#include "kernels/kernels.hpp"

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

// x86-64 vector ISA levels: 0 SSE, 1 AVX, 2 AVX2 with FMA, 3 AVX-512 (F, BW, VL, DQ).
constexpr const char* best_core_at_level[] = {"Prescott", "Sandybridge", "Haswell", "SkylakeX"};
constexpr const char* level_name[] = {"SSE3", "AVX", "AVX2", "AVX-512"};

// The level of one of OpenBLAS's x86-64 core names (its DYNAMIC_ARCH list; other names count as SSE).
int level_of_core(const char* core)
{
    for (const char* name : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    {
        if (std::strcmp(core, name) == 0)
        {
            return 3;
        }
    }
    for (const char* name : {"Haswell", "Zen", "Excavator"})
    {
        if (std::strcmp(core, name) == 0)
        {
            return 2;
        }
    }
    for (const char* name : {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"})
    {
        if (std::strcmp(core, name) == 0)
        {
            return 1;
        }
    }
    return 0;
}

// The level the CPU's flags allow.
int level_of_cpu()
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    {
        return 3;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    {
        return 2;
    }
    return __builtin_cpu_supports("avx") ? 1 : 0;
#else
    return 0;  // not x86-64: OpenBLAS's core names mean nothing to this check
#endif
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

bool openblas_runs_the_cpus_best_kernels()
{
    static const bool best = level_of_core(openblas_core()) >= level_of_cpu();
    return best;
}

void say_once_if_openblas_kernels_are_old()
{
    static std::once_flag said;
    std::call_once(said, [] {
        const char* core = openblas_core();
        const int cpu = level_of_cpu();
        if (level_of_core(core) < cpu)
        {
            std::fprintf(stderr,
                         "xgrad: OpenBLAS runs its %s kernels on this CPU, which has %s: slow matrix products "
                         "(start with OPENBLAS_CORETYPE=%s, or build with libdnnl-dev and libxsmm-dev)\n",
                         core, level_name[cpu], best_core_at_level[cpu]);
        }
    });
}
}  // namespace xgrad::kernels::backends

namespace xgrad::kernels
{
namespace
{
// The sides of a transpose as OpenBLAS's int, or nothing to do (a side of 0).
bool blas_sides(std::size_t rows, std::size_t columns, blasint& m, blasint& n)
{
    if (rows >= std::size_t(INT_MAX) || columns >= std::size_t(INT_MAX))
    {
        throw std::invalid_argument("transpose: a (" + std::to_string(rows) + ", " + std::to_string(columns) +
                                    ") matrix has a side of 2^31 or more, past OpenBLAS's int");
    }
    m = static_cast<blasint>(rows);
    n = static_cast<blasint>(columns);
    return rows > 0 && columns > 0;
}
}  // namespace

void transpose(const float* a, std::size_t rows, std::size_t columns, float* out)
{
    blasint m = 0, n = 0;
    if (blas_sides(rows, columns, m, n))
    {
        cblas_somatcopy(CblasRowMajor, CblasTrans, m, n, 1.0f, a, n, out, m);
    }
}

void transpose(const double* a, std::size_t rows, std::size_t columns, double* out)
{
    blasint m = 0, n = 0;
    if (blas_sides(rows, columns, m, n))
    {
        cblas_domatcopy(CblasRowMajor, CblasTrans, m, n, 1.0, a, n, out, m);
    }
}
}  // namespace xgrad::kernels
