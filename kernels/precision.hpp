// The precision of float32 matrix products: a setting of the calling thread, read by the GEMM door
// (kernels::gemm) and carried into xgrad's worker threads by parallel_for.
//
//   fp32  operands and accumulation in float32 (the default)
//   bf16  operands rounded to bfloat16 (round to nearest even), accumulation in float32
//         (docs/spec.md, "Training on text": --precision bf16). Only the products change: every other op, the
//         weights, gradients and optimiser state stay float32. Float64 products are never rounded.
//
// Set it for a region with a scope, e.g. around a training step:
//     xgrad::precision_scope bf16(xgrad::matmul_precision::bf16);
// On a CPU without bfloat16 dot products (neither AVX512_BF16 nor AMX-BF16, as oneDNN reports the CPU's
// ISA) a bf16 scope says so once on stderr and the products stay float32.
#pragma once

namespace xgrad
{
enum class matmul_precision
{
    fp32,
    bf16,
};

// The calling thread's setting, as the GEMM door reads it (bf16 only where the CPU supports it).
matmul_precision current_matmul_precision();

// Whether this CPU has bfloat16 dot products (AVX512_BF16 or AMX-BF16).
bool bf16_supported();

// "fp32" / "bf16"; parse_matmul_precision throws std::invalid_argument naming the text otherwise.
const char* name(matmul_precision precision);
matmul_precision parse_matmul_precision(const char* text);

// Sets the calling thread's precision until destroyed, then restores the previous one.
class precision_scope
{
public:
    explicit precision_scope(matmul_precision precision);
    ~precision_scope();
    precision_scope(const precision_scope&) = delete;
    precision_scope& operator=(const precision_scope&) = delete;

private:
    matmul_precision previous_;
};
}  // namespace xgrad
