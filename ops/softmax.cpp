// The softmax family, each one node with a hand-derived backward rule over the last axis:
// masked_softmax (and softmax), softmax(scale * x) among the entries a boolean mask keeps, with scale and
// mask inside the op (one pass over the scores; the mask gets no gradient); log_softmax; and
// cross_entropy, the mean of -log softmax at the targets. The row loops are in kernels/softmax.cpp and
// kernels/log_softmax.hpp; rows are split across threads when there are many.
#include <memory>

#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "kernels/kernels.hpp"
#include "kernels/log_softmax.hpp"
#include "ops/checks.hpp"
#include "ops/composed.hpp"
#include "ops/ops.hpp"

namespace xgrad
{
namespace ops
{
namespace
{
template <class T>
var<T> softmax_op(const var<T>& x, const mask_t* mask, T scale)
{
    if (x.shape().empty())
    {
        fail("masked_softmax", "input must have at least one axis, got shape ()");
    }
    if (mask && !broadcasts_to(to_shape(mask->shape()), x.shape()))
    {
        fail("masked_softmax", "mask of shape " + shape_str(to_shape(mask->shape())) +
                                   " does not broadcast to input of shape " + shape_str(x.shape()));
    }
    array<T> y = kernels::masked_softmax_forward(x.value(), mask, scale);
    // y_j = e^{s x_j} / sum_{k kept} e^{s x_k} on kept j, 0 elsewhere.
    // dL/dx_j = s y_j (g_j - sum_k g_k y_k). Masked entries and fully masked rows have y = 0, so their
    // gradient is 0 with no special case.
    auto on_arrays = [scale](backward_context<T>& ctx) {
        ctx.accumulate(0, kernels::masked_softmax_backward(ctx.output(), ctx.grad(), scale));
    };
    // On vars: the composed twin, with the mask read back from the output (y = 0 exactly where masked;
    // an entry whose y underflowed to 0 has every derivative of any order 0 as well: each carries a y_j).
    auto on_vars = [scale](graph_context<T>& ctx) {
        const mask_t kept = xt::not_equal(ctx.output().value(), T(0));
        ctx.differentiate_twin([&](const std::vector<var<T>>& in) { return composed::masked_softmax(in[0], &kept, scale); });
    };
    return detail::record("masked_softmax", {x}, std::move(y), saves_output, detail::with_var_form<T>(on_arrays, on_vars));
}

// The targets of cross_entropy: shape = logits' shape without the last axis, values in [0, V) or -1.
void check_targets(const shape_t& logits_shape, const ids_t& targets)
{
    const shape_t targets_shape = to_shape(targets.shape());
    const shape_t expected(logits_shape.begin(), logits_shape.end() - 1);
    if (targets_shape != expected)
    {
        fail("cross_entropy", "targets of shape " + shape_str(targets_shape) + " must have the shape of logits " +
                                  shape_str(logits_shape) + " without the last axis, " + shape_str(expected));
    }
    const auto vocab = static_cast<std::int64_t>(logits_shape.back());
    for (std::size_t i = 0; i < targets.size(); ++i)
    {
        const std::int64_t t = targets.flat(i);
        if (t != -1 && (t < 0 || t >= vocab))
        {
            fail("cross_entropy", "target " + std::to_string(t) + " at position " + position_str(i, targets_shape) +
                                      " is outside [0, " + std::to_string(vocab) +
                                      ") and not -1 (ignored), for logits of shape " + shape_str(logits_shape));
        }
    }
}
}  // namespace

template <class T>
var<T> masked_softmax(const var<T>& x, const mask_t& mask, T scale)
{
    return softmax_op(x, &mask, scale);
}

template <class T>
var<T> softmax(const var<T>& x, T scale)
{
    return softmax_op<T>(x, nullptr, scale);
}

// y_j = x_j - log sum_k e^{x_k} over the last axis.
// dy_j/dx_i = [i = j] - softmax_i, so dL/dx_i = g_i - softmax_i sum_j g_j, with softmax = e^y (saved output).
template <class T>
var<T> log_softmax(const var<T>& x)
{
    checks::check_has_last_axis("log_softmax", x.shape());
    const kernels::rows_of rows(x.shape());
    array<T> y = array<T>::from_shape(x.shape());
    kernels::log_softmax_rows(x.value().data(), y.data(), rows);
    auto rule = [rows](backward_context<T>& ctx) {
        array<T> dx = ctx.take_grad();  // g, turned into dL/dx row by row in place
        kernels::log_softmax_backward_rows(dx.data(), ctx.output().data(), rows);
        ctx.accumulate(0, std::move(dx));
    };
    auto twin = [](const std::vector<var<T>>& in) { return composed::log_softmax(in[0]); };
    return detail::record("log_softmax", {x}, std::move(y), saves_output, detail::with_twin<T>(std::move(rule), twin));
}

// L = (1/n) sum over the n kept rows r (target t_r != -1) of -log softmax(x_r)[t_r]
//   = (1/n) sum_r (m_r - x_{r, t_r}) + log sum_j e^{x_{r j} - m_r},   m_r = max_j x_{r j}.
// dL/dx_{r j} = (softmax(x_r)_j - [j = t_r]) / n on kept rows, 0 on ignored rows;
// softmax(x_r)_j = e^{x_{r j} - m_r} / sum_k e^{x_{r k} - m_r}.
// Saves the logits (already alive) and, per row, m_r and the log of the shifted sum (never added into
// log sum e^x, which rounds to the logits' magnitude: kernels/log_softmax.hpp), not a softmax copy.
// No kept row: L = 0, gradient 0.
template <class T>
var<T> cross_entropy(const var<T>& logits, const ids_t& targets)
{
    const shape_t shape = logits.shape();
    checks::check_has_last_axis("cross_entropy", shape);
    check_targets(shape, targets);
    const kernels::rows_of rows(shape);
    std::vector<T> top(rows.count, T(0)), log_total(rows.count, T(0)), row_loss(rows.count, T(0));
    kernels::cross_entropy_rows(logits.value().data(), targets, rows, top, log_total, row_loss);
    std::size_t kept = 0;
    T total = 0;
    for (std::size_t r = 0; r < rows.count; ++r)
    {
        if (targets.flat(r) != -1)
        {
            ++kept;
            total += row_loss[r];
        }
    }
    array<T> loss = array<T>::from_shape(shape_t{});
    loss.flat(0) = kept > 0 ? total / static_cast<T>(kept) : T(0);

    const std::size_t rule_bytes = 2 * rows.count * sizeof(T) + targets.size() * sizeof(std::int64_t);
    const auto shared_targets = std::make_shared<const ids_t>(targets);  // one copy for both forms of the rule
    auto rule = [rows, shared_targets, top = std::move(top), log_total = std::move(log_total),
                 kept](backward_context<T>& ctx) {
        const ids_t& targets = *shared_targets;
        array<T> dx = xt::zeros<T>(ctx.input(0).shape());
        if (kept > 0)
        {
            const T per_row = ctx.grad().flat(0) / static_cast<T>(kept);  // g / n
            kernels::cross_entropy_backward_rows(dx.data(), ctx.input(0).data(), targets, rows, top, log_total,
                                                 per_row);
        }
        ctx.accumulate(0, std::move(dx));
    };
    auto twin = [shared_targets](const std::vector<var<T>>& in) {
        return composed::cross_entropy(in[0], *shared_targets);
    };
    return detail::record("cross_entropy", {logits}, std::move(loss), saves_input0,
                          detail::with_twin<T>(std::move(rule), twin), 0, rule_bytes);
}

#define XGRAD_SOFTMAX(T)                                                \
    template var<T> masked_softmax(const var<T>&, const mask_t&, T);    \
    template var<T> softmax(const var<T>&, T);                          \
    template var<T> log_softmax(const var<T>&);                         \
    template var<T> cross_entropy(const var<T>&, const ids_t&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_SOFTMAX)
}  // namespace ops
}  // namespace xgrad
