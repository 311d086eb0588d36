// attention: the fused, memory-efficient scaled dot-product attention op over kernels/attention.cpp, on
// heads split out (B, H, T, dh) or on the projections' token-major layout (B, T, H dh).
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
#include "ops/composed.hpp"
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

// Shapes of the token-major form: q (B, Tq, H dh), k = v (B, Tk, G dh), the same dh, H % G == 0.
void check_token_major_shapes(const shape_t& qs, const shape_t& ks, const shape_t& vs, std::size_t heads,
                              std::size_t kv_heads, const mask_t* mask)
{
    const char* op = "attention_token_major";
    const std::string got = ", got q " + shape_str(qs) + ", k " + shape_str(ks) + ", v " + shape_str(vs) +
                            " with heads = " + std::to_string(heads) + ", kv_heads = " + std::to_string(kv_heads);
    if (qs.size() != 3 || ks.size() != 3 || ks != vs || ks[0] != qs[0])
    {
        fail(op, "q, k, v must be (B, Tq, H dh), (B, Tk, G dh), (B, Tk, G dh)" + got);
    }
    if (heads == 0 || kv_heads == 0 || heads % kv_heads != 0 || qs[2] % heads != 0 || ks[2] % kv_heads != 0 ||
        qs[2] == 0 || qs[2] / heads != ks[2] / kv_heads)
    {
        fail(op, "need heads a multiple of kv_heads and one positive head width dh = q width / heads = "
                 "k width / kv_heads" + got);
    }
    const shape_t scores{qs[0], heads, qs[1], ks[1]};
    if (mask && !broadcasts_to(to_shape(mask->shape()), scores))
    {
        fail(op, "mask of shape " + shape_str(to_shape(mask->shape())) +
                     " does not broadcast to the attention scores (B, H, Tq, Tk) = " + shape_str(scores));
    }
}

// Records the op's two nodes around a forward already computed; `backward` maps (q, k, v, O, lse, dO)
// to the gradients of q, k and v, and keeps a copy of the caller's mask, if any (declared to the tape).
template <class T, class Backward, class Twin>
var<T> record_attention(const var<T>& q, const var<T>& k, const var<T>& v,
                        kernels::attention_forward_result<T> forward, Backward backward, Twin twin, const mask_t* mask)
{
    var<T> lse = detail::record(
        "attention_lse", {q, k, v}, std::move(forward.log_sum_exp), saves_nothing,
        [](backward_context<T>&) {
            // Never reached with a gradient: the lse is internal to attention, which sends it none.
        });
    auto on_arrays = [backward](backward_context<T>& ctx) {
        auto grads = backward(ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(), ctx.input(3), ctx.grad());
        for (std::size_t i = 0; i < 3; ++i)
        {
            if (ctx.needs_grad(i))
            {
                ctx.accumulate(i, std::move(i == 0 ? grads.q : i == 1 ? grads.k : grads.v));
            }
        }
    };
    return detail::record("attention", {q, k, v, lse}, std::move(forward.output),
                          saves_input0 | saves_input1 | saves_input2 | saves_input3 | saves_output,
                          detail::with_twin<T>(std::move(on_arrays), std::move(twin)), forward.multiply_adds,
                          mask ? mask->size() * sizeof(bool) : 0);
}

// The rule outlives the caller's mask: keep a copy (shared, so copying the rule stays cheap).
std::shared_ptr<const mask_t> kept(const mask_t* mask)
{
    return mask ? std::make_shared<const mask_t>(*mask) : nullptr;
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
    const auto kept_mask = kept(mask);  // one copy for both forms of the rule
    auto backward = [kept_mask, causal](const array<T>& q_, const array<T>& k_, const array<T>& v_,
                                                     const array<T>& o, const array<T>& lse, const array<T>& g) {
        return kernels::attention_backward(q_, k_, v_, o, lse, g, kept_mask.get(), causal);
    };
    auto twin = [kept_mask, causal](const std::vector<var<T>>& in) {
        return composed::attention(in[0], in[1], in[2], kept_mask.get(), causal);
    };
    return record_attention(q, k, v, std::move(forward), backward, twin, mask);
}

// The rules above, read and written in the token-major layout (the rows of head h are columns
// [h dh, (h + 1) dh) of each token's row).
template <class T>
var<T> attention_token_major(const var<T>& q, const var<T>& k, const var<T>& v, std::size_t heads,
                             std::size_t kv_heads, const mask_t* mask, bool causal)
{
    check_token_major_shapes(q.shape(), k.shape(), v.shape(), heads, kv_heads, mask);
    auto forward =
        kernels::attention_forward_token_major(q.value(), k.value(), v.value(), heads, kv_heads, mask, causal);
    const auto kept_mask = kept(mask);  // one copy for both forms of the rule
    auto backward = [kept_mask, causal, heads, kv_heads](
                        const array<T>& q_, const array<T>& k_, const array<T>& v_, const array<T>& o,
                        const array<T>& lse, const array<T>& g) {
        return kernels::attention_backward_token_major(q_, k_, v_, o, lse, g, heads, kv_heads, kept_mask.get(),
                                                       causal);
    };
    auto twin = [kept_mask, causal, heads, kv_heads](const std::vector<var<T>>& in) {
        return composed::attention_token_major(in[0], in[1], in[2], heads, kv_heads, kept_mask.get(), causal);
    };
    return record_attention(q, k, v, std::move(forward), backward, twin, mask);
}

#define XGRAD_ATTENTION(T)                                                                        \
    template var<T> attention(const var<T>&, const var<T>&, const var<T>&, const mask_t*, bool); \
    template var<T> attention_token_major(const var<T>&, const var<T>&, const var<T>&, std::size_t, \
                                          std::size_t, const mask_t*, bool);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_ATTENTION)
}  // namespace ops
}  // namespace xgrad
