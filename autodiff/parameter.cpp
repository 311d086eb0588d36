// parameter<T>: a value and a gradient shared by every copy.
#include "autodiff/parameter.hpp"

namespace xgrad
{
template <class T>
parameter<T>::parameter() : s_(std::make_shared<state>())
{
}

template <class T>
parameter<T>::parameter(array<T> value, std::string name) : s_(std::make_shared<state>())
{
    s_->value = std::move(value);
    s_->name = std::move(name);
}

template <class T>
void parameter<T>::zero_grad()
{
    s_->grad = array<T>();
    s_->grad_allocated = false;
    s_->grad_is_zero = true;
}

template <class T>
array<T>& parameter<T>::allocated_grad() const
{
    if (!s_->grad_allocated)
    {
        s_->grad = xt::zeros<T>(s_->value.shape());
        s_->grad_allocated = true;
    }
    return s_->grad;
}

template class parameter<float>;
template class parameter<double>;
}  // namespace xgrad
