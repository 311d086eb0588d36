// What an op author uses to record an op on the tape: the saves flags, record(), and the contexts a
// rule receives. ops/softmax.cpp shows the pattern: check the arguments, run the kernel, record the
// value with a rule that reads only what it declared.
//
// The rule form. A rule is written once, beside its forward, in one of three ways:
//   1. a generic lambda, `[](auto& ctx) { ctx.accumulate(0, ctx.grad() * ctx.output()); }`, computing
//      with operators and autodiff/rule_math.hpp only: it runs on arrays (backward_context) in every
//      backward, and on vars (graph_context) when a backward records itself (xgrad::grad with
//      create_graph), so its gradient can be differentiated again;
//   2. a fused op's kernel rule on arrays with its composed twin, `detail::with_twin<T>(rule, twin)`:
//      a backward that records itself differentiates the twin (the op again from primitives);
//   3. a kernel rule on arrays beside the same math on vars, `detail::with_var_form<T>(rule, on_vars)`,
//      for ops that have no composed twin (sum, permute, slice, embedding); a rule object may also define
//      both operator()s itself, as matmul's does;
//   4. a rule on arrays only, `[](backward_context<T>& ctx) { ... }`: first order only; a backward that
//      records itself stops at it with an error naming the op.
#pragma once

#include <initializer_list>
#include <utility>
#include <vector>

#include "autodiff/evaluate.hpp"
#include "autodiff/tape.hpp"

namespace xgrad
{
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

namespace detail
{
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
}  // namespace detail

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
    // The saved values. A rule reads only what it declared when it was recorded (its `saves` flags:
    // they decide what the tape keeps and counts as saved for backward); reading more is a logic_error.
    const array<T>& output() const { return saved(saves_output, node_).value(); }
    const array<T>& input(std::size_t k) const { return saved(saves_input(k), input_node(k)).value(); }
    bool needs_grad(std::size_t k) const { return input_node(k).requires_grad; }
    // Adds g into input k's gradient, first summing away any broadcasting (sum_to). An xtensor expression
    // is evaluated into an array first (autodiff/evaluate.hpp).
    void accumulate(std::size_t k, array<T>&& g);
    template <class E>
    void accumulate(std::size_t k, const xt::xexpression<E>& g)
    {
        accumulate(k, evaluate(g));
    }

private:
    detail::node<T>& input_node(std::size_t k) const { return *state_.nodes[node_.inputs[k]]; }
    const detail::node<T>& saved(unsigned flag, const detail::node<T>& n) const
    {
        if (!(node_.saves & flag))
        {
            throw_undeclared_read(flag);
        }
        return n;
    }
    [[noreturn]] void throw_undeclared_read(unsigned flag) const;
    detail::tape_state<T>& state_;
    detail::node<T>& node_;
    std::uint32_t index_;
    bool disposable_;
    bool check_finite_;  // anomaly mode, and everything this rule reads is finite
};

// What the same rule sees when a backward records itself (xgrad::grad with create_graph,
// autodiff/grad.hpp): the incoming gradient, the saved values and the gradients sent are vars on the
// tape, so that whatever the rule computes from them is recorded and can be differentiated again.
// A rule written as a generic lambda, `[](auto& ctx) { ... }`, runs on arrays (backward_context) in an
// ordinary backward and on vars (graph_context) when a graph is created.
template <class T>
class graph_context
{
public:
    graph_context(const std::shared_ptr<detail::tape_state<T>>& s, std::uint32_t index, std::vector<var<T>>& grads)
        : state_(s), node_(*s->nodes[index]), index_(index), grads_(grads)
    {
    }
    var<T> grad() const { return grads_[index_]; }
    var<T> take_grad() const { return grads_[index_]; }
    var<T> output() const
    {
        require(saves_output);
        return detail::handle(state_, index_);
    }
    var<T> input(std::size_t k) const
    {
        require(saves_input(k));
        return detail::handle(state_, node_.inputs[k]);
    }
    bool needs_grad(std::size_t k) const { return state_->nodes[node_.inputs[k]]->requires_grad; }
    // Adds g into input k's gradient (a sum of vars), first summing away any broadcasting.
    void accumulate(std::size_t k, const var<T>& g);
    // A fused op's graph rule (detail::with_twin): `twin` computes the op again from primitives on the
    // op's inputs; its graph is differentiated, recording itself, with this node's gradient as seed.
    template <class Twin>
    void differentiate_twin(const Twin& twin)
    {
        std::vector<var<T>> inputs;
        for (std::size_t k = 0; k < node_.input_count; ++k)
        {
            inputs.push_back(detail::handle(state_, node_.inputs[k]));
        }
        accumulate_twin(inputs, twin(inputs));
    }

private:
    void require(unsigned flag) const;
    void accumulate_twin(const std::vector<var<T>>& inputs, const var<T>& twin_output);
    std::shared_ptr<detail::tape_state<T>> state_;
    detail::node<T>& node_;
    std::uint32_t index_;
    std::vector<var<T>>& grads_;
};

namespace detail
{
// A fused op's rule in two forms: `on_arrays`, its fast rule on arrays (a kernel, say), and `twin`, a
// function of the op's input vars that computes the same op from primitives (ops/composed.hpp). A
// backward that records itself differentiates the twin instead of running on_arrays.
template <class T, class OnArrays, class Twin>
struct twin_rule
{
    OnArrays on_arrays;
    Twin twin;
    void operator()(backward_context<T>& ctx) { on_arrays(ctx); }
    void operator()(graph_context<T>& ctx) { ctx.differentiate_twin(twin); }
};

template <class T, class OnArrays, class Twin>
twin_rule<T, OnArrays, Twin> with_twin(OnArrays on_arrays, Twin twin)
{
    return {std::move(on_arrays), std::move(twin)};
}

// A rule whose fast form on arrays is a kernel, beside the same math written with ops on vars: the two
// forms of one rule, side by side (sum's broadcast, permute's inverse, embedding's scatter-add).
template <class T, class OnArrays, class OnVars>
struct two_form_rule
{
    OnArrays on_arrays;
    OnVars on_vars;
    void operator()(backward_context<T>& ctx) { on_arrays(ctx); }
    void operator()(graph_context<T>& ctx) { on_vars(ctx); }
};

template <class T, class OnArrays, class OnVars>
two_form_rule<T, OnArrays, OnVars> with_var_form(OnArrays on_arrays, OnVars on_vars)
{
    return {std::move(on_arrays), std::move(on_vars)};
}

// Some input wants a gradient and the tape is not under no_grad: the one test of whether an op records
// its backward rule (record_range) or only its value. Inputs on one tape, non-empty.
template <class T, class Inputs>
bool rule_will_be_recorded(const Inputs& inputs)
{
    bool wants_grad = false;
    for (const var<T>& in : inputs)
    {
        wants_grad = wants_grad || in.node().requires_grad;  // node() also rejects stale handles
    }
    return wants_grad && inputs.begin()->state()->no_grad_depth == 0;
}

template <class T, class Rule, class Inputs>
var<T> record_range(const char* op, const Inputs& inputs, array<T>&& value, unsigned saved, Rule&& rule,
                    std::uint64_t multiply_adds, std::size_t rule_bytes)
{
    if (inputs.size() == 0 || inputs.size() > max_inputs)
    {
        fail(op, "an op takes 1 to " + std::to_string(max_inputs) + " inputs, got " + std::to_string(inputs.size()));
    }
    const auto& state = inputs.begin()->state_;
    for (const var<T>& in : inputs)
    {
        if (in.state_ != state)
        {
            fail(op, "inputs were recorded on different tapes");
        }
    }
    const bool wants_grad = rule_will_be_recorded<T>(inputs);

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
        n->rule_bytes = rule_bytes;
        mark_saved(*state, *n);
    }
    const auto index = static_cast<std::uint32_t>(state->nodes.size());
    state->nodes.push_back(std::move(n));
    if (state->detect_anomaly)
    {
        if (state->unchecked != tape_state<T>::no_node)
        {
            anomaly::check_forward(*state);  // the op before this one, which nothing named or read
        }
        state->unchecked = index;
    }
    return var<T>(state, index, state->generation);
}
// Records one op: its inputs (1 to max_inputs, all on one tape), its value, what its rule reads (saves
// flags), the rule, the multiply-adds it did (for the tape's counting), and the bytes the rule itself
// holds for the backward (arrays it captured; counted by bytes_saved_for_backward while it lives).
template <class T, class Rule>
var<T> record(const char* op, std::initializer_list<var<T>> inputs, array<T>&& value, unsigned saved,
              Rule&& rule, std::uint64_t multiply_adds = 0, std::size_t rule_bytes = 0)
{
    return record_range<T>(op, inputs, std::move(value), saved, std::forward<Rule>(rule), multiply_adds,
                           rule_bytes);
}

template <class T, class Rule>
var<T> record(const char* op, const std::vector<var<T>>& inputs, array<T>&& value, unsigned saved, Rule&& rule,
              std::uint64_t multiply_adds = 0, std::size_t rule_bytes = 0)
{
    return record_range<T>(op, inputs, std::move(value), saved, std::forward<Rule>(rule), multiply_adds,
                           rule_bytes);
}

// Whether an op on these inputs will record a backward rule (record_range's own test): some input wants
// a gradient and the tape is not under no_grad. An op can then skip computing what only its backward
// would read.
template <class T>
bool records_backward(std::initializer_list<var<T>> inputs)
{
    return rule_will_be_recorded<T>(inputs);
}
}  // namespace detail

extern template class backward_context<float>;
extern template class backward_context<double>;
extern template class graph_context<float>;
extern template class graph_context<double>;
}  // namespace xgrad

#include "autodiff/rule_math.hpp"  // what generic rules compute with, on arrays and on vars
