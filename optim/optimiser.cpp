// What every optimiser shares: checked parameters, the learning rate, the step count, and the state
// buffers exported and imported under "optim.<kind>.<parameter name>" (names listed in optim/optim.hpp).
#include <cmath>
#include <set>

#include "autodiff/instantiate.hpp"
#include "optim/optim.hpp"

namespace xgrad::optim
{
namespace
{
const std::string step_name = state_prefix + "step";

std::string quoted(const std::string& name)
{
    return "'" + name + "'";
}

template <class A>
std::string shape_of(const A& a)
{
    return shape_str(to_shape(a.shape()));
}
}  // namespace

bool takes_weight_decay(const shape_t& shape)
{
    return shape.size() >= 2;
}

template <class T>
optimiser<T>::optimiser(const char* op, std::vector<parameter<T>> params, double lr)
    : op_(op), params_(std::move(params)), lr_(0)
{
    if (params_.empty())
    {
        fail(op_, "no parameters to optimise");
    }
    std::set<std::string> names;
    for (const parameter<T>& p : params_)
    {
        if (p.name().empty())
        {
            fail(op_, "a parameter of shape " + shape_of(p.value()) +
                          " has no name (state tensors are saved under the parameter's name)");
        }
        if (!names.insert(p.name()).second)
        {
            fail(op_, "parameter name " + quoted(p.name()) + " appears twice");
        }
    }
    set_lr(lr);
}

void check_finite_not_negative(const char* op, const char* what, double value)
{
    if (!(value >= 0) || !std::isfinite(value))
    {
        fail(op, std::string(what) + " must be a finite number >= 0, got " + std::to_string(value));
    }
}

template <class T>
void optimiser<T>::set_lr(double lr)
{
    check_finite_not_negative(op_, "learning rate", lr);
    lr_ = lr;
}

template <class T>
void optimiser<T>::add_state(const std::string& kind)
{
    std::vector<array<T>>& buffers = state_[kind];
    buffers.clear();
    for (const parameter<T>& p : params_)
    {
        buffers.push_back(xt::zeros<T>(p.value().shape()));
    }
}

template <class T>
void optimiser<T>::step()
{
    scaled_step(1.0);
}

template <class T>
void optimiser<T>::scaled_step(double grad_scale)
{
    for (std::size_t i = 0; i < params_.size(); ++i)
    {
        const parameter<T>& p = params_[i];
        if (p.grad().shape() != p.value().shape())
        {
            fail(op_, "the gradient of " + quoted(p.name()) + " has shape " + shape_of(p.grad()) +
                          ", the parameter " + shape_of(p.value()));
        }
        for (const auto& [kind, buffers] : state_)
        {
            if (buffers[i].shape() != p.value().shape())
            {
                fail(op_, "the " + kind + " state of " + quoted(p.name()) + " has shape " +
                              shape_of(buffers[i]) + ", the parameter now " + shape_of(p.value()));
            }
        }
    }
    const T scale = static_cast<T>(grad_scale);
    if (scale != T(1) && !scales_in_update())
    {
        for (parameter<T>& p : params_)
        {
            for (T& g : p.grad())
            {
                g *= scale;
            }
        }
    }
    grad_scale_ = scales_in_update() ? scale : T(1);
    ++step_count_;
    update(step_count_);
    grad_scale_ = T(1);
}

template <class T>
void optimiser<T>::zero_grad()
{
    for (parameter<T>& p : params_)
    {
        p.zero_grad();
    }
}

template <class T>
named_tensors<T> optimiser<T>::export_state() const
{
    named_tensors<T> out;
    array<T> step = array<T>::from_shape(shape_t{});
    step() = static_cast<T>(step_count_);
    out.emplace(step_name, std::move(step));
    for (const auto& [kind, buffers] : state_)
    {
        for (std::size_t i = 0; i < params_.size(); ++i)
        {
            out.emplace(state_prefix + kind + "." + params_[i].name(), buffers[i]);
        }
    }
    return out;
}

template <class T>
void optimiser<T>::import_state(const named_tensors<T>& tensors)
{
    // Every name this optimiser expects, with the shape it must have; then nothing else under "optim.".
    std::map<std::string, shape_t> expected{{step_name, shape_t{}}};
    for (const auto& [kind, buffers] : state_)
    {
        for (const parameter<T>& p : params_)
        {
            expected.emplace(state_prefix + kind + "." + p.name(), to_shape(p.value().shape()));
        }
    }
    for (const auto& [name, shape] : expected)
    {
        const auto found = tensors.find(name);
        if (found == tensors.end())
        {
            fail(op_, "import_state: no tensor " + quoted(name));
        }
        if (to_shape(found->second.shape()) != shape)
        {
            fail(op_, "import_state: tensor " + quoted(name) + " has shape " + shape_of(found->second) +
                          ", expected " + shape_str(shape));
        }
    }
    for (const auto& [name, tensor] : tensors)
    {
        if (name.compare(0, state_prefix.size(), state_prefix) == 0 && expected.count(name) == 0)
        {
            fail(op_, "import_state: unknown state tensor " + quoted(name) + " of shape " + shape_of(tensor));
        }
    }
    const T step = tensors.at(step_name)();
    constexpr double steps_limit = 9223372036854775808.0;  // 2^63: the first whole number past int64's range
    if (!(std::isfinite(step) && step >= 0 && std::floor(step) == step && static_cast<double>(step) < steps_limit))
    {
        fail(op_, "import_state: " + step_name + " must be a whole number from 0 to 2^63 - 1, got " +
                      std::to_string(step));
    }

    step_count_ = static_cast<std::int64_t>(step);
    for (auto& [kind, buffers] : state_)
    {
        for (std::size_t i = 0; i < params_.size(); ++i)
        {
            buffers[i] = tensors.at(state_prefix + kind + "." + params_[i].name());
        }
    }
}

#define XGRAD_INSTANTIATE(T) template class optimiser<T>;
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_INSTANTIATE)
#undef XGRAD_INSTANTIATE
}  // namespace xgrad::optim
