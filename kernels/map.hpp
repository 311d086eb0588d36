// Elementwise maps on contiguous arrays: out[i] = f(x[i], other[i]), with `other` a second operand (the
// incoming gradient in a backward rule, say) or 0 when absent. `f` maps xsimd batches (lanes::simd) or
// single values (lanes::scalar). Internal to ops/*.cpp: every elementwise op's kernel goes through here.
#pragma once

#include <algorithm>
#include <cstddef>

#include "autodiff/xtensor.hpp"
#include "kernels/simd.hpp"

namespace xgrad::kernels
{
// The scalar type of an xsimd batch type, for functors written once for both.
template <class V>
struct scalar_of;
template <class T, class A>
struct scalar_of<xsimd::batch<T, A>>
{
    using type = T;
};

// On xsimd batches. The tail goes through the same batch code in a zero-padded buffer, so every element
// sees the same arithmetic whatever its position.
template <class T, class F>
void map_into(T* out, const T* x, const T* other, std::size_t n, F f)
{
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w)
    {
        const batch second = other ? batch::load_unaligned(other + i) : batch(T(0));
        f(batch::load_unaligned(x + i), second).store_unaligned(out + i);
    }
    if (i < n)
    {
        alignas(64) T a[w] = {}, b[w] = {}, r[w];
        std::copy(x + i, x + n, a);
        if (other)
        {
            std::copy(other + i, other + n, b);
        }
        f(batch::load_aligned(a), batch::load_aligned(b)).store_aligned(r);
        std::copy(r, r + (n - i), out + i);
    }
}

// One value at a time (for functions xsimd lacks or computes less accurately than libm).
template <class T, class F>
void map_scalars_into(T* out, const T* x, const T* other, std::size_t n, F f)
{
    for (std::size_t i = 0; i < n; ++i)
    {
        out[i] = f(x[i], other ? other[i] : T(0));
    }
}

enum class lanes
{
    simd,
    scalar
};

// A new array of x's shape holding f(x, other).
template <lanes kind = lanes::simd, class T, class F>
array<T> map_values(const array<T>& x, const array<T>* other, F f)
{
    array<T> y = array<T>::from_shape(x.shape());
    const T* second = other ? other->data() : nullptr;
    if constexpr (kind == lanes::simd)
    {
        map_into(y.data(), x.data(), second, x.size(), f);
    }
    else
    {
        map_scalars_into(y.data(), x.data(), second, x.size(), f);
    }
    return y;
}
}  // namespace xgrad::kernels
