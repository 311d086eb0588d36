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

#include "autodiff/anomaly.hpp"
#include "autodiff/parameter.hpp"
#include "autodiff/shape.hpp"
#include "autodiff/sum_to.hpp"
#include "autodiff/xtensor.hpp"

namespace xgrad
{
template <class T>
class tape;
template <class T>
class var;
template <class T>
class backward_context;
template <class T>
class graph_context;

namespace detail
{
template <class T>
struct tape_state;
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
    unsigned saves = 0;  // what this node's rule reads (saves flags, autodiff/record.hpp)
    bool value_saved = false;  // some live backward rule reads this value
    bool released = false;     // its rule was freed by a backward that did not retain the graph
    std::int8_t finite = -1;   // anomaly mode's memo: value all finite (1), not (0), not yet looked at (-1)
    std::uint64_t multiply_adds = 0;
    std::size_t rule_bytes = 0;  // what the rule itself keeps for the backward (a mask, row statistics)
    std::shared_ptr<typename parameter<T>::state> param;  // set on leaves bound to a parameter

    const array<T>& value() const { return borrowed ? *borrowed : owned; }

    virtual ~node() = default;
    virtual bool has_rule() const { return false; }
    virtual void run_rule(backward_context<T>&) {}
    // The same rule on vars, recording its computation on the tape (xgrad::grad with create_graph).
    virtual void run_graph_rule(graph_context<T>&) {}
    virtual void release_rule() {}
};

// A rule written for arrays only (its parameter is a backward_context) cannot record itself.
[[noreturn]] void throw_no_graph_rule(const char* op);

template <class T, class Rule>
struct rule_node final : node<T>
{
    explicit rule_node(Rule r) : rule(std::move(r)) {}
    std::optional<Rule> rule;
    bool has_rule() const override { return rule.has_value(); }
    void run_rule(backward_context<T>& ctx) override { (*rule)(ctx); }
    void run_graph_rule(graph_context<T>& ctx) override
    {
        if constexpr (std::is_invocable_v<Rule&, graph_context<T>&>)
        {
            (*rule)(ctx);
        }
        else
        {
            throw_no_graph_rule(this->op);
        }
    }
    void release_rule() override
    {
        rule.reset();
        this->rule_bytes = 0;
    }
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

// How ops record themselves (autodiff/record.hpp); declared here because var befriends it.
template <class T, class Rule, class Inputs>
var<T> record_range(const char* op, const Inputs& inputs, array<T>&& value, unsigned saved, Rule&& rule,
                    std::uint64_t multiply_adds, std::size_t rule_bytes);

[[noreturn]] void throw_stale(std::uint32_t index);

// A handle to node `index` of a tape (the backward's graph rules read their inputs as vars).
template <class T>
var<T> handle(const std::shared_ptr<tape_state<T>>& state, std::uint32_t index);

// The reverse walk on arrays from `root`, whose gradient is already set. Unless retain_graph it frees
// the rules it ran and the interior gradients (except those of `keep`); with to_parameters, the
// gradients of parameter leaves are added into the parameters.
struct walk_options
{
    bool retain_graph = false;
    bool to_parameters = true;
    const std::vector<std::uint32_t>* keep = nullptr;
};
template <class T>
void walk(tape_state<T>& state, std::uint32_t root, const walk_options& options);

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
    friend var<U> detail::record_range(const char*, const Inputs&, array<U>&&, unsigned, R&&, std::uint64_t,
                                       std::size_t);
    template <class U>
    friend var<U> constant_like(const var<U>&, array<U>, std::string);
    template <class U>
    friend var<U> detail::handle(const std::shared_ptr<detail::tape_state<U>>&, std::uint32_t);
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
    // Bytes of the values the tape owns that a backward rule will read, and of what live rules keep
    // themselves (a fused GELU's slopes, a dropout mask, a norm's row statistics, embedding's ids); with
    // include_leaves = false, only the intermediate results (what an autograd engine allocates in the
    // forward pass and keeps).
    std::size_t bytes_saved_for_backward(bool include_leaves = true) const;
    std::size_t bytes_held() const;                // every value and gradient the tape owns, and the rules' own
    std::uint64_t multiply_adds() const;           // sum over recorded ops (matmul counts M*N*K)
    std::string trace() const;                     // one line per node: index, op, label, inputs, shape
    std::string to_dot() const;                    // Graphviz DOT of the graph

private:
    var<T> leaf(const char* op, array<T>&& value, std::string label, bool requires_grad);
    std::shared_ptr<detail::tape_state<T>> state_;
};


template <class T>
var<T> detail::handle(const std::shared_ptr<detail::tape_state<T>>& state, std::uint32_t index)
{
    return var<T>(state, index, state->generation);
}

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
}  // namespace xgrad
