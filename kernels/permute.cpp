// Axis permutation on plain arrays (a contiguous copy); ops/shape.cpp wraps it in the permute op.
#include <cstring>
#include <numeric>

#include "kernels/kernels.hpp"

namespace xgrad
{
namespace kernels
{
// Walks the output in row-major order; the innermost output axis reads the input with a fixed stride,
// so the common attention case (last axis kept last) is a run of memcpy's.
template <class T>
array<T> permute(const array<T>& x, const std::vector<std::size_t>& axes)
{
    const std::size_t rank = axes.size();
    shape_t out_shape(rank);
    std::vector<std::size_t> in_stride(rank);
    std::vector<std::size_t> x_strides(rank);
    for (std::size_t i = rank, s = 1; i-- > 0;)
    {
        x_strides[i] = s;
        s *= x.shape()[i];
    }
    for (std::size_t i = 0; i < rank; ++i)
    {
        out_shape[i] = x.shape()[axes[i]];
        in_stride[i] = x_strides[axes[i]];
    }
    array<T> out = array<T>::from_shape(out_shape);
    if (out.size() == 0)
    {
        return out;
    }
    if (rank == 0)
    {
        out(0) = x(0);
        return out;
    }
    const std::size_t inner = out_shape[rank - 1];
    const std::size_t inner_stride = in_stride[rank - 1];
    const std::size_t outer = out.size() / inner;
    std::vector<std::size_t> index(rank, 0);
    const T* src = x.data();
    T* dst = out.data();
    std::size_t offset = 0;
    for (std::size_t o = 0; o < outer; ++o)
    {
        if (inner_stride == 1)
        {
            std::memcpy(dst, src + offset, inner * sizeof(T));
        }
        else
        {
            for (std::size_t j = 0; j < inner; ++j)
            {
                dst[j] = src[offset + j * inner_stride];
            }
        }
        dst += inner;
        // Odometer over the outer output axes, keeping the input offset in step.
        for (std::size_t ax = rank - 1; ax-- > 0;)
        {
            offset += in_stride[ax];
            if (++index[ax] < out_shape[ax])
            {
                break;
            }
            offset -= in_stride[ax] * out_shape[ax];
            index[ax] = 0;
        }
    }
    return out;
}
template array<float> permute(const array<float>&, const std::vector<std::size_t>&);
template array<double> permute(const array<double>&, const std::vector<std::size_t>&);
}  // namespace kernels
}  // namespace xgrad
