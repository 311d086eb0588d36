// Stochastic gradient descent with momentum, as torch.optim.SGD with dampening 0 (formulas in optim.hpp).
#include "autodiff/instantiate.hpp"
#include "optim/optim.hpp"

namespace xgrad::optim
{
namespace
{
// p = p - lr (g + decay p): no momentum.
template <class T>
void plain_step(T* p, const T* g, std::size_t n, T lr, T decay)
{
    for (std::size_t k = 0; k < n; ++k)
    {
        p[k] -= lr * (g[k] + decay * p[k]);
    }
}

// d = g + decay p;  buf = momentum buf + d;  p = p - lr buf.
template <class T>
void momentum_step(T* p, const T* g, T* buf, std::size_t n, T lr, T decay, T momentum)
{
    for (std::size_t k = 0; k < n; ++k)
    {
        const T d = g[k] + decay * p[k];
        buf[k] = momentum * buf[k] + d;
        p[k] -= lr * buf[k];
    }
}

// d = g + decay p;  buf = momentum buf + d;  p = p - lr (d + momentum buf).
template <class T>
void nesterov_step(T* p, const T* g, T* buf, std::size_t n, T lr, T decay, T momentum)
{
    for (std::size_t k = 0; k < n; ++k)
    {
        const T d = g[k] + decay * p[k];
        buf[k] = momentum * buf[k] + d;
        p[k] -= lr * (d + momentum * buf[k]);
    }
}
}  // namespace

template <class T>
sgd<T>::sgd(std::vector<parameter<T>> params, const sgd_options& options)
    : optimiser<T>("sgd", std::move(params), options.lr), options_(options)
{
    check_finite_not_negative("sgd", "momentum", options.momentum);
    check_finite_not_negative("sgd", "weight_decay", options.weight_decay);
    if (options.nesterov && options.momentum == 0)
    {
        fail("sgd", "nesterov needs momentum > 0");
    }
    if (options.momentum != 0)
    {
        this->add_state("momentum");
    }
}

template <class T>
void sgd<T>::update(std::int64_t)
{
    const T lr = static_cast<T>(this->lr());
    const T momentum = static_cast<T>(options_.momentum);
    for (std::size_t i = 0; i < this->params_.size(); ++i)
    {
        parameter<T>& param = this->params_[i];
        T* p = param.value().data();
        const T* g = param.grad().data();
        const std::size_t n = param.value().size();
        const T decay = decays(options_, param) ? static_cast<T>(options_.weight_decay) : T(0);
        if (options_.momentum == 0)
        {
            plain_step(p, g, n, lr, decay);
            continue;
        }
        T* buf = this->state("momentum")[i].data();
        if (options_.nesterov)
        {
            nesterov_step(p, g, buf, n, lr, decay, momentum);
        }
        else
        {
            momentum_step(p, g, buf, n, lr, decay, momentum);
        }
    }
}

#define XGRAD_INSTANTIATE(T) template class sgd<T>;
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_INSTANTIATE)
#undef XGRAD_INSTANTIATE
}  // namespace xgrad::optim
