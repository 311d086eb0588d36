// Anomaly mode (tape::detect_anomaly): the first op whose forward value, or whose backward rule's
// gradient, holds NaN or +-inf although everything it read was finite throws anomaly_error naming the
// node and the forward trace that led to it. The tape calls the hooks below at four moments and knows
// nothing else of the check: when an op is recorded, when a value is read or named, before a rule runs,
// and when a rule sends a gradient. A NaN that was already in an input only propagates: not an anomaly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "autodiff/xtensor.hpp"

namespace xgrad
{
// what() is the summary line and then the forward trace: the node and the chain of nodes that fed it,
// oldest first.
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

namespace detail
{
template <class T>
struct tape_state;
template <class T>
struct node;

// The hooks the tape calls while anomaly mode is on (tape_state::detect_anomaly).
namespace anomaly
{
// Forward check of the node state.unchecked (afterwards none is): throws anomaly_error if its value is
// not all finite while its inputs are. The tape defers it until the node has its label (it is named,
// read, used by the next op, or backward starts), so the report can name it.
template <class T>
void check_forward(tape_state<T>& state);

// Before node n's rule runs: whether everything the rule reads (incoming gradient, value, inputs) is
// finite, so that a non-finite gradient it sends is its own anomaly.
template <class T>
bool rule_reads_finite(tape_state<T>& state, node<T>& n);

// When node `index`'s rule (which read only finite values) sends gradient g to input k: throws if g is
// not all finite.
template <class T>
void check_sent(const tape_state<T>& state, std::uint32_t index, std::size_t k, const array<T>& g);
// sum += g for a reused input, throwing if a finite sum and a finite g add up to a non-finite one.
template <class T>
void add_checked(const tape_state<T>& state, std::uint32_t index, std::size_t k, array<T>& sum,
                 const array<T>& g);
}  // namespace anomaly
}  // namespace detail
}  // namespace xgrad
