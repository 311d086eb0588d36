// The calling thread's matmul precision (kernels/precision.hpp) and the CPU check behind it.
#include "kernels/precision.hpp"

#include <oneapi/dnnl/dnnl.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

namespace xgrad
{
namespace
{
thread_local matmul_precision thread_precision = matmul_precision::fp32;

void say_once_that_bf16_is_missing()
{
    static std::once_flag said;
    std::call_once(said, [] {
        std::fprintf(stderr, "xgrad: this CPU has no bfloat16 dot products (AVX512_BF16 or AMX-BF16); "
                             "matrix products run in float32\n");
    });
}
}  // namespace

bool bf16_supported()
{
    // oneDNN's ISA values are nested bit sets: every ISA from avx512_core_bf16 up contains its bits.
    static const bool supported = [] {
        const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
        const unsigned bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
        return (isa & bf16) == bf16;
    }();
    return supported;
}

matmul_precision current_matmul_precision()
{
    return thread_precision;
}

const char* name(matmul_precision precision)
{
    return precision == matmul_precision::bf16 ? "bf16" : "fp32";
}

matmul_precision parse_matmul_precision(const char* text)
{
    if (std::strcmp(text, "fp32") == 0)
    {
        return matmul_precision::fp32;
    }
    if (std::strcmp(text, "bf16") == 0)
    {
        return matmul_precision::bf16;
    }
    throw std::invalid_argument(std::string("precision: expected fp32 or bf16, got '") + text + "'");
}

precision_scope::precision_scope(matmul_precision precision) : previous_(thread_precision)
{
    if (precision == matmul_precision::bf16 && !bf16_supported())
    {
        say_once_that_bf16_is_missing();
        precision = matmul_precision::fp32;
    }
    thread_precision = precision;
}

precision_scope::~precision_scope()
{
    thread_precision = previous_;
}
}  // namespace xgrad
