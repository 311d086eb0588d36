// attention: the fused, memory-efficient scaled dot-product attention op over kernels/attention.cpp.
//
// The op records two nodes. "attention_lse" holds the per-row log-sum-exp lse_i = log sum_j exp(s_ij)
// (B, H, Tq), so that the tape counts it among the bytes saved for backward; no gradient ever reaches
// it. "attention" holds the output O and reads q, k, v, O and lse in its rule.
#include <cmath>
#include <memory>
#include <optional>

#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "kernels/attention.hpp"
#include "ops/ops.hpp"

namespace xgrad
{
namespace ops
{
namespace
{
void check_attention_shapes(const shape_t& qs, const shape_t& ks, const shape_t& vs, const mask_t* mask)
{
    const char* op = "attention";
    if (qs.size() != 4 || ks.size() != 4 || vs.size() != 4)
    {
        fail(op, "q, k, v must be (B, H, Tq, dh), (B, G, Tk, dh), (B, G, Tk, dh), got q " + shape_str(qs) + ", k " +
                     shape_str(ks) + ", v " + shape_str(vs));
    }
    if (ks != vs)
    {
        fail(op, "k " + shape_str(ks) + " and v " + shape_str(vs) + " must have the same shape");
    }
    if (ks[0] != qs[0] || ks[3] != qs[3])
    {
        fail(op, "q " + shape_str(qs) + " and k " + shape_str(ks) + " must share B and the head width dh");
    }
    if (qs[3] == 0)
    {
        fail(op, "the head width dh must be positive, got q " + shape_str(qs));
    }
    if (ks[1] == 0 || qs[1] % ks[1] != 0)
    {
        fail(op, "query heads H = " + std::to_string(qs[1]) + " must be a multiple of key/value heads G = " +
                     std::to_string(ks[1]) + " (q " + shape_str(qs) + ", k " + shape_str(ks) + ")");
    }
    const shape_t scores{qs[0], qs[1], qs[2], ks[2]};
    if (mask && !broadcasts_to(to_shape(mask->shape()), scores))
    {
        fail(op, "mask of shape " + shape_str(to_shape(mask->shape())) +
                     " does not broadcast to the attention scores (B, H, Tq, Tk) = " + shape_str(scores));
    }
}
}  // namespace

// O = softmax(S) V with S = scale Q K^T (masked entries excluded), P = softmax(S):
//   dV = P^T dO                                   (summed over the H / G query heads sharing a kv head)
//   dP = dO V^T,  dS_ij = P_ij (dP_ij - D_i),  D_i = sum_j P_ij dP_ij = sum_c dO_ic O_ic
//   dQ = scale dS K,  dK = scale dS^T Q            (dK summed over the heads sharing it, like dV)
// P is recomputed tile by tile from the saved log-sum-exp: P_ij = exp(S_ij - lse_i). Rows with no
// visible key have P = 0, so they send nothing to any gradient.
template <class T>
var<T> attention(const var<T>& q, const var<T>& k, const var<T>& v, const mask_t* mask, bool causal)
{
    check_attention_shapes(q.shape(), k.shape(), v.shape(), mask);
    auto forward = kernels::attention_forward(q.value(), k.value(), v.value(), mask, causal);
    // The rule outlives the caller's mask: keep a copy (shared, so copying the rule stays cheap).
    std::shared_ptr<const mask_t> kept_mask = mask ? std::make_shared<const mask_t>(*mask) : nullptr;
    var<T> lse = detail::record(
        "attention_lse", {q, k, v}, std::move(forward.log_sum_exp), saves_nothing,
        [](backward_context<T>&) {
            // Never reached with a gradient: the lse is internal to attention, which sends it none.
        });
    auto rule = [kept_mask, causal](backward_context<T>& ctx) {
        auto grads = kernels::attention_backward(ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(), ctx.input(3),
                                                 ctx.grad(), kept_mask.get(), causal);
        for (std::size_t i = 0; i < 3; ++i)
        {
            if (ctx.needs_grad(i))
            {
                ctx.accumulate(i, std::move(i == 0 ? grads.q : i == 1 ? grads.k : grads.v));
            }
        }
    };
    return detail::record("attention", {q, k, v, lse}, std::move(forward.output),
                          saves_input0 | saves_input1 | saves_input2 | saves_input3 | saves_output, std::move(rule),
                          forward.multiply_adds);
}

#define XGRAD_ATTENTION(T) \
    template var<T> attention(const var<T>&, const var<T>&, const var<T>&, const mask_t*, bool);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_ATTENTION)
}  // namespace ops
}  // namespace xgrad
