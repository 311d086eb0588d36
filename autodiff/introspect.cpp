// What a tape can tell about itself: its nodes, the bytes it holds and saves for backward, the
// multiply-adds it recorded, a one-line-per-node trace and a Graphviz DOT export.
#include <algorithm>
#include <sstream>

#include "autodiff/tape.hpp"

namespace xgrad
{
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
        bytes += n->rule_bytes;
    }
    return bytes;
}

template <class T>
std::size_t tape<T>::bytes_held() const
{
    std::size_t bytes = 0;
    for (const auto& n : state_->nodes)
    {
        bytes += (n->owned.size() + (n->has_grad ? n->grad.size() : 0)) * sizeof(T) + n->rule_bytes;
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

// `text` as the inside of a DOT string: a quote and a backslash escaped, so that a label cannot end the
// string or start an escape of DOT's own (\n, \l, \N); a control byte as the visible text \xNN.
std::string dot_escaped(const std::string& text)
{
    static const char hex[] = "0123456789abcdef";
    std::string out;
    for (const char ch : text)
    {
        const auto c = static_cast<unsigned char>(ch);
        if (ch == '"' || ch == '\\')
        {
            out += '\\';
            out += ch;
        }
        else if (c < 0x20 || c == 0x7f)
        {
            out += "\\\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        }
        else
        {
            out += ch;
        }
    }
    return out;
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
        out << "  n" << n.index << " [label=\"%" << n.index << " " << dot_escaped(node_name(n)) << "\\n"
            << shape_str(n.shape) << "\"" << (leaf ? ", style=filled, fillcolor=\"#dbe9f6\"" : "")
            << (n.saved_for_backward ? ", penwidth=2" : "") << "];\n";
        for (auto i : n.inputs)
        {
            out << "  n" << i << " -> n" << n.index << ";\n";
        }
    }
    out << "}\n";
    return out.str();
}

#define XGRAD_INTROSPECT(T)                                                      \
    template std::vector<node_info> tape<T>::nodes() const;                       \
    template std::size_t tape<T>::bytes_saved_for_backward(bool) const;           \
    template std::size_t tape<T>::bytes_held() const;                             \
    template std::uint64_t tape<T>::multiply_adds() const;                        \
    template std::string tape<T>::trace() const;                                  \
    template std::string tape<T>::to_dot() const;
XGRAD_INTROSPECT(float)
XGRAD_INTROSPECT(double)
#undef XGRAD_INTROSPECT
}  // namespace xgrad
