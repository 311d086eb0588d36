// The tape's walk, leaves, release and introspection.
#include "autodiff/tape.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xreducer.hpp>

namespace xgrad
{
template <class T>
parameter<T>::parameter() : s_(std::make_shared<state>())
{
}

template <class T>
parameter<T>::parameter(array<T> value, std::string name) : s_(std::make_shared<state>())
{
    s_->grad = xt::zeros<T>(value.shape());
    s_->value = std::move(value);
    s_->name = std::move(name);
}

template <class T>
void parameter<T>::zero_grad()
{
    s_->grad = xt::zeros<T>(s_->value.shape());
}

anomaly_error::anomaly_error(std::string summary_line, std::vector<std::string> trace_lines)
    : std::runtime_error([&] {
          std::string text = summary_line + "\nforward trace (the node and the nodes that fed it, oldest first):";
          for (const std::string& line : trace_lines)
          {
              text += "\n  " + line;
          }
          return text;
      }()),
      summary(std::move(summary_line)),
      trace(std::move(trace_lines))
{
}

std::string anomaly_error::one_line() const
{
    std::string line = summary + "; forward trace: ";
    for (std::size_t i = 0; i < trace.size(); ++i)
    {
        std::string node = trace[i];
        node.erase(std::unique(node.begin(), node.end(), [](char a, char b) { return a == ' ' && b == ' '; }),
                   node.end());  // the trace pads its columns
        line += (i ? "; " : "") + node;
    }
    return line;
}

namespace detail
{
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

// ---- anomaly mode --------------------------------------------------------------------------------

namespace
{
constexpr std::size_t all_finite = static_cast<std::size_t>(-1);

// Flat index of the first NaN or +-inf in a, or all_finite.
template <class T>
std::size_t first_non_finite(const array<T>& a)
{
    const T* data = a.data();
    for (std::size_t k = 0, n = a.size(); k < n; ++k)
    {
        if (!std::isfinite(data[k]))
        {
            return k;
        }
    }
    return all_finite;
}

// Whether a node's value is all finite, looked at once and remembered.
template <class T>
bool value_is_finite(detail::node<T>& n)
{
    if (n.finite < 0)
    {
        n.finite = first_non_finite(n.value()) == all_finite ? 1 : 0;
    }
    return n.finite == 1;
}

// "[1, 0]": the row-major multi-index of flat element k of shape.
std::string index_str(std::size_t k, const shape_t& shape)
{
    std::vector<std::size_t> index(shape.size());
    for (std::size_t axis = shape.size(); axis-- > 0;)
    {
        index[axis] = shape[axis] ? k % shape[axis] : 0;
        k = shape[axis] ? k / shape[axis] : 0;
    }
    std::string s = "[";
    for (std::size_t axis = 0; axis < index.size(); ++axis)
    {
        s += (axis ? ", " : "") + std::to_string(index[axis]);
    }
    return s + "]";
}

std::string number_str(double v)
{
    return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

// "%7 log 'lp'(%6)": a node as the anomaly report names it.
template <class T>
std::string node_str(const detail::tape_state<T>& state, std::uint32_t i)
{
    const auto& n = *state.nodes[i];
    std::string s = "%" + std::to_string(i) + " " + n.op + (n.label.empty() ? "" : " '" + n.label + "'");
    for (std::size_t k = 0; k < n.input_count; ++k)
    {
        s += (k ? ", %" : "(%") + std::to_string(n.inputs[k]);
    }
    return s + (n.input_count ? ")" : "");
}

// The node and every node it was computed from, oldest first, one line each; at most `limit` lines (the
// newest), after a line counting the ones left out.
template <class T>
std::vector<std::string> forward_trace(const detail::tape_state<T>& state, std::uint32_t index,
                                       std::size_t limit = 32)
{
    std::vector<bool> feeds(index + 1, false);
    feeds[index] = true;
    std::vector<std::uint32_t> chain;
    for (std::uint32_t i = index + 1; i-- > 0;)  // inputs precede their node: one reverse sweep finds them
    {
        if (!feeds[i])
        {
            continue;
        }
        chain.push_back(i);
        const auto& n = *state.nodes[i];
        for (std::size_t k = 0; k < n.input_count; ++k)
        {
            feeds[n.inputs[k]] = true;
        }
    }
    std::vector<std::string> lines;
    if (chain.size() > limit)
    {
        lines.push_back("... " + std::to_string(chain.size() - (limit - 1)) + " earlier nodes");
        chain.resize(limit - 1);
    }
    for (auto i = chain.rbegin(); i != chain.rend(); ++i)
    {
        std::string line = node_str(state, *i);
        line.resize(std::max<std::size_t>(line.size() + 2, 36), ' ');
        lines.push_back(line + shape_str(to_shape(state.nodes[*i]->value().shape())));
    }
    return lines;
}

// "%6 (2, 3), %2 (3,)": the inputs of node n with their shapes.
template <class T>
std::string input_shapes(const detail::tape_state<T>& state, const detail::node<T>& n)
{
    std::string s;
    for (std::size_t k = 0; k < n.input_count; ++k)
    {
        s += (k ? ", %" : "%") + std::to_string(n.inputs[k]) + " " +
             shape_str(to_shape(state.nodes[n.inputs[k]]->value().shape()));
    }
    return s;
}

template <class T>
anomaly_error make_anomaly(const detail::tape_state<T>& state, std::uint32_t index, bool in_backward,
                           const array<T>& bad, std::size_t element, const std::string& summary)
{
    const auto& n = *state.nodes[index];
    anomaly_error e(summary, forward_trace(state, index));
    e.node = index;
    e.op = n.op;
    e.label = n.label;
    e.in_backward = in_backward;
    e.element = element;
    e.value = static_cast<double>(bad.data()[element]);
    return e;
}

// Everything node n's backward rule reads is finite: its incoming gradient, its value and its inputs'.
template <class T>
bool rule_reads_finite(detail::tape_state<T>& state, detail::node<T>& n)
{
    if (first_non_finite(n.grad) != all_finite || !value_is_finite(n))
    {
        return false;
    }
    for (std::size_t k = 0; k < n.input_count; ++k)
    {
        if (!value_is_finite(*state.nodes[n.inputs[k]]))
        {
            return false;
        }
    }
    return true;
}
}  // namespace

namespace detail
{
template <class T>
void check_forward_anomaly(tape_state<T>& state)
{
    const std::uint32_t index = state.unchecked;
    state.unchecked = tape_state<T>::no_node;
    auto& n = *state.nodes[index];
    if (value_is_finite(n))
    {
        return;
    }
    for (std::size_t k = 0; k < n.input_count; ++k)
    {
        if (!value_is_finite(*state.nodes[n.inputs[k]]))
        {
            return;  // a non-finite input only propagates: not this op's anomaly
        }
    }
    const std::size_t bad = first_non_finite(n.value());
    const shape_t shape = to_shape(n.value().shape());
    throw make_anomaly(state, index, false, n.value(), bad,
                       "anomaly in forward: " + node_str(state, index) + " gave " +
                           number_str(static_cast<double>(n.value().data()[bad])) + " at index " +
                           index_str(bad, shape) + " of its output " + shape_str(shape) +
                           " from finite inputs " + input_shapes(state, n));
}
}  // namespace detail

template <class T>
void backward_context<T>::throw_backward_anomaly(std::size_t k, const array<T>& g, bool in_sum) const
{
    const std::size_t bad = first_non_finite(g);
    const shape_t shape = to_shape(g.shape());
    const std::string where = number_str(static_cast<double>(g.data()[bad])) + " at index " +
                              index_str(bad, shape) + " of the gradient " + shape_str(shape) + " for input " +
                              std::to_string(k) + " (%" + std::to_string(node_.inputs[k]) + ")";
    throw make_anomaly(state_, index_, true, g, bad,
                       "anomaly in backward: " + node_str(state_, index_) +
                           (in_sum ? " gave a finite gradient, but adding it to the one already there gave "
                                   : " gave ") +
                           where + ", from a finite incoming gradient " + shape_str(to_shape(node_.value().shape())) +
                           " and finite values " + input_shapes(state_, node_));
}

// ---- var -----------------------------------------------------------------------------------------

template <class T>
const array<T>& var<T>::value() const
{
    const auto& n = node();
    if (state_->unchecked == index_)
    {
        detail::check_forward_anomaly(*state_);  // anomaly mode: checked before anyone reads it
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
        detail::check_forward_anomaly(*state_);  // anomaly mode: checked once it has its name
    }
    return *this;
}

// ---- sum_to and accumulation ---------------------------------------------------------------------

template <class T>
array<T> sum_to(array<T>&& g, const shape_t& shape)
{
    const shape_t gshape = to_shape(g.shape());
    if (gshape == shape)
    {
        return std::move(g);
    }
    if (!broadcasts_to(shape, gshape))
    {
        throw std::logic_error("sum_to: gradient of shape " + shape_str(gshape) +
                               " cannot be reduced to shape " + shape_str(shape));
    }
    // Axes to sum: the leading ones `shape` lacks, and those where `shape` has size 1.
    const std::size_t lead = gshape.size() - shape.size();
    std::vector<std::size_t> axes;
    for (std::size_t i = 0; i < gshape.size(); ++i)
    {
        if (i < lead || (shape[i - lead] == 1 && gshape[i] != 1))
        {
            axes.push_back(i);
        }
    }
    array<T> reduced = xt::sum(g, axes, xt::evaluation_strategy::immediate);
    reduced.reshape(shape);
    return reduced;
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
    array<T> reduced = sum_to(std::move(g), in_shape);
    if (to_shape(reduced.shape()) != in_shape)
    {
        throw std::logic_error(std::string(node_.op) + " backward: gradient shape " +
                               shape_str(to_shape(reduced.shape())) + " != input shape " + shape_str(in_shape));
    }
    if (check_finite_ && first_non_finite(reduced) != all_finite)
    {
        throw_backward_anomaly(k, reduced, false);
    }
    if (in.has_grad)
    {
        const bool sum_was_finite = check_finite_ && first_non_finite(in.grad) == all_finite;
        xt::noalias(in.grad) += reduced;  // an input used several times receives the sum (no temporary)
        if (sum_was_finite && first_non_finite(in.grad) != all_finite)
        {
            throw_backward_anomaly(k, in.grad, true);
        }
    }
    else
    {
        in.grad = std::move(reduced);
        in.has_grad = true;
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
        detail::check_forward_anomaly(*state_);  // anomaly mode: the last op's value, before its backward
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
    walk(root.index_, retain_graph);
}

template <class T>
void tape<T>::walk(std::uint32_t root, bool retain_graph)
{
    auto& nodes = state_->nodes;
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
        const bool check_finite = state_->detect_anomaly && rule_reads_finite(*state_, n);
        backward_context<T> ctx(*state_, i, !retain_graph && i != root, check_finite);
        n.run_rule(ctx);
        if (!retain_graph)
        {
            n.release_rule();  // only rules this walk used: another root's graph on the tape stays usable
            n.released = true;
            if (i != root)
            {
                n.grad = array<T>();  // interior gradients are not kept: frees memory during the walk
                n.has_grad = false;
            }
        }
    }
    for (auto& n : nodes)
    {
        if (n->param && n->has_grad)
        {
            xt::noalias(n->param->grad) += n->grad;  // parameters accumulate across backward calls
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
                detail::mark_saved(*state_, *n);
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

// ---- introspection -------------------------------------------------------------------------------

template <class T>
std::vector<node_info> tape<T>::nodes() const
{
    std::vector<node_info> out;
    out.reserve(state_->nodes.size());
    for (std::uint32_t i = 0; i < state_->nodes.size(); ++i)
    {
        const auto& n = *state_->nodes[i];
        out.push_back({i, n.op, n.label, std::vector<std::uint32_t>(n.inputs.begin(), n.inputs.begin() + n.input_count),
                       to_shape(n.value().shape()), n.value().size() * sizeof(T), n.value_saved, n.multiply_adds});
    }
    return out;
}

template <class T>
std::size_t tape<T>::bytes_saved_for_backward(bool include_leaves) const
{
    std::size_t bytes = 0;
    for (const auto& n : state_->nodes)
    {
        const bool counted = n->value_saved && (include_leaves || n->input_count > 0);
        bytes += counted ? n->owned.size() * sizeof(T) : 0;  // a borrowed parameter is not the tape's
    }
    return bytes;
}

template <class T>
std::size_t tape<T>::bytes_held() const
{
    std::size_t bytes = 0;
    for (const auto& n : state_->nodes)
    {
        bytes += (n->owned.size() + (n->has_grad ? n->grad.size() : 0)) * sizeof(T);
    }
    return bytes;
}

template <class T>
std::uint64_t tape<T>::multiply_adds() const
{
    std::uint64_t total = 0;
    for (const auto& n : state_->nodes)
    {
        total += n->multiply_adds;
    }
    return total;
}

namespace
{
std::string node_name(const node_info& n)
{
    return n.label.empty() ? n.op : n.label + " = " + n.op;
}

std::string input_list(const node_info& n)
{
    std::string s;
    for (auto i : n.inputs)
    {
        s += (s.empty() ? "%" : ", %") + std::to_string(i);
    }
    return s;
}
}  // namespace

template <class T>
std::string tape<T>::trace() const
{
    std::ostringstream out;
    for (const auto& n : nodes())
    {
        std::ostringstream line;
        const std::string id = "%" + std::to_string(n.index);
        line << id << std::string(id.size() < 5 ? 5 - id.size() : 1, ' ') << node_name(n);
        if (!n.inputs.empty())
        {
            line << "(" << input_list(n) << ")";
        }
        std::string text = line.str();
        text.resize(std::max<std::size_t>(text.size() + 1, 40), ' ');
        out << text << shape_str(n.shape);
        if (n.multiply_adds)
        {
            out << "  [" << n.multiply_adds << " multiply-adds]";
        }
        out << (n.saved_for_backward ? "  saved" : "") << "\n";
    }
    return out.str();
}

template <class T>
std::string tape<T>::to_dot() const
{
    std::ostringstream out;
    out << "digraph xgrad {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n";
    for (const auto& n : nodes())
    {
        const bool leaf = n.inputs.empty();
        out << "  n" << n.index << " [label=\"%" << n.index << " " << node_name(n) << "\\n" << shape_str(n.shape)
            << "\"" << (leaf ? ", style=filled, fillcolor=\"#dbe9f6\"" : "")
            << (n.saved_for_backward ? ", penwidth=2" : "") << "];\n";
        for (auto i : n.inputs)
        {
            out << "  n" << i << " -> n" << n.index << ";\n";
        }
    }
    out << "}\n";
    return out.str();
}

template class parameter<float>;
template class parameter<double>;
template class var<float>;
template class var<double>;
template class backward_context<float>;
template class backward_context<double>;
template class tape<float>;
template class tape<double>;
template var<float> constant_like(const var<float>&, array<float>, std::string);
template var<double> constant_like(const var<double>&, array<double>, std::string);
template array<float> sum_to(array<float>&&, const shape_t&);
template array<double> sum_to(array<double>&&, const shape_t&);
template struct detail::tape_state<float>;
template struct detail::tape_state<double>;
template void detail::check_forward_anomaly(detail::tape_state<float>&);
template void detail::check_forward_anomaly(detail::tape_state<double>&);
}  // namespace xgrad
