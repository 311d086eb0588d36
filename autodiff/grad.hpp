// Gradients as vars: xgrad::grad, and through it gradients of gradients (PyTorch's autograd.grad).
//
//   tape<double> t;
//   auto x = t.input(X);
//   auto y = ops::sum(ops::tanh(x) * x);
//   auto gx = grad(y, {x}, create_graph)[0];          // dy/dx, a var on t recorded from x
//   auto v = t.constant(V);
//   auto hv = grad(ops::sum(gx * v), {x})[0];         // the Hessian-vector product H v
//
// Without create_graph the backward runs the ordinary rules on arrays (as tape::backward does) and the
// gradients come back as constant leaves. With it, every rule runs on vars (graph_context in
// autodiff/record.hpp): what it computes is recorded on the same tape, so the gradient can be
// differentiated again. Leaves' and parameters' grad() are never touched by grad().
#pragma once

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "autodiff/tape.hpp"

namespace xgrad
{
// grad_options().create_graph() records the backward; retain_graph defaults to create_graph (without it,
// the rules used are freed and a second backward through them throws, as after tape::backward).
class grad_options
{
public:
    constexpr grad_options() = default;
    constexpr grad_options& create_graph(bool on = true)
    {
        create_graph_ = on;
        return *this;
    }
    constexpr grad_options& retain_graph(bool on = true)
    {
        retain_graph_ = on;
        return *this;
    }
    constexpr bool creates_graph() const { return create_graph_; }
    constexpr bool retains_graph() const { return retain_graph_.value_or(create_graph_); }

private:
    bool create_graph_ = false;
    std::optional<bool> retain_graph_;
};

// The common request, spelled as an argument: grad(y, {x}, create_graph).
inline constexpr grad_options create_graph = grad_options().create_graph();

// d root / d input for each input, as vars on root's tape (zeros for an input that root does not depend
// on). root must hold one element, or a seed of root's shape gives the vector-Jacobian product
// seed^T J. A seed given as a var is part of the recorded graph (a gradient can be differentiated with
// respect to it). std::invalid_argument for an input or seed on another tape, a seed of the wrong
// shape, or a root of more than one element without a seed; std::logic_error naming the op when the
// backward reaches an op whose rule was freed or cannot record itself.
template <class T>
std::vector<var<T>> grad(const var<T>& root, const std::vector<var<T>>& inputs, const grad_options& options = {});
template <class T>
std::vector<var<T>> grad(const var<T>& root, const std::vector<var<T>>& inputs, const var<T>& seed,
                         const grad_options& options = {});
template <class T>
std::vector<var<T>> grad(const var<T>& root, const std::vector<var<T>>& inputs, const array<T>& seed,
                         const grad_options& options = {});

// The leaves of `on_tape`'s tape bound to parameters (tape::param), with the parameters' names, in
// recording order: what to differentiate a model's loss with respect to (a parameter bound twice has
// two leaves; its gradient is their sum).
template <class T>
std::vector<std::pair<std::string, var<T>>> parameter_leaves(const var<T>& on_tape);

// Sharpness: the Hessian's eigenvalue of largest magnitude (with its sign), by power iteration on
// Hessian-vector products. `loss` is a scalar on a tape that retains its graph; its gradient with
// respect to `inputs` is recorded once, then differentiated once per iteration in the direction of the
// current vector (starting from normal numbers drawn from `seed`, normalised). Stops after `iterations`,
// or earlier once two successive estimates agree to `rtol`. The vector is the eigenvector's estimate.
template<class T>
struct eigen_estimate
{
    double value = 0;
    std::vector<array<T>> vector;
    std::size_t iterations = 0;
};
template<class T>
eigen_estimate<T> top_hessian_eigenvalue(const var<T>& loss,
                                         const std::vector<var<T>>& inputs,
                                         std::size_t iterations,
                                         unsigned seed = 0,
                                         double rtol = 0);

// The Hessian-vector products of a scalar function at `inputs`: H v, where H is the Hessian of f with
// respect to all inputs together and v the vectors (one per input, of its shape). Returns f's value
// and one array per input. On a fresh tape each call; f builds its graph from the input vars.
template <class T>
struct hvp_result
{
    T value;
    std::vector<array<T>> products;
};
template <class T>
hvp_result<T> hvp(const std::function<var<T>(tape<T>&, const std::vector<var<T>>&)>& f,
                  const std::vector<array<T>>& inputs, const std::vector<array<T>>& vectors);
}  // namespace xgrad
