// Adam and AdamW, as torch.optim.Adam and torch.optim.AdamW (formulas in optim.hpp).
#include <cmath>

#include "autodiff/instantiate.hpp"
#include "optim/optim.hpp"

namespace xgrad::optim
{
namespace
{
void check_beta(const char* op, const char* what, double value)
{
    if (!(value >= 0 && value < 1))
    {
        fail(op, std::string(what) + " must be in [0, 1), got " + std::to_string(value));
    }
}

// The scalars of step t, computed once in double (as torch does in Python) and rounded to T.
template <class T>
struct adam_scalars
{
    T beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
    T step_size;        // lr / (1 - beta1^t)
    T bias2_sqrt;       // sqrt(1 - beta2^t)
    T l2_decay;         // Adam: g + l2_decay p
    T decoupled_scale;  // AdamW: p (1 - lr weight_decay)
};

// With Scaled, each gradient is first multiplied by grad_scale in place: g = grad_scale g, as clipping
// leaves it (optimiser::scaled_step(grad_scale)); the update then reads that g.
template <bool Scaled, class T>
T scaled_gradient(T* g, std::size_t k, T grad_scale)
{
    if (Scaled)
    {
        g[k] *= grad_scale;
    }
    return g[k];
}

// g' = g + l2_decay p;  m = beta1 m + (1 - beta1) g';  v = beta2 v + (1 - beta2) g'^2;
// p = p - step_size m / (sqrt(v) / bias2_sqrt + eps). One pass over contiguous memory.
template <bool Scaled, class T>
void adam_step(T* p, T* g, T* m, T* v, std::size_t n, const adam_scalars<T>& s, T grad_scale)
{
    for (std::size_t k = 0; k < n; ++k)
    {
        const T grad = scaled_gradient<Scaled>(g, k, grad_scale) + s.l2_decay * p[k];
        m[k] = s.beta1 * m[k] + s.one_minus_beta1 * grad;
        v[k] = s.beta2 * v[k] + s.one_minus_beta2 * grad * grad;
        const T denominator = std::sqrt(v[k]) / s.bias2_sqrt + s.eps;
        p[k] -= s.step_size * (m[k] / denominator);
    }
}

// p = p (1 - lr weight_decay), then the Adam step without L2 decay.
template <bool Scaled, class T>
void adamw_step(T* p, T* g, T* m, T* v, std::size_t n, const adam_scalars<T>& s, T grad_scale)
{
    for (std::size_t k = 0; k < n; ++k)
    {
        const T grad = scaled_gradient<Scaled>(g, k, grad_scale);
        p[k] *= s.decoupled_scale;
        m[k] = s.beta1 * m[k] + s.one_minus_beta1 * grad;
        v[k] = s.beta2 * v[k] + s.one_minus_beta2 * grad * grad;
        const T denominator = std::sqrt(v[k]) / s.bias2_sqrt + s.eps;
        p[k] -= s.step_size * (m[k] / denominator);
    }
}
}  // namespace

adam_options adamw_options(double lr, double weight_decay, double beta1, double beta2, double eps)
{
    return {lr, beta1, beta2, eps, weight_decay, /*decoupled_weight_decay=*/true};
}

namespace
{
const char* op_name(const adam_options& options)
{
    return options.decoupled_weight_decay ? "adamw" : "adam";
}
}  // namespace

template <class T>
adam<T>::adam(std::vector<parameter<T>> params, const adam_options& options)
    : optimiser<T>(op_name(options), std::move(params), options.lr), options_(options)
{
    check_beta(this->op_, "beta1", options.beta1);
    check_beta(this->op_, "beta2", options.beta2);
    check_finite_not_negative(this->op_, "eps", options.eps);
    check_finite_not_negative(this->op_, "weight_decay", options.weight_decay);
    this->add_state("exp_avg");
    this->add_state("exp_avg_sq");
}

template <class T>
void adam<T>::update(std::int64_t step)
{
    const double lr = this->lr();
    const double t = static_cast<double>(step);
    adam_scalars<T> s{};
    s.beta1 = static_cast<T>(options_.beta1);
    s.one_minus_beta1 = static_cast<T>(1 - options_.beta1);
    s.beta2 = static_cast<T>(options_.beta2);
    s.one_minus_beta2 = static_cast<T>(1 - options_.beta2);
    s.eps = static_cast<T>(options_.eps);
    s.step_size = static_cast<T>(lr / (1 - std::pow(options_.beta1, t)));
    s.bias2_sqrt = static_cast<T>(std::sqrt(1 - std::pow(options_.beta2, t)));

    const bool scaled = this->grad_scale_ != T(1);
    std::vector<array<T>>& exp_avg = this->state("exp_avg");
    std::vector<array<T>>& exp_avg_sq = this->state("exp_avg_sq");
    for (std::size_t i = 0; i < this->params_.size(); ++i)
    {
        parameter<T>& param = this->params_[i];
        const double decay = decays(options_, param) ? options_.weight_decay : 0.0;
        T* p = param.value().data();
        T* g = param.grad().data();
        T* m = exp_avg[i].data();
        T* v = exp_avg_sq[i].data();
        const std::size_t n = param.value().size();
        if (options_.decoupled_weight_decay)
        {
            s.decoupled_scale = static_cast<T>(1 - lr * decay);
            scaled ? adamw_step<true>(p, g, m, v, n, s, this->grad_scale_) : adamw_step<false>(p, g, m, v, n, s, T(1));
        }
        else
        {
            s.l2_decay = static_cast<T>(decay);
            scaled ? adam_step<true>(p, g, m, v, n, s, this->grad_scale_) : adam_step<false>(p, g, m, v, n, s, T(1));
        }
    }
}

#define XGRAD_INSTANTIATE(T) template class adam<T>;
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_INSTANTIATE)
#undef XGRAD_INSTANTIATE
}  // namespace xgrad::optim
