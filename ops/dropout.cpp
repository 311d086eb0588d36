// Inverted dropout, one node with a hand-derived backward rule (the composed twin in ops/composed.hpp
// checks it).
#include <random>

#include <memory>

#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "ops/checks.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
// y = x m / (1 - p), m_i ~ Bernoulli(1 - p) drawn from `generator` (one 64-bit draw per entry: keep when
// a uniform u in [0, 1) with 53 random bits is >= p). dL/dx = g m / (1 - p), with the same saved mask.
// The factor multiplies (x times 0 where dropped), so a NaN in x stays NaN, as in PyTorch.
template <class T>
var<T> dropout(const var<T>& x, T p, std::mt19937_64& generator, bool training)
{
    if (!(p >= T(0) && p < T(1)))
    {
        fail("dropout", "p must be in [0, 1), got " + checks::number_str(p) + " (input of shape " +
                            shape_str(x.shape()) + ")");
    }
    if (p == T(0) || !training)
    {
        return x;
    }
    const T keep_scale = T(1) / (T(1) - p);
    const double drop_below = static_cast<double>(p);
    mask_t keep = mask_t::from_shape(x.value().shape());
    for (auto& k : keep)
    {
        const double u = static_cast<double>(generator() >> 11) * 0x1.0p-53;
        k = u >= drop_below;
    }
    array<T> y = array<T>::from_shape(x.shape());
    const T* in = x.value().data();
    for (std::size_t i = 0; i < y.size(); ++i)
    {
        y.data()[i] = in[i] * (keep.data()[i] ? keep_scale : T(0));
    }
    const std::size_t keep_bytes = keep.size() * sizeof(bool);
    auto kept = std::make_shared<const mask_t>(std::move(keep));  // one mask for both forms of the rule
    auto rule = [kept, keep_scale](backward_context<T>& ctx) {
        array<T> dx = ctx.take_grad();
        const bool* keep = kept->data();
        for (std::size_t i = 0; i < dx.size(); ++i)
        {
            dx.data()[i] *= keep[i] ? keep_scale : T(0);
        }
        ctx.accumulate(0, std::move(dx));
    };
    // On vars: g times the constant m / (1 - p), built from the same mask when a recording backward asks.
    auto on_vars = [kept, keep_scale](graph_context<T>& ctx) {
        const var<T> g = ctx.grad();
        ctx.accumulate(0, g * constant_like(g, array<T>(keep_scale * xt::cast<T>(*kept))));
    };
    return detail::record("dropout", {x}, std::move(y), saves_nothing, detail::with_var_form<T>(std::move(rule), on_vars),
                          0, keep_bytes);
}

#define XGRAD_DROPOUT(T) template var<T> dropout(const var<T>&, T, std::mt19937_64&, bool);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_DROPOUT)
}  // namespace xgrad::ops
