// The composed twins of the fused ops: each is built from primitive ops only and records nothing of its
// own, so the tape derives its backward. Tests hold the fused rules against these.
#include <cmath>
#include <cstdint>
#include <limits>

#include "autodiff/evaluate.hpp"
#include "autodiff/instantiate.hpp"
#include "kernels/attention.hpp"
#include "ops/composed.hpp"

namespace xgrad::ops::composed
{
namespace
{
std::string index_str(const std::vector<std::size_t>& index)
{
    std::string s = "[";
    for (std::size_t i = 0; i < index.size(); ++i)
    {
        s += (i ? ", " : "") + std::to_string(index[i]);
    }
    return s + "]";
}

// The position of flat entry `flat` of a row-major array of shape `shape`.
std::vector<std::size_t> position_of(std::size_t flat, const shape_t& shape)
{
    std::vector<std::size_t> index(shape.size());
    for (std::size_t ax = shape.size(); ax-- > 0;)
    {
        index[ax] = flat % shape[ax];
        flat /= shape[ax];
    }
    return index;
}

std::size_t last_axis(const char* op, const shape_t& shape)
{
    if (shape.empty())
    {
        fail(op, "input must have at least one axis, got shape ()");
    }
    return shape.size() - 1;
}
}  // namespace

// x W + b, the bias broadcast over the rows
template <class T>
var<T> linear(const var<T>& x, const var<T>& weight, const var<T>& bias)
{
    return add(matmul(x, weight), bias);
}

// gelu(x) = 0.5 x (1 + tanh(k (x + a x^3))), k = sqrt(2/pi), a = 0.044715
template <class T>
var<T> gelu(const var<T>& x)
{
    const T k = T(0.7978845608028654);  // sqrt(2/pi)
    const T a = T(0.044715);
    const var<T> cube = mul(mul(x, x), x);
    const var<T> t = tanh(scale(add(x, scale(cube, a)), k));
    return scale(mul(x, add_scalar(t, T(1))), T(0.5));
}

// (x - mean) / sqrt(var + eps) * weight + bias over the last axis, var = mean((x - mean)^2) (biased)
template <class T>
var<T> layer_norm(const var<T>& x, const var<T>& weight, const var<T>& bias, T eps)
{
    const std::size_t axis = last_axis("layer_norm", x.shape());
    const shape_t features{x.shape()[axis]};
    if (weight.shape() != features || bias.shape() != features)
    {
        fail("layer_norm",
             "weight of shape " + shape_str(weight.shape()) + " and bias of shape " +
                 shape_str(bias.shape()) + " must both be " + shape_str(features) + " for input of shape " +
                 shape_str(x.shape()));
    }
    const var<T> centred = sub(x, mean(x, {axis}, true));
    const var<T> var_x = mean(mul(centred, centred), {axis}, true);
    const var<T> normalised = mul(centred, rsqrt(add_scalar(var_x, eps)));
    return add(mul(normalised, weight), bias);
}

// log softmax(x) = (x - m) - log sum_j e^(x_j - m) over the last axis, m = max_j x_j: no exponential
// exceeds 1, so large logits stay finite. (The gradient through m cancels: d/dm is -1 + sum softmax = 0.)
template <class T>
var<T> log_softmax(const var<T>& x)
{
    const std::size_t axis = last_axis("log_softmax", x.shape());
    const var<T> shifted = sub(x, max(x, axis, true));
    return sub(shifted, log(sum(exp(shifted), {axis}, true)));
}

// loss = -(1/N) sum_{rows r with t_r != -1} log_softmax(logits)[r, t_r], N = the number of such rows.
// The pick is a mul by a constant one-hot (zero rows for ignored targets) and a sum; with N = 0 the
// loss is 0 * 0 = 0 and every gradient 0. (A logit of -inf elsewhere in a row would give 0 * -inf = NaN
// here; the fused op has no such product.)
template <class T>
var<T> cross_entropy(const var<T>& logits, const ids_t& targets)
{
    const shape_t shape = logits.shape();
    const std::size_t axis = last_axis("cross_entropy", shape);
    const shape_t rows_shape(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(axis));
    const shape_t targets_shape = to_shape(targets.shape());
    if (targets_shape != rows_shape)
    {
        fail("cross_entropy",
             "targets of shape " + shape_str(targets_shape) + " do not match logits of shape " +
                 shape_str(shape) + " without its last axis " + shape_str(rows_shape));
    }
    const std::size_t classes = shape[axis];
    array<T> one_hot = xt::zeros<T>(shape);
    std::size_t kept = 0;
    for (std::size_t r = 0; r < targets.size(); ++r)
    {
        const std::int64_t target = targets.flat(r);
        if (target == -1)
        {
            continue;
        }
        if (target < 0 || static_cast<std::uint64_t>(target) >= classes)
        {
            fail("cross_entropy",
                 "target " + std::to_string(target) + " at position " +
                     index_str(position_of(r, targets_shape)) + " is outside [0, " + std::to_string(classes) +
                     ") and is not -1 (ignored)");
        }
        one_hot.flat(r * classes + static_cast<std::size_t>(target)) = T(1);
        ++kept;
    }
    const var<T> mask = constant_like(logits, std::move(one_hot), "one_hot");
    const var<T> picked = sum(mul(composed::log_softmax(logits), mask));
    return scale(picked, kept == 0 ? T(0) : T(-1) / static_cast<T>(kept));
}

// silu(x) = x sigmoid(x)
template <class T>
var<T> silu(const var<T>& x)
{
    return mul(x, sigmoid(x));
}

// gelu(x) = 0.5 x (1 + erf(x / sqrt 2))
template <class T>
var<T> gelu_exact(const var<T>& x)
{
    const T one_over_sqrt_2 = T(0.70710678118654752);
    return scale(mul(x, add_scalar(erf(scale(x, one_over_sqrt_2)), T(1))), T(0.5));
}

template <class T>
var<T> swiglu(const var<T>& gate, const var<T>& up)
{
    if (gate.shape() != up.shape())
    {
        fail("swiglu", "gate of shape " + shape_str(gate.shape()) + " and up of shape " + shape_str(up.shape()) +
                           " must have the same shape");
    }
    return mul(composed::silu(gate), up);
}

// x / sqrt(mean(x^2) + eps) * weight over the last axis
template <class T>
var<T> rms_norm(const var<T>& x, const var<T>& weight, double eps)
{
    const std::size_t axis = last_axis("rms_norm", x.shape());
    if (weight.shape() != shape_t{x.shape()[axis]})
    {
        fail("rms_norm", "weight of shape " + shape_str(weight.shape()) + " must be " +
                             shape_str(shape_t{x.shape()[axis]}) + " for input of shape " + shape_str(x.shape()));
    }
    const var<T> mean_square = mean(mul(x, x), {axis}, true);
    return mul(mul(x, rsqrt(add_scalar(mean_square, static_cast<T>(eps)))), weight);
}

// rope(x)[.., t, 2i] = x_2i cos a - x_2i+1 sin a,  rope(x)[.., t, 2i+1] = x_2i sin a + x_2i+1 cos a,
// a = (offset + t) base^(-2i/dh); written as x * C + (x @ P) * S with (x @ P)_2i = -x_2i+1,
// (x @ P)_2i+1 = x_2i, and C, S (T, dh) repeating each pair's cos and sin.
template <class T>
var<T> rope(const var<T>& x, double base, std::size_t position_offset)
{
    const shape_t shape = x.shape();
    if (shape.size() != 4 || shape[3] % 2 != 0)
    {
        fail("rope", "input must be (B, H, T, dh) with dh even, got shape " + shape_str(shape));
    }
    const std::size_t length = shape[2], dh = shape[3];
    array<T> cos_table = array<T>::from_shape({length, dh}), sin_table = array<T>::from_shape({length, dh});
    for (std::size_t t = 0; t < length; ++t)
    {
        for (std::size_t j = 0; j < dh; ++j)
        {
            const double exponent = -static_cast<double>(j - j % 2) / static_cast<double>(dh);
            const double angle = static_cast<double>(position_offset + t) * std::pow(base, exponent);
            cos_table(t, j) = static_cast<T>(std::cos(angle));
            sin_table(t, j) = static_cast<T>(std::sin(angle));
        }
    }
    array<T> pair_turn = xt::zeros<T>(shape_t{dh, dh});
    for (std::size_t i = 0; i < dh; i += 2)
    {
        pair_turn(i + 1, i) = T(-1);  // column 2i of x @ P is -x_2i+1
        pair_turn(i, i + 1) = T(1);   // column 2i+1 is x_2i
    }
    const var<T> turned = matmul(x, constant_like(x, std::move(pair_turn), "rope_pair_turn"));
    return add(mul(x, constant_like(x, std::move(cos_table), "rope_cos")),
               mul(turned, constant_like(x, std::move(sin_table), "rope_sin")));
}

// softmax(s x) among the kept entries. The shift c is the row's largest kept s x on kept entries and the
// entry's own s x on the others (so that no exponential overflows before the mask zeroes it); as a
// constant it changes no derivative of any order, because softmax does not depend on it.
template <class T>
var<T> masked_softmax(const var<T>& x, const mask_t* mask, T scale)
{
    const shape_t shape = x.shape();
    const std::size_t n = shape.at(last_axis("masked_softmax", shape)), rows = n ? x.value().size() / n : 0;
    const array<T> kept = mask ? array<T>(xt::cast<T>(xt::broadcast(*mask, shape))) : array<T>(xt::ones<T>(shape));
    array<T> shift = evaluate(scale * x.value());
    shape_t row_shape = shape;
    row_shape.back() = 1;
    array<T> empty_rows = xt::zeros<T>(row_shape);
    for (std::size_t r = 0; r < rows; ++r)
    {
        T top = -std::numeric_limits<T>::infinity();
        for (std::size_t j = 0; j < n; ++j)
        {
            top = kept.flat(r * n + j) != T(0) ? std::max(top, shift.flat(r * n + j)) : top;
        }
        empty_rows.flat(r) = top == -std::numeric_limits<T>::infinity() ? T(1) : T(0);
        for (std::size_t j = 0; j < n; ++j)
        {
            shift.flat(r * n + j) = kept.flat(r * n + j) != T(0) ? top : shift.flat(r * n + j);
        }
    }
    const var<T> e = mul(exp(sub(ops::scale(x, scale), constant_like(x, std::move(shift)))), constant_like(x, kept));
    return div(e, add(sum(e, {shape.size() - 1}, true), constant_like(x, std::move(empty_rows))));
}

template <class T>
var<T> attention(const var<T>& q, const var<T>& k, const var<T>& v, const mask_t* mask, bool causal,
                 std::size_t window)
{
    const shape_t qs = q.shape(), ks = k.shape();
    const std::size_t B = qs[0], H = qs[1], Tq = qs[2], dh = qs[3], G = ks[1], Tk = ks[2];
    auto to_long = [](std::initializer_list<std::size_t> s) { return std::vector<long>(s.begin(), s.end()); };
    auto repeat_heads = [&](const var<T>& kv) {  // (B, G, Tk, dh) -> (B, H, Tk, dh)
        if (G == H)
        {
            return kv;
        }
        const var<T> grouped = reshape(kv, to_long({B, G, 1, Tk, dh}));
        const var<T> repeated = add(grouped, constant_like(kv, array<T>(xt::zeros<T>(shape_t{B, G, H / G, Tk, dh}))));
        return reshape(repeated, to_long({B, H, Tk, dh}));
    };
    const var<T> scores = matmul(q, repeat_heads(k), false, true);
    const T s = T(1) / std::sqrt(static_cast<T>(dh));
    if (!mask && !causal)
    {
        return matmul(softmax(scores, s), repeat_heads(v));
    }
    mask_t visible = mask ? mask_t(xt::broadcast(*mask, shape_t{B, H, Tq, Tk})) : mask_t(xt::ones<bool>({B, H, Tq, Tk}));
    for (std::size_t i = 0; causal && i < visible.size(); ++i)
    {
        const std::size_t query = (i / Tk) % Tq, key = i % Tk;
        const kernels::key_range band = kernels::visible_keys(query, Tq, Tk, causal, window);
        visible.flat(i) = visible.flat(i) && band.contains(key);
    }
    return matmul(ops::masked_softmax(scores, visible, s), repeat_heads(v));
}

template <class T>
var<T> attention_token_major(const var<T>& q, const var<T>& k, const var<T>& v, std::size_t heads,
                             std::size_t kv_heads, const mask_t* mask, bool causal, std::size_t window)
{
    const std::size_t dh = q.shape()[2] / heads;
    auto split = [dh](const var<T>& x, std::size_t n) {  // (B, T, n dh) -> (B, n, T, dh)
        const shape_t s = x.shape();
        return permute(reshape(x, {static_cast<long>(s[0]), static_cast<long>(s[1]), static_cast<long>(n),
                                   static_cast<long>(dh)}), {0, 2, 1, 3});
    };
    const var<T> o = attention(split(q, heads), split(k, kv_heads), split(v, kv_heads), mask, causal, window);
    const shape_t qs = q.shape();
    return reshape(permute(o, {0, 2, 1, 3}), {static_cast<long>(qs[0]), static_cast<long>(qs[1]), static_cast<long>(qs[2])});
}

#define XGRAD_COMPOSED(T)                                                                                    \
    template var<T> masked_softmax(const var<T>&, const mask_t*, T);                                         \
    template var<T> attention(const var<T>&, const var<T>&, const var<T>&, const mask_t*, bool,              \
                              std::size_t);                                                                  \
    template var<T> attention_token_major(const var<T>&, const var<T>&, const var<T>&, std::size_t,          \
                                          std::size_t, const mask_t*, bool, std::size_t);                    \
    template var<T> gelu(const var<T>&);                                                                     \
    template var<T> linear(const var<T>&, const var<T>&, const var<T>&);                                     \
    template var<T> layer_norm(const var<T>&, const var<T>&, const var<T>&, T);                              \
    template var<T> log_softmax(const var<T>&);                                                              \
    template var<T> cross_entropy(const var<T>&, const ids_t&);                                              \
    template var<T> silu(const var<T>&);                                                                     \
    template var<T> gelu_exact(const var<T>&);                                                               \
    template var<T> swiglu(const var<T>&, const var<T>&);                                                    \
    template var<T> rms_norm(const var<T>&, const var<T>&, double);                                          \
    template var<T> rope(const var<T>&, double, std::size_t);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_COMPOSED)
}  // namespace xgrad::ops::composed
