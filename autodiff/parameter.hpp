// A learnable tensor that outlives tapes: what tape::param binds, what optimisers update and what
// checkpoints save.
#pragma once

#include <memory>
#include <string>

#include "autodiff/xtensor.hpp"

namespace xgrad
{
template <class T>
class tape;

// A learnable tensor that outlives tapes (a training loop records a fresh tape each step).
// Copies share one value and one gradient. The gradient accumulates over backward calls until zero_grad.
// A tape reads the value in place (no copy per step): update it only after that tape's backward.
template <class T>
class parameter
{
public:
    parameter();
    explicit parameter(array<T> value, std::string name = "");

    const array<T>& value() const { return s_->value; }
    array<T>& value() { return s_->value; }  // for optimiser updates
    // The gradient, zeros of the value's shape until a backward adds to it. Its memory is taken on
    // first use, so that a model loaded only to be run holds its values alone.
    const array<T>& grad() const { return allocated_grad(); }
    array<T>& grad()  // for gradient clipping; the gradient may then hold anything
    {
        array<T>& g = allocated_grad();
        s_->grad_is_zero = false;
        return g;
    }
    const std::string& name() const { return s_->name; }
    void zero_grad();

    struct state
    {
        array<T> value;
        array<T> grad;
        std::string name;
        // True from zero_grad (or the constructor) until a backward or a caller's write access: a tape's
        // backward then takes its gradient array as the parameter's instead of adding it to zeros.
        bool grad_is_zero = true;
        bool grad_allocated = false;  // false: `grad` is not yet an array of the value's shape
    };

private:
    array<T>& allocated_grad() const;

    std::shared_ptr<state> s_;
    friend class tape<T>;
};

extern template class parameter<float>;
extern template class parameter<double>;
}  // namespace xgrad
