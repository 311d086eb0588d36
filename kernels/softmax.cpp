// Masked softmax on plain arrays: the forward pass and its backward, vectorised, split across threads.
// No tape here; ops/softmax.cpp wraps these in the differentiable op.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <limits>
#include <numeric>

#include "autodiff/instantiate.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"
#include "kernels/simd.hpp"

namespace xgrad
{
namespace kernels
{
namespace
{
// Where row r of x (shape `shape`, last axis excluded) starts inside a mask broadcast to that shape.
struct mask_rows
{
    const bool* data = nullptr;
    shape_t outer;                      // x's shape without its last axis
    std::vector<std::size_t> strides;  // the mask's strides over `outer`, 0 where it broadcasts
    std::size_t column_stride = 0;      // 0 when the mask has size 1 along the last axis

    mask_rows(const mask_t* mask, const shape_t& shape)
    {
        if (!mask)
        {
            return;
        }
        data = mask->data();
        const auto all = broadcast_strides(to_shape(mask->shape()), shape.size());
        outer.assign(shape.begin(), shape.end() - 1);
        strides.assign(all.begin(), all.end() - 1);
        column_stride = all.back();
    }

    const bool* row(std::size_t r) const
    {
        std::size_t offset = 0;
        for (std::size_t ax = outer.size(); ax-- > 0;)
        {
            offset += (r % outer[ax]) * strides[ax];
            r /= outer[ax];
        }
        return data + offset;
    }
};

// out[j] = keep[j] ? sign * in[j] : -inf, as a bit blend the compiler vectorises (a `?:` on bool stays
// scalar here and was half the forward's instructions).
template <class T>
void select_kept(T* out, const T* in, const bool* keep, std::size_t n, T sign)
{
    using bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    const auto* kept = reinterpret_cast<const unsigned char*>(keep);
    const T minus_inf = -std::numeric_limits<T>::infinity();
    bits masked_bits;
    std::memcpy(&masked_bits, &minus_inf, sizeof(T));
    for (std::size_t j = 0; j < n; ++j)
    {
        const T value = sign * in[j];
        bits value_bits;
        std::memcpy(&value_bits, &value, sizeof(T));
        const bits all_ones_if_kept = bits(0) - bits(kept[j] != 0);
        const bits blended = (value_bits & all_ones_if_kept) | (masked_bits & ~all_ones_if_kept);
        std::memcpy(out + j, &blended, sizeof(T));
    }
}

bool any_kept(const mask_rows& masks, std::size_t r, std::size_t n)
{
    const bool* keep = masks.row(r);
    const std::size_t stride = masks.column_stride;
    for (std::size_t j = 0; j < n; ++j)
    {
        if (keep[j * stride])
        {
            return true;
        }
    }
    return false;
}
}  // namespace

template <class T>
array<T> masked_softmax_forward(const array<T>& x, const mask_t* mask, T scale)
{
    const shape_t shape = to_shape(x.shape());
    array<T> y = array<T>::from_shape(shape);
    const std::size_t n = shape.empty() ? 1 : shape.back();
    if (y.size() == 0)
    {
        return y;
    }
    const std::size_t rows = y.size() / n;
    const mask_rows masks(mask, shape);
    constexpr T minus_inf = -std::numeric_limits<T>::infinity();
    // scale x = |scale| (sign x): rows hold sign * x, so that the row max gives the max of scale x.
    const T sign = scale < 0 ? T(-1) : T(1);
    const T magnitude = scale < 0 ? -scale : scale;
    for_rows(rows, n, [&](std::size_t r) {
        const T* in = x.data() + r * n;
        T* out = y.data() + r * n;
        // out = sign * x where kept, -inf where masked (exp turns those into exact zeros)
        const bool* keep = masks.data ? masks.row(r) : nullptr;
        const std::size_t stride = masks.column_stride;
        if (!keep || (stride == 0 && *keep))
        {
            for (std::size_t j = 0; j < n; ++j)
            {
                out[j] = sign * in[j];
            }
        }
        else if (stride == 1)
        {
            select_kept(out, in, keep, n, sign);
        }
        else
        {
            for (std::size_t j = 0; j < n; ++j)
            {
                out[j] = keep[j * stride] ? sign * in[j] : minus_inf;
            }
        }
        const T top = simd::max_of(out, n);  // subtracting the row max keeps logits of 1e3 finite
        if (top == minus_inf && keep && !any_kept(masks, r, n))
        {
            std::fill(out, out + n, T(0));  // fully masked row: weights 0, not NaN
            return;
        }
        if (magnitude == T(0))  // every kept logit counts equally; 0 * (-inf) must not make a NaN
        {
            for (std::size_t j = 0; j < n; ++j)
            {
                out[j] = (!keep || keep[j * stride]) ? std::exp(T(0) * in[j]) : T(0);
            }
            simd::scale_in_place(out, n, T(1) / std::accumulate(out, out + n, T(0)));
            return;
        }
        const T total = simd::exp_sum(out, n, magnitude, magnitude * top);
        simd::scale_in_place(out, n, T(1) / total);
    });
    return y;
}

template <class T>
array<T> masked_softmax_backward(const array<T>& y, const array<T>& g, T scale)
{
    array<T> dx = array<T>::from_shape(y.shape());
    const std::size_t n = y.dimension() == 0 ? 1 : y.shape().back();
    if (dx.size() == 0)
    {
        return dx;
    }
    for_rows(dx.size() / n, n, [&](std::size_t r) {
        const T* yr = y.data() + r * n;
        const T* gr = g.data() + r * n;
        simd::softmax_row_backward(dx.data() + r * n, yr, gr, n, scale, simd::dot(gr, yr, n));
    });
    return dx;
}

#define XGRAD_SOFTMAX_KERNELS(T)                                                      \
    template array<T> masked_softmax_forward(const array<T>&, const mask_t*, T);      \
    template array<T> masked_softmax_backward(const array<T>&, const array<T>&, T);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_SOFTMAX_KERNELS)
}  // namespace kernels
}  // namespace xgrad
