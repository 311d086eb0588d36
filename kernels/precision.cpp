// The calling thread's matmul precision (kernels/precision.hpp) and the CPU check behind it.
#include "kernels/precision.hpp"

#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/gemm_backends.hpp"

namespace xgrad
{
namespace
{
thread_local matmul_precision thread_precision = matmul_precision::fp32;

void say_once_that_bf16_is_missing()
{
    static std::once_flag said;
    std::call_once(said, [] {
#if XGRAD_HAVE_ONEDNN
        std::fprintf(stderr, "xgrad: this CPU has no bfloat16 dot products (AVX512_BF16 or AMX-BF16); "
                             "matrix products run in float32\n");
#else
        std::fprintf(stderr, "xgrad: built without oneDNN, which runs the bfloat16 products; "
                             "matrix products run in float32\n");
#endif
    });
}
}  // namespace

bool bf16_supported()
{
#if XGRAD_HAVE_ONEDNN
    static const bool supported = kernels::backends::onednn_has_bf16();
    return supported;
#else
    return false;  // bf16 products run on oneDNN's matmul primitive alone (kernels/gemm.cpp)
#endif
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
