// The reverse-mode tape: a list of nodes in creation order, walked backwards by `backward`.
//
//   xgrad::tape<double> t;
//   auto x = t.input(values);                 // a leaf that wants a gradient
//   auto w = t.param(weights);                // a parameter<T> that outlives this tape
//   auto y = ops::sum(ops::matmul(x, w));     // ops record nodes on x's tape
//   t.backward(y);                            // dL/dx in x.grad(), dL/dW added into weights.grad()
//
// A var is a cheap handle (tape + index). Every op records its forward value and a backward rule in one
// place (see ops/); the tape only stores nodes, walks them in reverse, sums gradients of reused inputs
// and undoes broadcasting with sum_to.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "autodiff/shape.hpp"
#include "autodiff/xtensor.hpp"

namespace xgrad
{
template <class T>
class tape;
template <class T>
class var;
template <class T>
class backward_context;

namespace detail
{
template <class T>
struct tape_state;
}

// Thrown in anomaly mode (tape::detect_anomaly) by the first op whose forward value, or whose backward
// rule's gradient, holds NaN or +-inf although everything it read was finite. what() is the summary line
// and then the forward trace: the node and the chain of nodes that fed it, oldest first.
struct anomaly_error : std::runtime_error
{
    anomaly_error(std::string summary_line, std::vector<std::string> trace_lines);
    // The report on one line, for a tool's stderr: the summary, then "; forward trace: " and the nodes.
    std::string one_line() const;

    std::string summary;             // one line: op, label, node, pass, shapes, the first bad element
    std::vector<std::string> trace;  // "%3 Q = matmul(%0, %1)  (2, 5, 8)", the failing node last
    std::uint32_t node = 0;          // the node whose forward or backward went non-finite
    std::string op, label;
    bool in_backward = false;
    std::size_t element = 0;  // flat (row-major) index of the first non-finite element
    double value = 0;         // that element: NaN, inf or -inf
};

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
    const array<T>& grad() const { return s_->grad; }
    array<T>& grad() { return s_->grad; }  // for gradient clipping
    const std::string& name() const { return s_->name; }
    void zero_grad();

    struct state
    {
        array<T> value;
        array<T> grad;
        std::string name;
    };

private:
    std::shared_ptr<state> s_;
    friend class tape<T>;
};

// What a saved-for-backward flag refers to when an op is recorded.
// Inputs 2 and 3 (ops such as layer_norm and attention take more than two) have flags of their own.
enum saves : unsigned
{
    saves_nothing = 0,
    saves_input0 = 1,
    saves_input1 = 2,
    saves_output = 4,
    saves_input2 = 8,
    saves_input3 = 16,
};

// The saves flag of input k (k < 4).
constexpr unsigned saves_input(std::size_t k)
{
    return k == 0 ? saves_input0 : k == 1 ? saves_input1 : k == 2 ? saves_input2 : saves_input3;
}

// Most inputs a node may have.
constexpr std::size_t max_inputs = 4;

namespace detail
{
template <class T>
struct node
{
    const char* op = "";
    std::string label;
    std::array<std::uint32_t, max_inputs> inputs{};
    std::uint8_t input_count = 0;
    array<T> owned;                     // the value, unless borrowed
    const array<T>* borrowed = nullptr;  // a parameter's value, read in place (not copied per step)
    array<T> grad;
    bool has_grad = false;
    bool requires_grad = false;
    unsigned saves = saves_nothing;  // what this node's rule reads (saves flags)
    bool value_saved = false;  // some live backward rule reads this value
    bool released = false;     // its rule was freed by a backward that did not retain the graph
    std::int8_t finite = -1;   // anomaly mode's memo: value all finite (1), not (0), not yet looked at (-1)
    std::uint64_t multiply_adds = 0;
    std::shared_ptr<typename parameter<T>::state> param;  // set on leaves bound to a parameter

    const array<T>& value() const { return borrowed ? *borrowed : owned; }

    virtual ~node() = default;
    virtual bool has_rule() const { return false; }
    virtual void run_rule(backward_context<T>&) {}
    virtual void release_rule() {}
};

template <class T, class Rule>
struct rule_node final : node<T>
{
    explicit rule_node(Rule r) : rule(std::move(r)) {}
    std::optional<Rule> rule;
    bool has_rule() const override { return rule.has_value(); }
    void run_rule(backward_context<T>& ctx) override { (*rule)(ctx); }
    void release_rule() override { rule.reset(); }
};

// Nodes live in the tape's arena; destroying one runs its destructor and leaves the memory to the arena.
struct node_deleter
{
    template <class N>
    void operator()(N* n) const
    {
        n->~N();
    }
};

template <class T>
using node_ptr = std::unique_ptr<node<T>, node_deleter>;

template <class T>
struct tape_state
{
    arena memory;  // declared before `nodes`, so it outlives them
    std::vector<node_ptr<T>> nodes;

    template <class N, class... Args>
    node_ptr<T> make_node(Args&&... args)
    {
        return node_ptr<T>(new (memory.allocate(sizeof(N), alignof(N))) N(std::forward<Args>(args)...));
    }

    std::uint64_t generation = 0;
    int no_grad_depth = 0;
    // Anomaly mode. The newest op's value is checked once it has its label: when it is named, read, used
    // by the next op, or when backward starts (`unchecked` is its index until then).
    static constexpr std::uint32_t no_node = static_cast<std::uint32_t>(-1);
    bool detect_anomaly = false;
    std::uint32_t unchecked = no_node;

    node<T>& at(std::uint32_t index, std::uint64_t generation_of_handle) const;
};

// Records one op: its inputs (1 to max_inputs, all on one tape), its value, what its rule reads, the rule.
template <class T, class Rule>
var<T> record(const char* op, std::initializer_list<var<T>> inputs, array<T>&& value, unsigned saved,
              Rule&& rule, std::uint64_t multiply_adds = 0);
template <class T, class Rule>
var<T> record(const char* op, const std::vector<var<T>>& inputs, array<T>&& value, unsigned saved, Rule&& rule,
              std::uint64_t multiply_adds = 0);

// Flags the values n's rule reads (its `saves`) as saved for backward.
template <class T>
void mark_saved(tape_state<T>& state, node<T>& n)
{
    for (std::size_t k = 0; k < n.input_count; ++k)
    {
        if (n.saves & saves_input(k))
        {
            state.nodes[n.inputs[k]]->value_saved = true;
        }
    }
    if (n.saves & saves_output)
    {
        n.value_saved = true;
    }
}

template <class T, class Rule, class Inputs>
var<T> record_range(const char* op, const Inputs& inputs, array<T>&& value, unsigned saved, Rule&& rule,
                    std::uint64_t multiply_adds);

[[noreturn]] void throw_stale(std::uint32_t index);

// Anomaly mode's forward check of the node state.unchecked (then none is): throws anomaly_error if its
// value is not all finite while its inputs are.
template <class T>
void check_forward_anomaly(tape_state<T>& state);
}  // namespace detail

// A constant leaf (no gradient) on the tape `on_same_tape` was recorded on: for functions that build a
// graph from their inputs alone and need a constant (a mask, a one-hot) beside them.
template <class T>
var<T> constant_like(const var<T>& on_same_tape, array<T> value, std::string label = "");

// A handle to one node of a tape. Cheap to copy; throws std::logic_error if used after its tape was
// cleared, so it can never read another computation's memory.
template <class T>
class var
{
public:
    var() = default;

    const array<T>& value() const;
    shape_t shape() const;
    // dL/d(this) after backward: kept for input leaves, and for every node when backward retains the
    // graph. A parameter's gradient goes to parameter::grad() instead. Zeros of the value's shape if no
    // gradient reached this node.
    const array<T>& grad() const;
    bool requires_grad() const { return node().requires_grad; }
    const char* op() const { return node().op; }
    std::uint32_t index() const { return index_; }
    bool valid() const { return state_ != nullptr; }
    // Gives the node a name shown by tape::trace and the DOT export ("Q", "scores", ...).
    const var& named(std::string label) const;
    // The value of a var holding one element (a loss, say); std::invalid_argument naming "item" otherwise.
    T item() const;

    detail::node<T>& node() const;
    const std::shared_ptr<detail::tape_state<T>>& state() const { return state_; }

private:
    var(std::shared_ptr<detail::tape_state<T>> s, std::uint32_t i, std::uint64_t g)
        : state_(std::move(s)), index_(i), generation_(g)
    {
    }
    std::shared_ptr<detail::tape_state<T>> state_;
    std::uint32_t index_ = 0;
    std::uint64_t generation_ = 0;
    friend class tape<T>;
    template <class U, class R, class Inputs>
    friend var<U> detail::record_range(const char*, const Inputs&, array<U>&&, unsigned, R&&, std::uint64_t);
    template <class U>
    friend var<U> constant_like(const var<U>&, array<U>, std::string);
};

// What a backward rule sees: the incoming gradient, the saved values, and where to send gradients.
template <class T>
class backward_context
{
public:
    backward_context(detail::tape_state<T>& s, std::uint32_t index, bool grad_is_disposable,
                     bool check_finite = false)
        : state_(s), node_(*s.nodes[index]), index_(index), disposable_(grad_is_disposable),
          check_finite_(check_finite)
    {
    }
    const array<T>& grad() const { return node_.grad; }
    // The incoming gradient for a rule to consume (call it last): moved out when the walk would free it
    // right after this rule anyway, copied when it is kept (retain_graph, or the root).
    array<T> take_grad() { return disposable_ ? std::move(node_.grad) : array<T>(node_.grad); }
    const array<T>& output() const { return node_.value(); }
    const array<T>& input(std::size_t k) const { return input_node(k).value(); }
    bool needs_grad(std::size_t k) const { return input_node(k).requires_grad; }
    // Adds g into input k's gradient, first summing away any broadcasting (sum_to).
    void accumulate(std::size_t k, array<T>&& g);

private:
    detail::node<T>& input_node(std::size_t k) const { return *state_.nodes[node_.inputs[k]]; }
    // Anomaly mode: input k's gradient g went non-finite (in the rule's own result, or in the sum).
    [[noreturn]] void throw_backward_anomaly(std::size_t k, const array<T>& g, bool in_sum) const;
    detail::tape_state<T>& state_;
    detail::node<T>& node_;
    std::uint32_t index_;
    bool disposable_;
    bool check_finite_;  // anomaly mode, and everything this rule reads is finite
};

// One line of tape::nodes(): what the shape trace and the DOT export print.
struct node_info
{
    std::uint32_t index;
    std::string op;
    std::string label;
    std::vector<std::uint32_t> inputs;
    shape_t shape;
    std::size_t value_bytes;
    bool saved_for_backward;
    std::uint64_t multiply_adds;
};

template <class T>
class tape
{
public:
    tape();
    tape(const tape&) = delete;
    tape& operator=(const tape&) = delete;

    // Leaves. `input` owns a copy of its value; `param` binds a parameter whose gradient accumulates.
    var<T> input(array<T> value, std::string label = "", bool requires_grad = true);
    var<T> constant(array<T> value, std::string label = "");
    var<T> param(const parameter<T>& p);

    // Reverse walk from `root`, which must hold one element (dL/droot = 1), or from any node with a
    // seed gradient of its shape. Unless retain_graph, the tape frees the rules and saved values it
    // used, and a second backward through them throws.
    void backward(const var<T>& root, bool retain_graph = false);
    void backward(const var<T>& root, const array<T>& seed, bool retain_graph = false);

    // Forgets every node; handles into the old graph throw from now on.
    void clear();

    // RAII: while alive, ops compute values but record no backward rules.
    class no_grad_guard
    {
    public:
        explicit no_grad_guard(tape& t) : t_(t) { ++t_.state_->no_grad_depth; }
        ~no_grad_guard() { --t_.state_->no_grad_depth; }
        no_grad_guard(const no_grad_guard&) = delete;
        no_grad_guard& operator=(const no_grad_guard&) = delete;

    private:
        tape& t_;
    };
    no_grad_guard no_grad() { return no_grad_guard(*this); }

    // Anomaly mode, off by default. When on, the first op whose forward value or backward gradient holds
    // NaN or +-inf although everything it read was finite throws xgrad::anomaly_error naming the node (op,
    // label, index, shapes, the first bad element) with the forward trace that led to it. A NaN that was
    // already in an input only propagates: not an anomaly. An op's value is checked as soon as it is
    // named, read or used, so the report carries the label .named() gives it. Costs one branch per op when
    // off; when on, each value is scanned once, and each gradient a rule sends.
    void detect_anomaly(bool on = true)
    {
        state_->detect_anomaly = on;
        state_->unchecked = detail::tape_state<T>::no_node;
    }
    bool detecting_anomaly() const { return state_->detect_anomaly; }

    // Introspection.
    std::size_t size() const { return state_->nodes.size(); }
    std::vector<node_info> nodes() const;
    // Bytes of the values the tape owns that a backward rule will read; with include_leaves = false, only
    // the intermediate results (what an autograd engine allocates in the forward pass and keeps).
    std::size_t bytes_saved_for_backward(bool include_leaves = true) const;
    std::size_t bytes_held() const;                // every value and gradient the tape owns
    std::uint64_t multiply_adds() const;           // sum over recorded ops (matmul counts M*N*K)
    std::string trace() const;                     // one line per node: index, op, label, inputs, shape
    std::string to_dot() const;                    // Graphviz DOT of the graph

private:
    var<T> leaf(const char* op, array<T>&& value, std::string label, bool requires_grad);
    void walk(std::uint32_t root, bool retain_graph);
    std::shared_ptr<detail::tape_state<T>> state_;
};

// Reduces a gradient of a broadcast result back to the shape of the operand that was broadcast:
// sums the leading axes it lacks and the axes where it has size 1. Throws if `shape` does not
// broadcast to g's shape.
template <class T>
array<T> sum_to(array<T>&& g, const shape_t& shape);

// ---- inline definitions the ops need -------------------------------------------------------------

namespace detail
{
template <class T, class Rule, class Inputs>
var<T> record_range(const char* op, const Inputs& inputs, array<T>&& value, unsigned saved, Rule&& rule,
                    std::uint64_t multiply_adds)
{
    if (inputs.size() == 0 || inputs.size() > max_inputs)
    {
        fail(op, "an op takes 1 to " + std::to_string(max_inputs) + " inputs, got " + std::to_string(inputs.size()));
    }
    const auto& state = inputs.begin()->state_;
    bool wants_grad = false;
    for (const var<T>& in : inputs)
    {
        if (in.state_ != state)
        {
            fail(op, "inputs were recorded on different tapes");
        }
        wants_grad = wants_grad || in.node().requires_grad;  // node() also rejects stale handles
    }
    wants_grad = wants_grad && state->no_grad_depth == 0;

    node_ptr<T> n = wants_grad ? state->template make_node<rule_node<T, std::decay_t<Rule>>>(std::forward<Rule>(rule))
                               : state->template make_node<node<T>>();
    n->op = op;
    n->owned = std::move(value);
    n->requires_grad = wants_grad;
    n->multiply_adds = multiply_adds;
    std::uint8_t k = 0;
    for (const var<T>& in : inputs)
    {
        n->inputs[k++] = in.index_;
    }
    n->input_count = k;
    if (wants_grad)
    {
        n->saves = saved;
        mark_saved(*state, *n);
    }
    const auto index = static_cast<std::uint32_t>(state->nodes.size());
    state->nodes.push_back(std::move(n));
    if (state->detect_anomaly)
    {
        if (state->unchecked != tape_state<T>::no_node)
        {
            check_forward_anomaly(*state);  // the op before this one, which nothing named or read
        }
        state->unchecked = index;
    }
    return var<T>(state, index, state->generation);
}
template <class T, class Rule>
var<T> record(const char* op, std::initializer_list<var<T>> inputs, array<T>&& value, unsigned saved,
              Rule&& rule, std::uint64_t multiply_adds)
{
    return record_range<T>(op, inputs, std::move(value), saved, std::forward<Rule>(rule), multiply_adds);
}

template <class T, class Rule>
var<T> record(const char* op, const std::vector<var<T>>& inputs, array<T>&& value, unsigned saved, Rule&& rule,
              std::uint64_t multiply_adds)
{
    return record_range<T>(op, inputs, std::move(value), saved, std::forward<Rule>(rule), multiply_adds);
}
}  // namespace detail

template <class T>
detail::node<T>& var<T>::node() const
{
    if (!state_)
    {
        throw std::logic_error("var: empty handle (default-constructed, never recorded)");
    }
    return state_->at(index_, generation_);
}

extern template class tape<float>;
extern template class tape<double>;
extern template class var<float>;
extern template class var<double>;
extern template class parameter<float>;
extern template class parameter<double>;
extern template class backward_context<float>;
extern template class backward_context<double>;
extern template void detail::check_forward_anomaly(detail::tape_state<float>&);
extern template void detail::check_forward_anomaly(detail::tape_state<double>&);

// Scalar arithmetic on vars, recorded as ops::scale and ops::add_scalar (ops/elementwise.cpp):
// x * 2, 2 * x, x / 2, x + 1, 1 + x, x - 1, 2 - x; -x is ops::neg (ops/ops.hpp).
namespace ops
{
template <class T> var<T> scale(const var<T>& x, T factor);
template <class T> var<T> add_scalar(const var<T>& x, T c);
template <class T> var<T> neg(const var<T>& x);
}  // namespace ops

template <class S>
using if_scalar = std::enable_if_t<std::is_arithmetic<S>::value, int>;

template <class T, class S, if_scalar<S> = 0>
var<T> operator*(const var<T>& x, S s)
{
    return ops::scale(x, static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator*(S s, const var<T>& x)
{
    return ops::scale(x, static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator/(const var<T>& x, S s)
{
    return ops::scale(x, T(1) / static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator+(const var<T>& x, S s)
{
    return ops::add_scalar(x, static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator+(S s, const var<T>& x)
{
    return ops::add_scalar(x, static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator-(const var<T>& x, S s)
{
    return ops::add_scalar(x, -static_cast<T>(s));
}
template <class T, class S, if_scalar<S> = 0>
var<T> operator-(S s, const var<T>& x)
{
    return ops::add_scalar(ops::neg(x), static_cast<T>(s));
}
}  // namespace xgrad
