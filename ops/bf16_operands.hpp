// The two operands of a product node rounded to bfloat16 once per tape, at bf16 matmul precision
// (kernels/precision.hpp). A node that multiplies by the same arrays again in its backward (matmul,
// linear, linear + GELU: dA reads op(B), dB reads op(A)) rounds each operand once in the forward and
// keeps the copy for the backward, instead of letting the GEMM door round every operand of every call.
// docs/performance.md, "bfloat16 mixed precision".
//
// A copy lives in the node's rule, so no longer than the tape's use of the operand: a parameter's value
// is read in place and updated only after the tape's backward (autodiff/tape.hpp, `parameter`), so a
// copy is never stale, and nothing is keyed on an address the buffer pool could hand to another array.
#pragma once

#include <memory>
#include <type_traits>

#include "autodiff/tape.hpp"
#include "kernels/bf16.hpp"
#include "kernels/kernels.hpp"
#include "kernels/precision.hpp"

namespace xgrad::ops
{
struct bf16_operands
{
    std::shared_ptr<const kernels::bf16::bf16_copy> a16, b16;

    // Both copies, when every GEMM call of op(a) op(b) goes to oneDNN's bf16 matmul
    // (kernels::bf16::matmul_takes_rounded); none otherwise, and never for float64.
    template <class T>
    static bf16_operands for_product(const var<T>& a, bool ta, const var<T>& b, bool tb)
    {
        bf16_operands r;
        if constexpr (std::is_same_v<T, float>)
        {
            using kernels::bf16::bf16_copy, kernels::bf16::rounded_copy;
            if (kernels::bf16::matmul_takes_rounded(a.value(), ta, b.value(), tb))
            {
                r.a16 = std::make_shared<const bf16_copy>(rounded_copy(a.value()));
                r.b16 = std::make_shared<const bf16_copy>(rounded_copy(b.value()));
            }
        }
        return r;
    }

    bool rounded() const { return a16 != nullptr || b16 != nullptr; }

    // What the backward keeps after the forward product: a's copy while b needs a gradient (dB reads
    // op(A)), b's while a needs one (dA reads op(B)).
    bf16_operands for_backward(bool a_needs_grad, bool b_needs_grad) const
    {
        return {b_needs_grad ? a16 : nullptr, a_needs_grad ? b16 : nullptr};
    }

    // The bytes the copies hold (for the tape's bytes_saved_for_backward).
    std::size_t bytes() const
    {
        return ((a16 ? a16->size() : 0) + (b16 ? b16->size() : 0)) * sizeof(std::uint16_t);
    }

    // The incoming gradient g rounded once for the backward's two products, when the forward rounded its
    // operands and the backward runs at bf16 precision; empty otherwise.
    template <class T>
    kernels::bf16::bf16_copy rounded_gradient(const array<T>& g) const
    {
        if constexpr (std::is_same_v<T, float>)
        {
            if (rounded() && current_matmul_precision() == matmul_precision::bf16)
            {
                return kernels::bf16::rounded_copy(g);
            }
        }
        return {};
    }
};

// c = op(a) op(b): from the bf16 copies a16 and b16 when both are given and not empty (float32 only),
// else through kernels::matmul_into (the door rounds at bf16 precision itself).
template <class T>
void multiply_into(const array<T>& a, const kernels::bf16::bf16_copy* a16, bool ta, const array<T>& b,
                   const kernels::bf16::bf16_copy* b16, bool tb, array<T>& c)
{
    if constexpr (std::is_same_v<T, float>)
    {
        if (a16 && b16 && !a16->empty() && !b16->empty())
        {
            return kernels::bf16::matmul_into(a, *a16, ta, b, *b16, tb, c);
        }
    }
    kernels::matmul_into(a, ta, b, tb, c);
}
}  // namespace xgrad::ops
