// The deliberate mistakes of models/manual_faults.hpp. Each is the correct rule of
// models/manual_layers.cpp with one line changed; the line is marked "mistake:".
#include "models/manual_faults.hpp"

#include <cmath>

#include "autodiff/instantiate.hpp"

namespace xgrad::models::manual::faults
{
template <class T>
rmsnorm_gradients<T> rmsnorm_constant_scale(const array<T>& d_y, const rmsnorm_cache<T>& cache,
                                            const array<T>& weight)
{
    rmsnorm_gradients<T> g = rmsnorm_backward(d_y, cache, weight);  // d weight is right
    const std::size_t c = weight.size();
    for (std::size_t r = 0; r < g.x.size() / c; ++r)
    {
        for (std::size_t i = 0; i < c; ++i)
        {
            // mistake: d x = rrms d x_hat, as if rrms did not depend on x
            g.x.data()[r * c + i] = cache.rrms.data()[r] * d_y.data()[r * c + i] * weight(i);
        }
    }
    return g;
}

template <class T>
array<T> rope_same_angle(const array<T>& d_y, double base, std::size_t offset)
{
    return rope_forward(d_y, base, offset);  // mistake: R(a) d y where R(a)^T d y = R(-a) d y belongs
}

template <class T>
array<T> gelu_exact_cdf_only(const array<T>& d_y, const array<T>& x)
{
    array<T> dx = array<T>::from_shape(x.shape());
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        const T cdf = T(0.5) * std::erfc(-x.data()[i] / std::sqrt(T(2)));
        dx.data()[i] = d_y.data()[i] * cdf;  // mistake: y = x Phi(x) differentiated as Phi(x), x phi(x) lost
    }
    return dx;
}

template <class T>
swiglu_gradients<T> swiglu_sigmoid_slope(const array<T>& d_y, const array<T>& gate, const array<T>& up)
{
    swiglu_gradients<T> g = swiglu_backward(d_y, gate, up);  // d up is right
    for (std::size_t i = 0; i < gate.size(); ++i)
    {
        const T s = T(1) / (T(1) + std::exp(-gate.data()[i]));
        g.gate.data()[i] = d_y.data()[i] * up.data()[i] * s;  // mistake: silu'(a) taken as sigmoid(a)
    }
    return g;
}

template <class T>
array<T> bias_first_sequence(const array<T>& d_out)
{
    const std::size_t c = d_out.shape().back(), length = d_out.dimension() == 3 ? d_out.shape()[1] : 1;
    array<T> d_b = xt::zeros<T>({c});
    for (std::size_t r = 0; r < length; ++r)  // mistake: T rows, where all B T rows belong
    {
        for (std::size_t j = 0; j < c; ++j)
        {
            d_b.data()[j] += d_out.data()[r * c + j];
        }
    }
    return d_b;
}

#define XGRAD_MANUAL_FAULTS(T)                                                                                   \
    template rmsnorm_gradients<T> rmsnorm_constant_scale(const array<T>&, const rmsnorm_cache<T>&,              \
                                                         const array<T>&);                                      \
    template array<T> rope_same_angle(const array<T>&, double, std::size_t);                                     \
    template array<T> gelu_exact_cdf_only(const array<T>&, const array<T>&);                                     \
    template swiglu_gradients<T> swiglu_sigmoid_slope(const array<T>&, const array<T>&, const array<T>&);        \
    template array<T> bias_first_sequence(const array<T>&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_MANUAL_FAULTS)
}  // namespace xgrad::models::manual::faults
