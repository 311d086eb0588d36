// Gradient clipping by the global 2-norm, as torch.nn.utils.clip_grad_norm_.
#include <cmath>

#include "autodiff/instantiate.hpp"
#include "optim/optim.hpp"

namespace xgrad::optim
{
namespace
{
// sum_k g_k^2, accumulated in double for float gradients too.
template <class T>
double sum_of_squares(const T* g, std::size_t n)
{
    double sum = 0;
    for (std::size_t k = 0; k < n; ++k)
    {
        sum += static_cast<double>(g[k]) * static_cast<double>(g[k]);
    }
    return sum;
}

template <class T>
void scale_in_place(T* g, std::size_t n, T factor)
{
    for (std::size_t k = 0; k < n; ++k)
    {
        g[k] *= factor;
    }
}
}  // namespace

template <class T>
double grad_norm(const std::vector<parameter<T>>& params)
{
    double sum = 0;
    for (const parameter<T>& p : params)
    {
        sum += sum_of_squares(p.grad().data(), p.grad().size());
    }
    return std::sqrt(sum);
}

double clip_factor(double norm, double max_norm)
{
    if (!(max_norm > 0))
    {
        fail("clip_grad_norm", "max_norm must be > 0, got " + std::to_string(max_norm));
    }
    // norm = 0 gives max_norm / 1e-6 >= 1 (nothing to do); NaN compares false (gradients left as they are).
    const double scale = max_norm / (norm + 1e-6);
    return scale < 1 ? scale : 1.0;
}

template <class T>
double clip_grad_norm(std::vector<parameter<T>> params, double max_norm)
{
    if (!(max_norm > 0))
    {
        fail("clip_grad_norm", "max_norm must be > 0, got " + std::to_string(max_norm));
    }
    const double norm = grad_norm(params);
    const double scale = clip_factor(norm, max_norm);
    if (scale != 1.0)
    {
        for (parameter<T>& p : params)
        {
            scale_in_place(p.grad().data(), p.grad().size(), static_cast<T>(scale));
        }
    }
    return norm;
}

#define XGRAD_INSTANTIATE(T)                                                      \
    template double clip_grad_norm<T>(std::vector<parameter<T>>, double); \
    template double grad_norm<T>(const std::vector<parameter<T>>&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_INSTANTIATE)
#undef XGRAD_INSTANTIATE
}  // namespace xgrad::optim
