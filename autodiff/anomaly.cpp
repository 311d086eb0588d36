// Anomaly mode's checks and its report (autodiff/anomaly.hpp): which node went non-finite first, where,
// and the forward trace that led to it.
#include "autodiff/anomaly.hpp"

#include <algorithm>
#include <cmath>
#include <xtensor/xnoalias.hpp>

#include "autodiff/record.hpp"

namespace xgrad
{
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
}  // namespace

namespace detail::anomaly
{
template <class T>
void check_forward(tape_state<T>& state)
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

// Everything node n's backward rule reads is finite: its incoming gradient, its value and its inputs'.
template <class T>
bool rule_reads_finite(tape_state<T>& state, node<T>& n)
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

template <class T>
bool is_finite(const array<T>& a)
{
    return first_non_finite(a) == all_finite;
}

template <class T>
void throw_backward(const tape_state<T>& state, std::uint32_t index, std::size_t k, const array<T>& g, bool in_sum)
{
    const auto& n = *state.nodes[index];
    const std::size_t bad = first_non_finite(g);
    const shape_t shape = to_shape(g.shape());
    const std::string where = number_str(static_cast<double>(g.data()[bad])) + " at index " +
                              index_str(bad, shape) + " of the gradient " + shape_str(shape) + " for input " +
                              std::to_string(k) + " (%" + std::to_string(n.inputs[k]) + ")";
    throw make_anomaly(state, index, true, g, bad,
                       "anomaly in backward: " + node_str(state, index) +
                           (in_sum ? " gave a finite gradient, but adding it to the one already there gave "
                                   : " gave ") +
                           where + ", from a finite incoming gradient " + shape_str(to_shape(n.value().shape())) +
                           " and finite values " + input_shapes(state, n));
}

template <class T>
void check_sent(const tape_state<T>& state, std::uint32_t index, std::size_t k, const array<T>& g)
{
    if (!is_finite(g))
    {
        throw_backward(state, index, k, g, false);
    }
}

template <class T>
void add_checked(const tape_state<T>& state, std::uint32_t index, std::size_t k, array<T>& sum,
                 const array<T>& g)
{
    const bool sum_was_finite = is_finite(sum);
    xt::noalias(sum) += g;
    if (sum_was_finite && !is_finite(sum))
    {
        throw_backward(state, index, k, sum, true);
    }
}

#define XGRAD_ANOMALY(T)                                                                               \
    template void check_forward(tape_state<T>&);                                                       \
    template bool rule_reads_finite(tape_state<T>&, node<T>&);                                         \
    template void check_sent(const tape_state<T>&, std::uint32_t, std::size_t, const array<T>&);        \
    template void add_checked(const tape_state<T>&, std::uint32_t, std::size_t, array<T>&, const array<T>&);
XGRAD_ANOMALY(float)
XGRAD_ANOMALY(double)
#undef XGRAD_ANOMALY
}  // namespace detail::anomaly
}  // namespace xgrad
