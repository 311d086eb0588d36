// The GEMM backends behind kernels::gemm (internal to kernels/gemm*.cpp). Each computes the row-major
// C = op(A) op(B) + beta C for sizes that kernels/gemm.cpp has already checked: every side at least 1
// and at most INT_MAX, beta 0 or 1 (the door scales C itself for any other beta). Each library's header
// stays in its own .cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xgrad::kernels::backends
{
struct product
{
    bool ta, tb;
    int m, n, k, lda, ldb, ldc;
};

// OpenBLAS's CBLAS, single-threaded (kernels/gemm_openblas.cpp); every build has it.
void openblas(const product& p, const float* a, const float* b, float beta, float* c);
void openblas(const product& p, const double* a, const double* b, double beta, double* c);
const char* openblas_core();
// Whether OpenBLAS runs kernels for the widest vector ISA the CPU's flags offer (its core's level, e.g.
// Haswell for AVX2, equals the CPU's). Fixed for the process.
bool openblas_runs_the_cpus_best_kernels();
// The first call, when OpenBLAS runs kernels for an older vector ISA than the CPU's flags offer, writes
// one line on stderr naming its core and what would run faster; later calls do nothing.
void say_once_if_openblas_kernels_are_old();

// oneDNN's dnnl_sgemm, on one thread (kernels/gemm_onednn.cpp). Float only. The oneDNN declarations
// below are defined only in builds with oneDNN (XGRAD_HAVE_ONEDNN), the LIBXSMM ones only with LIBXSMM.
void onednn(const product& p, const float* a, const float* b, float beta, float* c);
// Whether oneDNN finds bfloat16 dot products on this CPU (AVX512_BF16 or AMX-BF16).
bool onednn_has_bf16();

// oneDNN's matmul primitive (kernels/gemm_onednn_matmul.cpp), on one thread: float32 operands, or
// operands rounded to bfloat16 (CPUs with AVX512_BF16 or AMX-BF16 only); float32 result either way.
void onednn_matmul(const product& p, const float* a, const float* b, float beta, float* c);
void onednn_bf16(const product& p, const float* a, const float* b, float beta, float* c);
// The same on operands already rounded to bfloat16 (their bits; p's leading dimensions).
void onednn_bf16_rounded(const product& p, const std::uint16_t* a, const std::uint16_t* b, float beta, float* c);
// A and B rounded to bfloat16 values held as float32, packed, in buffers of the calling thread (valid
// until its next call): for small products, where a float32 kernel on them beats oneDNN's call cost.
struct rounded_operands
{
    product p;  // p with the packed leading dimensions
    const float* a;
    const float* b;
};
rounded_operands round_operands_to_bf16(const product& p, const float* a, const float* b);

// LIBXSMM (kernels/gemm_libxsmm.cpp): one JIT kernel for the whole product (every side at most
// libxsmm_whole_side), or JIT kernels over packed blocks of any size.
constexpr int libxsmm_whole_side = 256;
void libxsmm_whole(const product& p, const float* a, const float* b, float beta, float* c);
void libxsmm_whole(const product& p, const double* a, const double* b, double beta, double* c);
void libxsmm_tiled(const product& p, const float* a, const float* b, float beta, float* c);
void libxsmm_tiled(const product& p, const double* a, const double* b, double beta, double* c);
}  // namespace xgrad::kernels::backends
