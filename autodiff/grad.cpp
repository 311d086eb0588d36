// xgrad::grad: the backward walk on arrays into gradients of one's own, or on vars (create_graph),
// where every rule records what it computes. Recording uses the ops themselves (ops/ops.hpp).
#include "autodiff/grad.hpp"

#include <algorithm>
#include <cmath>

#include "autodiff/record.hpp"
#include "ops/ops.hpp"

namespace xgrad
{
namespace
{
template <class T>
bool contains(const std::vector<var<T>>& vars, std::uint32_t index)
{
    return std::any_of(vars.begin(), vars.end(), [&](const var<T>& v) { return v.index() == index; });
}

// g summed over the axes that broadcasting added or stretched, as sum_to does on arrays, recorded.
template <class T>
var<T> sum_to(const var<T>& g, const shape_t& shape)
{
    const shape_t gshape = g.shape();
    if (gshape == shape)
    {
        return g;
    }
    const std::size_t lead = gshape.size() - shape.size();
    std::vector<std::size_t> axes;
    for (std::size_t i = 0; i < gshape.size(); ++i)
    {
        if (i < lead || (shape[i - lead] == 1 && gshape[i] != 1))
        {
            axes.push_back(i);
        }
    }
    return ops::reshape(ops::sum(g, axes), std::vector<long>(shape.begin(), shape.end()));
}

// The reverse walk on vars from `root` with gradient `seed`: each rule runs on a graph_context and
// records what it computes. With stop_at_inputs the walk does not go past `inputs` (a fused op's twin
// is differentiated with respect to the op's own inputs only). Returns the gradient of each input, an
// empty handle where none arrived.
template <class T>
std::vector<var<T>> walk_recording(const var<T>& root, const var<T>& seed, const std::vector<var<T>>& inputs,
                                   bool stop_at_inputs, bool retain_graph)
{
    const auto& state = root.state();
    std::vector<var<T>> grads(root.index() + 1);
    grads[root.index()] = seed;
    for (std::uint32_t i = root.index() + 1; i-- > 0;)
    {
        auto& n = *state->nodes[i];
        if (!grads[i].valid() || n.input_count == 0 || (stop_at_inputs && contains(inputs, i)))
        {
            continue;
        }
        if (n.released)
        {
            throw std::logic_error(std::string("xgrad::grad: node ") + std::to_string(i) + " ('" + n.op +
                                   "') was released by an earlier backward; pass retain_graph=true to it "
                                   "to walk the graph again");
        }
        if (!n.has_rule())
        {
            continue;
        }
        graph_context<T> ctx(state, i, grads);
        n.run_graph_rule(ctx);
        if (!retain_graph)
        {
            n.release_rule();
            n.released = true;
        }
    }
    std::vector<var<T>> result;
    for (const var<T>& in : inputs)
    {
        result.push_back(in.index() <= root.index() ? grads[in.index()] : var<T>());
    }
    return result;
}

// The reverse walk on arrays (the tape's own), into gradients that leave every node's grad as it was.
template <class T>
std::vector<array<T>> walk_arrays(const var<T>& root, const array<T>& seed, const std::vector<var<T>>& inputs,
                                  bool retain_graph)
{
    auto& state = *root.state();
    std::vector<std::pair<array<T>, bool>> stash;
    for (auto& n : state.nodes)
    {
        stash.emplace_back(std::move(n->grad), n->has_grad);
        n->grad = array<T>();
        n->has_grad = false;
    }
    auto restore = [&] {
        for (std::size_t i = 0; i < stash.size(); ++i)
        {
            state.nodes[i]->grad = std::move(stash[i].first);
            state.nodes[i]->has_grad = stash[i].second;
        }
    };
    std::vector<std::uint32_t> keep;
    for (const var<T>& in : inputs)
    {
        keep.push_back(in.index());
    }
    auto& r = root.node();
    r.grad = seed;
    r.has_grad = true;
    std::vector<array<T>> result;
    try
    {
        detail::walk(state, root.index(), {retain_graph, /*to_parameters=*/false, &keep});
        for (const var<T>& in : inputs)
        {
            const auto& n = in.node();
            result.push_back(n.has_grad ? n.grad : array<T>(xt::zeros<T>(n.value().shape())));
        }
    }
    catch (...)
    {
        restore();
        throw;
    }
    restore();
    return result;
}

template <class T>
void check_arguments(const var<T>& root, const std::vector<var<T>>& inputs, const shape_t* seed_shape)
{
    if (!root.valid())
    {
        fail("grad", "output is an empty handle");
    }
    root.node();  // rejects a stale handle
    for (std::size_t j = 0; j < inputs.size(); ++j)
    {
        if (!inputs[j].valid() || inputs[j].state() != root.state())
        {
            fail("grad", "input " + std::to_string(j) + " is not on the output's tape");
        }
        inputs[j].node();
    }
    if (!seed_shape && root.value().size() != 1)
    {
        fail("grad", "output has shape " + shape_str(root.shape()) +
                         "; pass a seed of that shape (the vector of the vector-Jacobian product) or reduce it "
                         "to one element");
    }
    if (seed_shape && *seed_shape != root.shape())
    {
        fail("grad", "seed shape " + shape_str(*seed_shape) + " != output shape " + shape_str(root.shape()));
    }
}

template <class T>
std::vector<var<T>> zeros_like_inputs(const var<T>& root, const std::vector<var<T>>& inputs)
{
    std::vector<var<T>> result;
    for (const var<T>& in : inputs)
    {
        result.push_back(constant_like(root, array<T>(xt::zeros<T>(in.value().shape()))));
    }
    return result;
}

template <class T>
std::vector<var<T>> grad_recording(const var<T>& root, const std::vector<var<T>>& inputs, const var<T>& seed,
                                   bool retain_graph)
{
    if (!root.requires_grad())
    {
        return zeros_like_inputs(root, inputs);
    }
    std::vector<var<T>> grads = walk_recording(root, seed, inputs, /*stop_at_inputs=*/false, retain_graph);
    for (std::size_t j = 0; j < inputs.size(); ++j)
    {
        if (!grads[j].valid())
        {
            grads[j] = constant_like(root, array<T>(xt::zeros<T>(inputs[j].value().shape())));
        }
    }
    return grads;
}

template <class T>
std::vector<var<T>> grad_on_arrays(const var<T>& root, const std::vector<var<T>>& inputs, const array<T>& seed,
                                   bool retain_graph)
{
    if (!root.requires_grad())
    {
        return zeros_like_inputs(root, inputs);
    }
    std::vector<var<T>> result;
    for (auto& g : walk_arrays(root, seed, inputs, retain_graph))
    {
        result.push_back(constant_like(root, std::move(g)));
    }
    return result;
}
}  // namespace

template <class T>
std::vector<var<T>> grad(const var<T>& root, const std::vector<var<T>>& inputs, const var<T>& seed,
                         const grad_options& options)
{
    if (!seed.valid() || seed.state() != root.state())
    {
        fail("grad", "seed is not on the output's tape");
    }
    const shape_t seed_shape = seed.shape();
    check_arguments(root, inputs, &seed_shape);
    if (options.creates_graph())
    {
        return grad_recording(root, inputs, seed, options.retains_graph());
    }
    return grad_on_arrays(root, inputs, seed.value(), options.retains_graph());
}

template <class T>
std::vector<var<T>> grad(const var<T>& root, const std::vector<var<T>>& inputs, const array<T>& seed,
                         const grad_options& options)
{
    const shape_t seed_shape = to_shape(seed.shape());
    check_arguments(root, inputs, &seed_shape);
    if (options.creates_graph())
    {
        return grad_recording(root, inputs, constant_like(root, seed), options.retains_graph());
    }
    return grad_on_arrays(root, inputs, seed, options.retains_graph());
}

template <class T>
std::vector<var<T>> grad(const var<T>& root, const std::vector<var<T>>& inputs, const grad_options& options)
{
    check_arguments(root, inputs, static_cast<const shape_t*>(nullptr));
    return grad(root, inputs, array<T>(xt::ones<T>(root.value().shape())), options);
}

template <class T>
hvp_result<T> hvp(const std::function<var<T>(tape<T>&, const std::vector<var<T>>&)>& f,
                  const std::vector<array<T>>& inputs, const std::vector<array<T>>& vectors)
{
    if (vectors.size() != inputs.size())
    {
        fail("hvp", std::to_string(inputs.size()) + " inputs but " + std::to_string(vectors.size()) + " vectors");
    }
    tape<T> t;
    std::vector<var<T>> xs;
    for (std::size_t k = 0; k < inputs.size(); ++k)
    {
        if (vectors[k].shape() != inputs[k].shape())
        {
            fail("hvp", "vector " + std::to_string(k) + " has shape " + shape_str(to_shape(vectors[k].shape())) +
                            ", input " + std::to_string(k) + " " + shape_str(to_shape(inputs[k].shape())));
        }
        xs.push_back(t.input(inputs[k]));
    }
    const var<T> y = f(t, xs);
    const std::vector<var<T>> g = grad(y, xs, create_graph);
    // H v = d/dx (sum_k <dy/dx_k, v_k>): one more backward through the recorded gradients.
    var<T> g_dot_v = ops::sum(ops::mul(g[0], t.constant(vectors[0])));
    for (std::size_t k = 1; k < xs.size(); ++k)
    {
        g_dot_v = ops::add(g_dot_v, ops::sum(ops::mul(g[k], t.constant(vectors[k]))));
    }
    hvp_result<T> result{y.item(), {}};
    for (const var<T>& hv : grad(g_dot_v, xs))
    {
        result.products.push_back(hv.value());
    }
    return result;
}

template <class T>
std::vector<std::pair<std::string, var<T>>> parameter_leaves(const var<T>& on_tape)
{
    on_tape.node();  // rejects an empty or stale handle
    const auto& state = on_tape.state();
    std::vector<std::pair<std::string, var<T>>> leaves;
    for (std::uint32_t i = 0; i < state->nodes.size(); ++i)
    {
        if (const auto& p = state->nodes[i]->param)
        {
            leaves.emplace_back(p->name, detail::handle(state, i));
        }
    }
    return leaves;
}

namespace
{
template<class T>
double dot(const std::vector<array<T>>& a, const std::vector<array<T>>& b)
{
    double s = 0;
    for (std::size_t k = 0; k < a.size(); ++k)
    {
        s += static_cast<double>(xt::sum(a[k] * b[k], xt::evaluation_strategy::immediate)());
    }
    return s;
}

template<class T>
void scale_all(std::vector<array<T>>& a, double factor)
{
    for (auto& x : a)
    {
        x *= static_cast<T>(factor);
    }
}
} // namespace

template<class T>
eigen_estimate<T> top_hessian_eigenvalue(const var<T>& loss,
                                         const std::vector<var<T>>& inputs,
                                         std::size_t iterations,
                                         unsigned seed,
                                         double rtol)
{
    if (iterations == 0 || inputs.empty())
    {
        fail("top_hessian_eigenvalue", "needs at least one iteration and one input");
    }
    const std::vector<var<T>> g = grad(loss, inputs, create_graph);
    eigen_estimate<T> e;
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal;
    for (const var<T>& x : inputs)
    {
        array<T> v = array<T>::from_shape(x.value().shape());
        std::generate(v.begin(), v.end(), [&] { return static_cast<T>(normal(rng)); });
        e.vector.push_back(std::move(v));
    }
    scale_all(e.vector, 1 / std::sqrt(dot(e.vector, e.vector)));
    for (e.iterations = 1; e.iterations <= iterations; ++e.iterations)
    {
        // H v = d <g, v> / d inputs, v held constant; the recorded gradient is kept for the next one.
        var<T> g_dot_v = ops::sum(ops::mul(g[0], constant_like(loss, e.vector[0])));
        for (std::size_t k = 1; k < g.size(); ++k)
        {
            g_dot_v = ops::add(g_dot_v, ops::sum(ops::mul(g[k], constant_like(loss, e.vector[k]))));
        }
        std::vector<array<T>> hv;
        for (const var<T>& h : grad(g_dot_v, inputs, grad_options().retain_graph()))
        {
            hv.push_back(h.value());
        }
        const double previous = e.value;
        e.value = dot(e.vector, hv); // the Rayleigh quotient v^T H v, |v| = 1
        const double norm = std::sqrt(dot(hv, hv));
        if (norm == 0)
        {
            break; // H v = 0: the Hessian vanishes along v (and the estimate is 0)
        }
        e.vector = std::move(hv);
        scale_all(e.vector, 1 / norm);
        if (rtol > 0 && e.iterations > 1 && std::abs(e.value - previous) <= rtol * std::abs(e.value))
        {
            break;
        }
    }
    e.iterations = std::min(e.iterations, iterations);
    return e;
}

// ---- graph_context ----------------------------------------------------------------------------------

template <class T>
void graph_context<T>::require(unsigned flag) const
{
    if (!(node_.saves & flag))
    {
        const char* what = flag == saves_output ? "its output" : "an input";
        throw std::logic_error(std::string(node_.op) + " backward reads " + what +
                               ", which the op did not declare among its saved values when it was recorded");
    }
}

template <class T>
void graph_context<T>::accumulate(std::size_t k, const var<T>& g)
{
    const std::uint32_t input = node_.inputs[k];
    const auto& in = *state_->nodes[input];
    if (!in.requires_grad)
    {
        return;
    }
    const shape_t in_shape = to_shape(in.value().shape());
    if (g.state() != state_ || !broadcasts_to(in_shape, g.shape()))
    {
        throw std::logic_error(std::string(node_.op) + " backward (recorded): gradient of shape " +
                               shape_str(g.shape()) + " for input " + std::to_string(k) +
                               " is not a var of its tape that reduces to its shape " + shape_str(in_shape));
    }
    var<T> reduced = sum_to(g, in_shape);
    var<T>& slot = grads_[input];
    slot = slot.valid() ? ops::add(slot, reduced) : reduced;
}

template <class T>
void graph_context<T>::accumulate_twin(const std::vector<var<T>>& inputs, const var<T>& twin_output)
{
    if (twin_output.shape() != to_shape(node_.value().shape()))
    {
        throw std::logic_error(std::string(node_.op) + ": its composed twin has shape " +
                               shape_str(twin_output.shape()) + ", the op " +
                               shape_str(to_shape(node_.value().shape())));
    }
    const std::vector<var<T>> grads = walk_recording(twin_output, grad(), inputs, /*stop_at_inputs=*/true,
                                                     /*retain_graph=*/true);
    for (std::size_t k = 0; k < inputs.size(); ++k)
    {
        // An input passed twice (mul(x, x)) is one node: its gradient already sums both uses.
        const bool first_use = std::none_of(inputs.begin(), inputs.begin() + k,
                                            [&](const var<T>& v) { return v.index() == inputs[k].index(); });
        if (first_use && grads[k].valid())
        {
            accumulate(k, grads[k]);
        }
    }
}

#define XGRAD_GRAD(T)                                                                                        \
    template class graph_context<T>;                                                                         \
    template std::vector<var<T>> grad(const var<T>&, const std::vector<var<T>>&, const grad_options&);       \
    template std::vector<var<T>> grad(                                                                       \
      const var<T>&, const std::vector<var<T>>&, const var<T>&, const grad_options&);                        \
    template std::vector<var<T>> grad(                                                                       \
      const var<T>&, const std::vector<var<T>>&, const array<T>&, const grad_options&);                      \
    template std::vector<std::pair<std::string, var<T>>> parameter_leaves(const var<T>&);                    \
    template eigen_estimate<T> top_hessian_eigenvalue(                                                       \
      const var<T>&, const std::vector<var<T>>&, std::size_t, unsigned, double);                             \
    template hvp_result<T> hvp(const std::function<var<T>(tape<T>&, const std::vector<var<T>>&)>&,           \
                               const std::vector<array<T>>&,                                                 \
                               const std::vector<array<T>>&);
XGRAD_GRAD(float)
XGRAD_GRAD(double)
}  // namespace xgrad
