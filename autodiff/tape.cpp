// The tape's core: handles, leaves, accumulation, the backward walk and release.
#include "autodiff/record.hpp"

#include <algorithm>

#include <xtensor/xnoalias.hpp>

namespace xgrad
{
namespace detail
{
void throw_no_graph_rule(const char* op)
{
    throw std::logic_error(std::string("xgrad::grad with create_graph: the backward of '") + op +
                           "' works on arrays only and cannot record itself, so this gradient cannot be "
                           "differentiated again");
}

void throw_stale(std::uint32_t index)
{
    throw std::logic_error("var: handle to node " + std::to_string(index) +
                           " of a tape that was cleared since it was recorded");
}

template <class T>
node<T>& tape_state<T>::at(std::uint32_t index, std::uint64_t generation_of_handle) const
{
    if (generation_of_handle != generation || index >= nodes.size())
    {
        throw_stale(index);
    }
    return *nodes[index];
}
}  // namespace detail

// ---- var -----------------------------------------------------------------------------------------

template <class T>
const array<T>& var<T>::value() const
{
    const auto& n = node();
    if (state_->unchecked == index_)
    {
        detail::anomaly::check_forward(*state_);  // anomaly mode: checked before anyone reads it
    }
    return n.value();
}

template <class T>
shape_t var<T>::shape() const
{
    return to_shape(node().value().shape());
}

template <class T>
const array<T>& var<T>::grad() const
{
    auto& n = node();
    if (!n.has_grad)
    {
        n.grad = xt::zeros<T>(n.value().shape());
        n.has_grad = true;
    }
    return n.grad;
}

template <class T>
T var<T>::item() const
{
    const array<T>& v = value();
    if (v.size() != 1)
    {
        throw std::invalid_argument("item: the var holds " + std::to_string(v.size()) + " values, shape " +
                                    shape_str(shape()) + "; item() needs exactly one");
    }
    return v.flat(0);
}

template <class T>
const var<T>& var<T>::named(std::string label) const
{
    node().label = std::move(label);
    if (state_->unchecked == index_)
    {
        detail::anomaly::check_forward(*state_);  // anomaly mode: checked once it has its name
    }
    return *this;
}

// ---- accumulation ---------------------------------------------------------------------

template <class T>
void backward_context<T>::throw_undeclared_read(unsigned flag) const
{
    const char* what = flag == saves_output ? "its output" : flag == saves_input0 ? "input 0"
                       : flag == saves_input1 ? "input 1" : flag == saves_input2 ? "input 2" : "input 3";
    throw std::logic_error(std::string(node_.op) + " backward reads " + what +
                           ", which the op did not declare among its saved values when it was recorded");
}

template <class T>
void backward_context<T>::accumulate(std::size_t k, array<T>&& g)
{
    auto& in = input_node(k);
    if (!in.requires_grad)
    {
        return;
    }
    const shape_t in_shape = to_shape(in.value().shape());
    if (!broadcasts_to(in_shape, to_shape(g.shape())))
    {
        throw std::logic_error(std::string(node_.op) + " backward: gradient of shape " +
                               shape_str(to_shape(g.shape())) + " for input " + std::to_string(k) +
                               " does not reduce to its shape " + shape_str(in_shape));
    }
    array<T> reduced = sum_to(std::move(g), in_shape);
    if (check_finite_)
    {
        detail::anomaly::check_sent(state_, index_, k, reduced);
    }
    if (!in.has_grad)
    {
        in.grad = std::move(reduced);
        in.has_grad = true;
    }
    else if (check_finite_)
    {
        detail::anomaly::add_checked(state_, index_, k, in.grad, reduced);
    }
    else
    {
        xt::noalias(in.grad) += reduced;  // an input used several times receives the sum (no temporary)
    }
}

// ---- tape ----------------------------------------------------------------------------------------

template <class T>
tape<T>::tape() : state_(std::make_shared<detail::tape_state<T>>())
{
}

namespace detail
{
// Appends a leaf node (no inputs, no rule) and returns its index.
template <class T>
std::uint32_t push_leaf(tape_state<T>& state, const char* op, array<T>&& value, std::string label,
                        bool requires_grad)
{
    auto n = state.template make_node<node<T>>();
    n->op = op;
    n->label = std::move(label);
    n->owned = std::move(value);
    n->requires_grad = requires_grad && state.no_grad_depth == 0;
    const auto index = static_cast<std::uint32_t>(state.nodes.size());
    state.nodes.push_back(std::move(n));
    return index;
}
}  // namespace detail

template <class T>
var<T> tape<T>::leaf(const char* op, array<T>&& value, std::string label, bool requires_grad)
{
    const auto index = detail::push_leaf(*state_, op, std::move(value), std::move(label), requires_grad);
    return var<T>(state_, index, state_->generation);
}

template <class T>
var<T> constant_like(const var<T>& on_same_tape, array<T> value, std::string label)
{
    on_same_tape.node();  // rejects an empty or stale handle
    const auto& state = on_same_tape.state();
    const auto index = detail::push_leaf(*state, "constant", std::move(value), std::move(label), false);
    return var<T>(state, index, state->generation);
}

template <class T>
var<T> tape<T>::input(array<T> value, std::string label, bool requires_grad)
{
    return leaf("input", std::move(value), std::move(label), requires_grad);
}

template <class T>
var<T> tape<T>::constant(array<T> value, std::string label)
{
    return leaf("constant", std::move(value), std::move(label), false);
}

template <class T>
var<T> tape<T>::param(const parameter<T>& p)
{
    var<T> v = leaf("param", array<T>(), p.s_->name, true);
    auto& n = *state_->nodes[v.index_];
    n.param = p.s_;  // keeps the parameter alive while the tape reads its value
    n.borrowed = &p.s_->value;
    return v;
}

template <class T>
void tape<T>::backward(const var<T>& root, bool retain_graph)
{
    const auto& n = root.node();
    if (n.value().size() != 1)
    {
        fail("tape::backward", "root has shape " + shape_str(root.shape()) +
                                   "; pass a seed gradient of that shape or reduce it to one element");
    }
    backward(root, xt::ones<T>(n.value().shape()), retain_graph);
}

template <class T>
void tape<T>::backward(const var<T>& root, const array<T>& seed, bool retain_graph)
{
    auto& n = root.node();
    if (state_->unchecked != detail::tape_state<T>::no_node)
    {
        detail::anomaly::check_forward(*state_);  // anomaly mode: the last op's value, before its backward
    }
    if (root.state_ != state_)
    {
        fail("tape::backward", "root belongs to another tape");
    }
    if (to_shape(seed.shape()) != root.shape())
    {
        fail("tape::backward", "seed shape " + shape_str(to_shape(seed.shape())) + " != root shape " +
                                   shape_str(root.shape()));
    }
    if (!n.requires_grad)
    {
        fail("tape::backward", "root does not depend on any input that requires a gradient");
    }
    // Clear gradients of the previous walk, except on leaves (they accumulate like parameters do).
    for (auto& node : state_->nodes)
    {
        if (node->input_count > 0 && node->has_grad)
        {
            node->grad = array<T>();
            node->has_grad = false;
        }
    }
    if (n.input_count == 0 && n.has_grad)
    {
        n.grad += seed;  // a leaf as root: its gradient accumulates like any leaf's
    }
    else
    {
        n.grad = seed;
        n.has_grad = true;
    }
    detail::walk(*state_, root.index_, {retain_graph});
}

template <class T>
void detail::walk(tape_state<T>& state, std::uint32_t root, const walk_options& options)
{
    const bool retain_graph = options.retain_graph;
    auto kept = [&](std::uint32_t i) {
        return i == root || (options.keep && std::find(options.keep->begin(), options.keep->end(), i) !=
                                                 options.keep->end());
    };
    auto& nodes = state.nodes;
    for (std::uint32_t i = root + 1; i-- > 0;)
    {
        auto& n = *nodes[i];
        if (!n.has_grad || n.input_count == 0)
        {
            continue;
        }
        if (n.released)
        {
            throw std::logic_error(std::string("tape::backward: node ") + std::to_string(i) + " ('" + n.op +
                                   "') was released by an earlier backward; pass retain_graph=true to the "
                                   "first backward to walk the graph twice");
        }
        if (!n.has_rule())
        {
            continue;
        }
        const bool check_finite = state.detect_anomaly && anomaly::rule_reads_finite(state, n);
        backward_context<T> ctx(state, i, !retain_graph && !kept(i), check_finite);
        n.run_rule(ctx);
        if (!retain_graph)
        {
            n.release_rule();  // only rules this walk used: another root's graph on the tape stays usable
            n.released = true;
            if (!kept(i))
            {
                n.grad = array<T>();  // interior gradients are not kept: frees memory during the walk
                n.has_grad = false;
            }
        }
    }
    for (auto& n : nodes)
    {
        if (options.to_parameters && n->param && n->has_grad)
        {
            auto& p = *n->param;
            if (p.grad_is_zero)
            {
                p.grad = std::move(n->grad);  // nothing to add to since zero_grad: the array itself
                p.grad_allocated = true;
            }
            else
            {
                xt::noalias(p.grad) += n->grad;  // parameters accumulate across backward calls
            }
            p.grad_is_zero = false;
            n->grad = array<T>();
            n->has_grad = false;
        }
    }
    if (!retain_graph)
    {
        // A value stays saved only while a rule that is still alive reads it.
        for (auto& n : nodes)
        {
            n->value_saved = false;
        }
        for (auto& n : nodes)
        {
            if (n->has_rule())
            {
                mark_saved(state, *n);
            }
        }
    }
}

template <class T>
void tape<T>::clear()
{
    state_->nodes.clear();
    state_->nodes.shrink_to_fit();
    state_->memory.reset();
    state_->unchecked = detail::tape_state<T>::no_node;
    ++state_->generation;
}

template void detail::walk(detail::tape_state<float>&, std::uint32_t, const detail::walk_options&);
template void detail::walk(detail::tape_state<double>&, std::uint32_t, const detail::walk_options&);
template class var<float>;
template class var<double>;
template class backward_context<float>;
template class backward_context<double>;
template class tape<float>;
template class tape<double>;
template var<float> constant_like(const var<float>&, array<float>, std::string);
template var<double> constant_like(const var<double>&, array<double>, std::string);
template struct detail::tape_state<float>;
template struct detail::tape_state<double>;
}  // namespace xgrad
