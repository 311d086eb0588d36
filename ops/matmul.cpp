// matmul: the differentiable batched matrix product over kernels::matmul_into (kernels/matmul.cpp).
#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "kernels/bf16.hpp"
#include "kernels/kernels.hpp"
#include "kernels/precision.hpp"
#include "ops/ops.hpp"

namespace xgrad
{
namespace ops
{
namespace
{
std::string operand_str(const shape_t& s, bool transposed)
{
    return shape_str(s) + (transposed ? " (transposed)" : "");
}

// The broadcast of the operands' batch axes; the error names both whole shapes, not only their batches.
shape_t batch_shape(const shape_t& sa, bool ta, const shape_t& sb, bool tb)
{
    const shape_t batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
    for (std::size_t i = 1; i <= std::min(batch_a.size(), batch_b.size()); ++i)
    {
        const std::size_t da = batch_a[batch_a.size() - i], db = batch_b[batch_b.size() - i];
        if (da != db && da != 1 && db != 1)
        {
            fail("matmul", "batch axes of a " + operand_str(sa, ta) + " and b " + operand_str(sb, tb) +
                               " do not broadcast");
        }
    }
    return broadcast_shapes("matmul", batch_a, batch_b);
}

// matmul's backward at bf16 precision from bf16 copies: the same products as in matmul's rule below.
struct rounded_backward
{
    bool ta, tb;
    std::shared_ptr<const kernels::bf16::bf16_copy> a16, b16;  // kept while b, resp. a, needs a gradient

    void operator()(backward_context<float>& ctx) const
    {
        const array<float>& g = ctx.grad();
        const array<float>& A = ctx.input(0);
        const array<float>& B = ctx.input(1);
        const bool bf16 = current_matmul_precision() == matmul_precision::bf16;
        const kernels::bf16::bf16_copy g16 = bf16 ? kernels::bf16::rounded_copy(g) : kernels::bf16::bf16_copy();
        if (ctx.needs_grad(0))
        {
            array<float> dA = array<float>::from_shape(A.shape());
            if (!bf16)
            {
                ta ? kernels::matmul_into(B, tb, g, true, dA) : kernels::matmul_into(g, false, B, !tb, dA);
            }
            else if (!ta)
            {
                kernels::bf16::matmul_into(g, g16, false, B, *b16, !tb, dA);  // g op(B)^T
            }
            else
            {
                kernels::bf16::matmul_into(B, *b16, tb, g, g16, true, dA);  // op(B) g^T
            }
            ctx.accumulate(0, std::move(dA));
        }
        if (ctx.needs_grad(1))
        {
            array<float> dB = array<float>::from_shape(B.shape());
            if (!bf16)
            {
                tb ? kernels::matmul_into(g, true, A, ta, dB) : kernels::matmul_into(A, !ta, g, false, dB);
            }
            else if (!tb)
            {
                kernels::bf16::matmul_into(A, *a16, !ta, g, g16, false, dB);  // op(A)^T g
            }
            else
            {
                kernels::bf16::matmul_into(g, g16, true, A, *a16, ta, dB);  // g^T op(A)
            }
            ctx.accumulate(1, std::move(dB));
        }
    }
};

// matmul at bf16 precision when every GEMM call goes to oneDNN's bf16 matmul: each operand is rounded
// once and the copy serves the forward product and the backward one that reads it again (dA reads B,
// dB reads A), and the incoming gradient is rounded once for both. A copy lives in the rule, no longer
// than the tape's use of the operand: a parameter's value is read in place and updated only after
// backward (autodiff/tape.hpp, `parameter`), so a copy is never stale; nothing is keyed on an address.
var<float> matmul_rounded(const var<float>& a, const var<float>& b, bool ta, bool tb, array<float> c,
                          std::uint64_t macs)
{
    using kernels::bf16::bf16_copy;
    auto a16 = std::make_shared<const bf16_copy>(kernels::bf16::rounded_copy(a.value()));
    auto b16 = std::make_shared<const bf16_copy>(kernels::bf16::rounded_copy(b.value()));
    kernels::bf16::matmul_into(a.value(), *a16, ta, b.value(), *b16, tb, c);
    rounded_backward rule{ta, tb, b.requires_grad() ? a16 : nullptr, a.requires_grad() ? b16 : nullptr};
    return detail::record("matmul", {a, b}, std::move(c), saves_input0 | saves_input1, std::move(rule), macs);
}
}  // namespace

// C = op(A) op(B) over the last two axes.
//   dL/dA = g op(B)^T   (stored as op(B) g^T when A is used transposed)
//   dL/dB = op(A)^T g   (stored as g^T op(A) when B is used transposed)
// Batch axes a operand shares by broadcasting are summed inside the GEMM loop, not afterwards.
// At bf16 precision, large products take the rounded-once path above (matmul_rounded).
template <class T>
var<T> matmul(const var<T>& a, const var<T>& b, bool ta, bool tb)
{
    const shape_t sa = a.shape(), sb = b.shape();
    if (sa.size() < 2 || sb.size() < 2)
    {
        fail("matmul", "operands need at least 2 axes, got a " + shape_str(sa) + " and b " + shape_str(sb) +
                           " (reshape a vector to (1, n) or (n, 1))");
    }
    const std::size_t m = ta ? sa.back() : sa[sa.size() - 2], ka = ta ? sa[sa.size() - 2] : sa.back();
    const std::size_t kb = tb ? sb.back() : sb[sb.size() - 2], n = tb ? sb[sb.size() - 2] : sb.back();
    if (ka != kb)
    {
        fail("matmul", "inner dimensions differ: a " + operand_str(sa, ta) + " has " + std::to_string(ka) +
                           " columns, b " + operand_str(sb, tb) + " has " + std::to_string(kb) + " rows");
    }
    shape_t batch = batch_shape(sa, ta, sb, tb);
    const std::uint64_t macs = kernels::matmul_multiply_adds(batch, m, n, ka);
    batch.push_back(m);
    batch.push_back(n);
    array<T> c = array<T>::from_shape(batch);
    if constexpr (std::is_same_v<T, float>)
    {
        if (kernels::bf16::matmul_takes_rounded(a.value(), ta, b.value(), tb))
        {
            return matmul_rounded(a, b, ta, tb, std::move(c), macs);
        }
    }
    kernels::matmul_into(a.value(), ta, b.value(), tb, c);
    auto rule = [ta, tb](backward_context<T>& ctx) {
        const array<T>& g = ctx.grad();
        const array<T>& A = ctx.input(0);
        const array<T>& B = ctx.input(1);
        if (ctx.needs_grad(0))
        {
            array<T> dA = array<T>::from_shape(A.shape());
            if (!ta)
            {
                kernels::matmul_into(g, false, B, !tb, dA);  // g op(B)^T
            }
            else
            {
                kernels::matmul_into(B, tb, g, true, dA);  // (g op(B)^T)^T = op(B) g^T
            }
            ctx.accumulate(0, std::move(dA));
        }
        if (ctx.needs_grad(1))
        {
            array<T> dB = array<T>::from_shape(B.shape());
            if (!tb)
            {
                kernels::matmul_into(A, !ta, g, false, dB);  // op(A)^T g
            }
            else
            {
                kernels::matmul_into(g, true, A, ta, dB);  // (op(A)^T g)^T = g^T op(A)
            }
            ctx.accumulate(1, std::move(dB));
        }
    };
    return detail::record("matmul", {a, b}, std::move(c), saves_input0 | saves_input1, std::move(rule), macs);
}

template var<float> matmul(const var<float>&, const var<float>&, bool, bool);
template var<double> matmul(const var<double>&, const var<double>&, bool, bool);
}  // namespace ops
}  // namespace xgrad
