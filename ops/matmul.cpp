// matmul: the differentiable batched matrix product over kernels::matmul_into (kernels/matmul.cpp).
#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "kernels/bf16.hpp"
#include "kernels/kernels.hpp"
#include "kernels/precision.hpp"
#include "ops/bf16_operands.hpp"
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

// matmul's backward. At bf16 precision the forward may have rounded A and B once (ops/bf16_operands.hpp);
// then dA reads B's copy, dB reads A's, and g is rounded once for both.
template <class T>
struct matmul_backward
{
    bool ta, tb;
    bf16_operands copies;  // A's while B needs a gradient, B's while A needs one; empty when not rounded

    void operator()(backward_context<T>& ctx) const
    {
        const array<T>& g = ctx.grad();
        const array<T>& A = ctx.input(0);
        const array<T>& B = ctx.input(1);
        const kernels::bf16::bf16_copy g16 = copies.rounded_gradient(g);
        const kernels::bf16::bf16_copy *a16 = copies.a16.get(), *b16 = copies.b16.get();
        if (ctx.needs_grad(0))
        {
            array<T> dA = array<T>::from_shape(A.shape());
            if (!ta)
            {
                multiply_into(g, &g16, false, B, b16, !tb, dA);  // g op(B)^T
            }
            else
            {
                multiply_into(B, b16, tb, g, &g16, true, dA);  // (g op(B)^T)^T = op(B) g^T
            }
            ctx.accumulate(0, std::move(dA));
        }
        if (ctx.needs_grad(1))
        {
            array<T> dB = array<T>::from_shape(B.shape());
            if (!tb)
            {
                multiply_into(A, a16, !ta, g, &g16, false, dB);  // op(A)^T g
            }
            else
            {
                multiply_into(g, &g16, true, A, a16, ta, dB);  // (op(A)^T g)^T = g^T op(A)
            }
            ctx.accumulate(1, std::move(dB));
        }
    }

    // The same products recorded on the tape (no bf16 copies: a recording backward computes in T).
    void operator()(graph_context<T>& ctx) const
    {
        const var<T> g = ctx.grad(), A = ctx.input(0), B = ctx.input(1);
        if (ctx.needs_grad(0))
        {
            ctx.accumulate(0, !ta ? matmul(g, B, false, !tb) : matmul(B, g, tb, true));
        }
        if (ctx.needs_grad(1))
        {
            ctx.accumulate(1, !tb ? matmul(A, g, !ta, false) : matmul(g, A, true, ta));
        }
    }
};
}  // namespace

// C = op(A) op(B) over the last two axes.
//   dL/dA = g op(B)^T   (stored as op(B) g^T when A is used transposed)
//   dL/dB = op(A)^T g   (stored as g^T op(A) when B is used transposed)
// Batch axes a operand shares by broadcasting are summed inside the GEMM loop, not afterwards.
// At bf16 precision a large product rounds each operand once, for the forward and the backward
// (ops/bf16_operands.hpp); the rule declares the copies' bytes to the tape.
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
    const bf16_operands rounded = bf16_operands::for_product(a, ta, b, tb);
    multiply_into(a.value(), rounded.a16.get(), ta, b.value(), rounded.b16.get(), tb, c);
    matmul_backward<T> rule{ta, tb, rounded.for_backward(a.requires_grad(), b.requires_grad())};
    const std::size_t kept = rule.copies.bytes();
    return detail::record("matmul", {a, b}, std::move(c), saves_input0 | saves_input1, std::move(rule), macs,
                          kept);
}

template var<float> matmul(const var<float>&, const var<float>&, bool, bool);
template var<double> matmul(const var<double>&, const var<double>&, bool, bool);
}  // namespace ops
}  // namespace xgrad
