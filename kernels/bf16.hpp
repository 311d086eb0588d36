// bfloat16 operands for the products at bf16 matmul precision (kernels/precision.hpp):
//   round_to_bf16      one pass over float32 values (ties to even, NaN kept as a quiet NaN), 16 lanes at
//                      a time where the CPU has AVX512BW (checked at run time), else one at a time
//   bf16_copy          a whole array's values rounded once, in the array's own layout
//   matmul_into        kernels::matmul_into's product with both operands given also as bf16 copies: a
//                      caller that multiplies by the same array twice (the forward and backward of matmul,
//                      linear and linear_gelu: ops/bf16_operands.hpp) rounds it once, not once per product
// docs/performance.md, "bfloat16 mixed precision".
#pragma once

#include <cstddef>
#include <cstdint>

#include "autodiff/memory.hpp"
#include "autodiff/xtensor.hpp"

namespace xgrad::kernels::bf16
{
// Multiply-adds from which one GEMM call runs oneDNN's bf16 matmul; fewer, and the door rounds into
// float32 buffers and runs its float32 rule. Alone, on one core (AMX), oneDNN is even at 2^18 (64 x 64 x 64)
// and ahead from 2^19 (128 x 128 x 64: 249 vs 117 GFLOP/s); inside the GPT step, where the fused
// attention's tiles come in many shapes, 2^18 made the bf16 step slower (shake 992-1001 vs 854-930 ms,
// char 132 vs 120 ms, the two builds side by side), so the threshold stays at 2^21.
constexpr std::uint64_t library_work = std::uint64_t(1) << 21;

// out[i] = x[i] rounded to the nearest bfloat16 (its upper 16 bits), for i < n.
void round_to_bf16(const float* x, std::size_t n, std::uint16_t* out);

// out[i] = x[i] rounded to the nearest bfloat16, as the float32 of the same value.
void round_to_bf16_values(const float* x, std::size_t n, float* out);

// The bfloat16 value of bits, as a float32.
float widen(std::uint16_t bits);

// Pooled like the arrays' buffers (autodiff/memory.hpp) and not zero-filled before the rounding writes it.
using bf16_copy = xt::uvector<std::uint16_t, pool_allocator<std::uint16_t>>;
bf16_copy rounded_copy(const array<float>& x);

// Whether matmul_into(a, ta, b, tb, ...) at bf16 precision would send every one of its GEMM calls to
// oneDNN's bf16 matmul, so that rounded copies of the operands pay (false at fp32 precision).
bool matmul_takes_rounded(const array<float>& a, bool ta, const array<float>& b, bool tb);

// kernels::matmul_into(a, ta, b, tb, c) at bf16 precision, reading a16 and b16 (bf16 copies of a and b,
// same layout) instead of rounding a and b in every GEMM call. Requires what matmul_into requires.
void matmul_into(const array<float>& a, const bf16_copy& a16, bool ta, const array<float>& b, const bf16_copy& b16,
                 bool tb, array<float>& c);

// C = op(A) op(B) + beta C (beta 0 or 1) on bfloat16 operands, float32 result: oneDNN's bf16 matmul.
void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const std::uint16_t* a, std::size_t lda,
          const std::uint16_t* b, std::size_t ldb, float beta, float* c, std::size_t ldc);
}  // namespace xgrad::kernels::bf16
