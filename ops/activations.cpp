// The activations, elementwise, each one node with a hand-derived backward rule: relu, sigmoid, the GELU
// in its tanh form and its exact form, erf, silu, SwiGLU and the logits' soft cap (docs/spec.md; the
// variants' ones are checked against their composed twins, ops/composed.hpp). The GELU's forms run on
// xsimd batches (the exact form's float64 tail on libm, kernels/gelu.hpp), silu and swiglu too
// (kernels/activations.hpp), erf, sigmoid and the soft cap on libm one value at a time.
#include <cmath>

#include "autodiff/evaluate.hpp"
#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "kernels/activations.hpp"
#include "kernels/gelu.hpp"
#include "kernels/map.hpp"
#include "ops/composed.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
using kernels::lanes;
using kernels::map_values;
using namespace kernels::activations;

// An elementwise op y = f(x) whose rule is dL/dx = backward(x, g), both functors, x saved.
// `on_vars` is the rule again on vars, for a backward that records itself.
template <lanes kind, class T, class Forward, class Backward, class OnVars>
var<T> unary_op(const char* name, const var<T>& x, Forward forward, Backward backward, OnVars on_vars)
{
    array<T> y = map_values<kind>(x.value(), static_cast<const array<T>*>(nullptr), forward);
    auto on_arrays = [backward](backward_context<T>& ctx) {
        ctx.accumulate(0, map_values<kind>(ctx.input(0), &ctx.grad(), backward));
    };
    return detail::record(name, {x}, std::move(y), saves_input0, detail::with_var_form<T>(on_arrays, on_vars));
}

// A fused op's rule on vars: its composed twin, differentiated by the recording backward.
template <class T, class Twin>
auto twin_form(Twin twin)
{
    return [twin](graph_context<T>& ctx) { ctx.differentiate_twin(twin); };
}
}  // namespace

// y = max(x, 0).   dL/dx = g where y > 0, else 0   (the subgradient at 0 is 0, as in PyTorch)
template <class T>
var<T> relu(const var<T>& x)
{
    array<T> y = evaluate(xt::maximum(x.value(), T(0)));
    return detail::record("relu", {x}, std::move(y), saves_output, [](auto& ctx) {
        ctx.accumulate(0, rule::where_positive(ctx.output(), ctx.grad()));
    });
}

// y = 1 / (1 + e^-x).   dL/dx = g y (1 - y)
template <class T>
var<T> sigmoid(const var<T>& x)
{
    array<T> y = kernels::map_values<kernels::lanes::scalar>(
        x.value(), static_cast<const array<T>*>(nullptr), [](T v, T) { return stable_sigmoid(v); });
    return detail::record("sigmoid", {x}, std::move(y), saves_output, [](auto& ctx) {
        const auto& y = ctx.output();
        ctx.accumulate(0, ctx.grad() * y * (T(1) - y));
    });
}

// y = 0.5 x (1 + tanh(k (x + a x^3))), k = sqrt(2/pi), a = 0.044715   (one fused op)
// dL/dx = g [0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2)], t = tanh(k (x + a x^3)) recomputed from x
// Vectorised (xsimd, not libm's one value at a time: the scalar tanh was 80% of a small GPT's training
// step), with 0.5 (1 + t) written as a sigmoid (kernels/gelu.hpp).
template <class T>
var<T> gelu(const var<T>& x)
{
    using form = kernels::gelu::tanh_form;
    const kernels::gelu::forward<form> value;
    array<T> y = kernels::map_values(x.value(), static_cast<const array<T>*>(nullptr), value);
    auto on_arrays = [](backward_context<T>& ctx) {
        ctx.accumulate(0, kernels::map_values(ctx.input(0), &ctx.grad(), kernels::gelu::backward<form>{}));
    };
    auto twin = [](const std::vector<var<T>>& in) { return composed::gelu(in[0]); };
    return detail::record("gelu", {x}, std::move(y), saves_input0, detail::with_twin<T>(on_arrays, twin));
}

// y = erf(x).   dL/dx = g (2 / sqrt(pi)) e^{-x^2}
template <class T>
var<T> erf(const var<T>& x)
{
    const auto on_vars = [](graph_context<T>& ctx) {
        const var<T> x = ctx.input(0);
        ctx.accumulate(0, ctx.grad() * (T(1.1283791670955126) * exp(-(x * x))));  // 2 / sqrt(pi) e^{-x^2}
    };
    return unary_op<lanes::scalar>("erf", x, erf_forward{}, erf_backward{}, on_vars);
}

// y = x s(x), s = sigmoid.   dL/dx = g s (1 + x (1 - s))   (s' = s (1 - s))
template <class T>
var<T> silu(const var<T>& x)
{
    return unary_op<lanes::simd>("silu", x, silu_forward{}, silu_backward{},
                                 twin_form<T>([](const std::vector<var<T>>& in) { return composed::silu(in[0]); }));
}

// y = 0.5 x (1 + erf(x / sqrt 2)) = x Phi(x)   (for x < -1 as 0.5 x erfc(-x / sqrt 2): kernels/gelu.hpp)
// dL/dx = g (Phi(x) + x phi(x)),  phi(x) = e^{-x^2/2} / sqrt(2 pi)
template <class T>
var<T> gelu_exact(const var<T>& x)
{
    using form = kernels::gelu::exact_form;
    return unary_op<lanes::simd>("gelu_exact", x, kernels::gelu::forward<form>{}, kernels::gelu::backward<form>{},
                                 twin_form<T>([](const std::vector<var<T>>& in) { return composed::gelu_exact(in[0]); }));
}

// y = silu(a) u, a = gate.   dL/da = g u s (1 + a (1 - s)),  dL/du = g silu(a)   (s = sigmoid(a))
template <class T>
var<T> swiglu(const var<T>& gate, const var<T>& up)
{
    if (gate.shape() != up.shape())
    {
        fail("swiglu", "gate of shape " + shape_str(gate.shape()) + " and up of shape " + shape_str(up.shape()) +
                           " must have the same shape");
    }
    array<T> y = map_values(gate.value(), &up.value(), swiglu_forward{});
    auto twin = [](const std::vector<var<T>>& in) { return composed::swiglu(in[0], in[1]); };
    return detail::record("swiglu", {gate, up}, std::move(y), saves_input0 | saves_input1,
                          detail::with_twin<T>([](backward_context<T>& ctx) {
                              const array<T>& a = ctx.input(0);
                              if (ctx.needs_grad(0))
                              {
                                  array<T> g_up = ctx.grad() * ctx.input(1);
                                  ctx.accumulate(0, map_values(a, &g_up, silu_backward{}));
                              }
                              if (ctx.needs_grad(1))
                              {
                                  array<T> silu_a = map_values(a, static_cast<const array<T>*>(nullptr),
                                                               silu_forward{});
                                  ctx.accumulate(1, ctx.grad() * silu_a);
                              }
                          }, twin));
}

// y = c tanh(x / c), c > 0: the logits' soft cap (docs/spec.md, "More architecture variants"), one node.
// dL/dx = g (1 - tanh^2(x / c)) = g (1 - (y / c)^2), from the saved output; y / c is formed first, as
// 1 / c^2 overflows for caps below about 5e-20 in float32.
template <class T>
var<T> softcap(const var<T>& x, double cap)
{
    const T c = static_cast<T>(cap);
    if (!(c > 0) || !std::isfinite(c))  // a NaN, a negative or an infinite cap too: c is cap rounded to T
    {
        fail("softcap", "the cap c must be a positive finite number in the logits' type, got " +
                            std::to_string(cap) + (cap > 0 && c == 0 ? " (0 once rounded)" : ""));
    }
    array<T> y = evaluate(c * xt::tanh(x.value() / c));
    return detail::record("softcap", {x}, std::move(y), saves_output, [c](auto& ctx) {
        const auto tanh_x = ctx.output() / c;
        ctx.accumulate(0, ctx.grad() * (T(1) - tanh_x * tanh_x));
    });
}

#define XGRAD_ACTIVATIONS(T)                                               \
    template var<T> relu(const var<T>&);                                   \
    template var<T> sigmoid(const var<T>&);                                \
    template var<T> gelu(const var<T>&);                                   \
    template var<T> erf(const var<T>&);                                    \
    template var<T> silu(const var<T>&);                                   \
    template var<T> gelu_exact(const var<T>&);                             \
    template var<T> swiglu(const var<T>&, const var<T>&);                  \
    template var<T> softcap(const var<T>&, double);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_ACTIVATIONS)
}  // namespace xgrad::ops
