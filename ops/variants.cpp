// The fused ops of the architecture variants (docs/spec.md, "Architecture variants"): erf, silu, the
// exact GELU, SwiGLU, RMSNorm and the rotary embedding. Each is one node with a hand-derived backward
// rule, checked against its composed twin (ops/composed.hpp). silu, swiglu and the exact GELU run on
// xsimd batches (the GELU's float64 tail on libm, kernels/gelu.hpp), erf on libm (for its accuracy); the
// row ops (rms_norm, rope) walk contiguous rows of the last axis, split across threads when large.

// GCC 12 warns inside its own AVX-512 intrinsics when xsimd's exp inlines here (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cmath>
#include <sstream>
#include <type_traits>
#include <vector>

#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "kernels/parallel.hpp"
#include "kernels/gelu.hpp"
#include "kernels/map.hpp"
#include "kernels/norm.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
constexpr double two_over_sqrt_pi = 1.1283791670955126;  // 2 / sqrt(pi)

template <class T>
std::string number_str(T value)
{
    std::ostringstream out;
    out << value;
    return out.str();
}

// ---- elementwise kernels on xsimd batches -------------------------------------------------------
// Each functor maps (x, other) to a batch; `other` is the second operand (the incoming gradient in a
// backward, `up` in SwiGLU) or 0 when absent.
using kernels::lanes;
using kernels::map_values;

// sigmoid(x) = 1 / (1 + e^-x); for x -> -inf, e^-x -> inf and the quotient -> 0 (no NaN).
template <class V>
V sigmoid_of(V x)
{
    using T = typename kernels::scalar_of<V>::type;
    return V(T(1)) / (V(T(1)) + xsimd::exp(-x));
}

// d silu / dx = s (1 + x (1 - s)), s = sigmoid(x)
template <class V>
V silu_slope(V x)
{
    using T = typename kernels::scalar_of<V>::type;
    const V s = sigmoid_of(x);
    return s * (V(T(1)) + x * (V(T(1)) - s));
}

struct silu_forward
{
    template <class V>
    V operator()(V x, V) const
    {
        return x * sigmoid_of(x);
    }
};

struct silu_backward
{
    template <class V>
    V operator()(V x, V g) const
    {
        return g * silu_slope(x);
    }
};

struct swiglu_forward
{
    template <class V>
    V operator()(V gate, V up) const
    {
        return gate * sigmoid_of(gate) * up;
    }
};

// erf uses libm one value at a time, as does the exact GELU's tail (kernels/gelu.hpp): xsimd's erfc is
// off by up to 4e-12 relative in double (and 4e-6 in float) for x > 2, where GELU's x << 0 reads it.
struct erf_forward
{
    template <class T>
    T operator()(T x, T) const
    {
        return std::erf(x);
    }
};

struct erf_backward
{
    template <class T>
    T operator()(T x, T g) const
    {
        return g * T(two_over_sqrt_pi) * std::exp(-x * x);
    }
};

// An elementwise op y = f(x) whose rule is dL/dx = backward(x, g), both functors, x saved.
template <lanes kind, class T, class Forward, class Backward>
var<T> unary_op(const char* name, const var<T>& x, Forward forward, Backward backward)
{
    array<T> y = map_values<kind>(x.value(), static_cast<const array<T>*>(nullptr), forward);
    return detail::record(name, {x}, std::move(y), saves_input0, [backward](backward_context<T>& ctx) {
        ctx.accumulate(0, map_values<kind>(ctx.input(0), &ctx.grad(), backward));
    });
}

// ---- row ops --------------------------------------------------------------------------------------
// `count` rows of `length` contiguous entries (the last axis).
struct rows_of
{
    std::size_t count = 1;
    std::size_t length = 0;

    explicit rows_of(const shape_t& shape)
    {
        for (std::size_t ax = 0; ax + 1 < shape.size(); ++ax)
        {
            count *= shape[ax];
        }
        length = shape.back();
    }
};

void check_rms_norm(const shape_t& x, const shape_t& weight, double eps)
{
    if (x.empty())
    {
        fail("rms_norm", "input must have at least one axis, got shape ()");
    }
    if (weight != shape_t{x.back()})
    {
        fail("rms_norm", "weight of shape " + shape_str(weight) + " must be " + shape_str(shape_t{x.back()}) +
                             " for input of shape " + shape_str(x));
    }
    if (!(eps >= 0))
    {
        fail("rms_norm", "eps must be >= 0, got " + number_str(eps));
    }
}

void check_rope(const shape_t& x, double base)
{
    if (x.size() != 4 || x[3] % 2 != 0)
    {
        fail("rope", "input must be (B, H, T, dh) with dh even, got shape " + shape_str(x));
    }
    if (!(base > 0) || !std::isfinite(base))
    {
        fail("rope", "base must be a finite number > 0, got " + number_str(base) + " (input of shape " +
                         shape_str(x) + ")");
    }
}

// cos and sin of the rotary angles, (T, dh/2) row-major: angle[t][i] = (offset + t) * base^(-2i/dh),
// computed in double and rounded once to T.
template <class T>
struct rope_table
{
    std::vector<T> cos, sin;

    rope_table(std::size_t length, std::size_t dh, double base, std::size_t offset)
        : cos(length * (dh / 2)), sin(length * (dh / 2))
    {
        for (std::size_t t = 0; t < length; ++t)
        {
            for (std::size_t i = 0; i < dh / 2; ++i)
            {
                const double frequency = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(dh));
                const double angle = static_cast<double>(offset + t) * frequency;
                cos[t * (dh / 2) + i] = static_cast<T>(std::cos(angle));
                sin[t * (dh / 2) + i] = static_cast<T>(std::sin(angle));
            }
        }
    }
};

// Rotates every pair (2i, 2i+1) of each row of (B, H, T, dh) by its angle, or by minus it (`inverse`).
template <class T>
array<T> rotate_pairs(const array<T>& x, const rope_table<T>& table, bool inverse)
{
    const shape_t shape = to_shape(x.shape());
    const std::size_t length = shape[2], dh = shape[3], half = dh / 2;
    const rows_of rows(shape);
    array<T> y = array<T>::from_shape(shape);
    const T* in = x.data();
    kernels::for_rows(rows.count, dh, [&](std::size_t r) {
        const std::size_t t = r % length;
        const T* c = table.cos.data() + t * half;
        const T* s = table.sin.data() + t * half;
        const T* xr = in + r * dh;
        T* yr = y.data() + r * dh;
        for (std::size_t i = 0; i < half; ++i)
        {
            const T sin_i = inverse ? -s[i] : s[i];
            const T a = xr[2 * i], b = xr[2 * i + 1];
            yr[2 * i] = a * c[i] - b * sin_i;
            yr[2 * i + 1] = a * sin_i + b * c[i];
        }
    });
    return y;
}
}  // namespace

// y = erf(x).   dL/dx = g (2 / sqrt(pi)) e^{-x^2}
template <class T>
var<T> erf(const var<T>& x)
{
    return unary_op<lanes::scalar>("erf", x, erf_forward{}, erf_backward{});
}

// y = x s(x), s = sigmoid.   dL/dx = g s (1 + x (1 - s))   (s' = s (1 - s))
template <class T>
var<T> silu(const var<T>& x)
{
    return unary_op<lanes::simd>("silu", x, silu_forward{}, silu_backward{});
}

// y = 0.5 x (1 + erf(x / sqrt 2)) = x Phi(x)   (for x < -1 as 0.5 x erfc(-x / sqrt 2): kernels/gelu.hpp)
// dL/dx = g (Phi(x) + x phi(x)),  phi(x) = e^{-x^2/2} / sqrt(2 pi)
template <class T>
var<T> gelu_exact(const var<T>& x)
{
    using form = kernels::gelu::exact_form;
    return unary_op<lanes::simd>("gelu_exact", x, kernels::gelu::forward<form>{},
                                 kernels::gelu::backward<form>{});
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
    return detail::record("swiglu", {gate, up}, std::move(y), saves_input0 | saves_input1,
                          [](backward_context<T>& ctx) {
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
                                  ctx.accumulate(1, array<T>(ctx.grad() * silu_a));
                              }
                          });
}

// Over the last axis (d entries): r = 1 / sqrt(mean(x^2) + eps), xhat = x r, y = xhat w.
// Backward, row by row with dxhat = g w:
//   dL/dw = sum over rows of g xhat,   dL/dx = r (dxhat - xhat mean(dxhat xhat)).
// Derivation: dr/dx_k = -r^3 x_k / d, so dxhat_i/dx_k = r [i = k] - r xhat_i xhat_k / d and
// dL/dx_k = sum_i dxhat_i dxhat_i/dx_k = r dxhat_k - r xhat_k (1/d) sum_i dxhat_i xhat_i.
// Saves x, w and r per row; xhat is recomputed in backward. Row kernels: kernels/norm.hpp (dw as
// partial sums per block of rows).
template <class T>
var<T> rms_norm(const var<T>& x, const var<T>& weight, double eps)
{
    check_rms_norm(x.shape(), weight.shape(), eps);
    const rows_of rows(x.shape());
    const std::size_t d = rows.length;
    std::vector<T> rms_inv(rows.count);
    array<T> y = array<T>::from_shape(x.shape());
    const T* in = x.value().data();
    const T* w = weight.value().data();
    kernels::for_rows(rows.count, d, [&](std::size_t r) {
        rms_inv[r] = kernels::norm::rms_norm_rstd(in + r * d, d, static_cast<T>(eps));
        kernels::norm::rms_norm_row(in + r * d, w, y.data() + r * d, d, rms_inv[r]);
    });

    const std::size_t rms_bytes = rms_inv.size() * sizeof(T);
    auto rule = [rows, rms_inv = std::move(rms_inv)](backward_context<T>& ctx) {
        const std::size_t d = rows.length;
        const bool wants_dx = ctx.needs_grad(0), wants_dw = ctx.needs_grad(1);
        const T* x = ctx.input(0).data();
        const T* w = ctx.input(1).data();
        const T* g = ctx.grad().data();
        array<T> dx = array<T>::from_shape(wants_dx ? ctx.input(0).shape() : shape_t{0});
        const std::size_t blocks = kernels::row_block_count(rows.count, d);
        kernels::block_sums<T> dw_sums(wants_dw ? blocks : 0, d);
        kernels::for_row_blocks(rows.count, blocks, [&](std::size_t block, std::size_t first, std::size_t end) {
            for (std::size_t r = first; r < end; ++r)
            {
                kernels::norm::rms_norm_row_backward(x + r * d, g + r * d, w, d, rms_inv[r],
                                                     wants_dx ? dx.data() + r * d : nullptr,
                                                     wants_dw ? dw_sums.of(block) : nullptr);
            }
        });
        if (wants_dx)
        {
            ctx.accumulate(0, std::move(dx));
        }
        if (wants_dw)
        {
            array<T> dw = xt::zeros<T>(shape_t{d});
            dw_sums.add_to(dw.data());
            ctx.accumulate(1, std::move(dw));
        }
    };
    return detail::record("rms_norm", {x, weight}, std::move(y), saves_input0 | saves_input1, std::move(rule), 0,
                          rms_bytes);
}

// Row t of (B, H, T, dh), pair (2i, 2i+1), angle a = (offset + t) base^(-2i/dh):
//   y_2i = x_2i cos a - x_2i+1 sin a,   y_2i+1 = x_2i sin a + x_2i+1 cos a   (a rotation R(a)).
// dL/dx = R(a)^T g = R(-a) g:  dx_2i = g_2i cos a + g_2i+1 sin a,  dx_2i+1 = -g_2i sin a + g_2i+1 cos a.
// Saves only the (T, dh/2) table of cos and sin.
template <class T>
var<T> rope(const var<T>& x, double base, std::size_t position_offset)
{
    check_rope(x.shape(), base);
    const shape_t shape = x.shape();
    rope_table<T> table(shape[2], shape[3], base, position_offset);
    array<T> y = rotate_pairs(x.value(), table, false);
    const std::size_t table_bytes = (table.cos.size() + table.sin.size()) * sizeof(T);
    return detail::record(
        "rope", {x}, std::move(y), saves_nothing,
        [table = std::move(table)](backward_context<T>& ctx) { ctx.accumulate(0, rotate_pairs(ctx.grad(), table, true)); },
        0, table_bytes);
}

#define XGRAD_VARIANTS(T)                                                  \
    template var<T> erf(const var<T>&);                                    \
    template var<T> silu(const var<T>&);                                   \
    template var<T> gelu_exact(const var<T>&);                             \
    template var<T> swiglu(const var<T>&, const var<T>&);                  \
    template var<T> rms_norm(const var<T>&, const var<T>&, double);        \
    template var<T> rope(const var<T>&, double, std::size_t);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_VARIANTS)
}  // namespace xgrad::ops
