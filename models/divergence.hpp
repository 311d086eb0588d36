// Where does a hand-derived backward first go wrong? Compares two lists of named gradients (a reference,
// usually the tape's, and a candidate, usually a manual backward's) in backward order, and reports the
// first name whose gradient differs beyond a tolerance, plus the whole table.
//
// Backward order is the order in which a backward pass completes the gradients (the reverse of the
// forward order for activations). Everything before the first divergence agrees, so the mistake is in the
// backward step that produced that gradient; everything after it is downstream and may differ as well.
//
//   tape<double> t;
//   auto taped = models::gpt_forward(t, params, tokens, &targets);
//   t.backward(taped.loss, /*retain_graph=*/true);                // keeps every node's gradient
//   auto f = models::manual::gpt_forward(params, tokens, &targets);
//   auto report = models::first_divergence(taped, params, models::manual::gpt_backward(f.cache));
//   std::cout << report.to_string();
#pragma once

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "models/gpt.hpp"
#include "models/gpt_manual.hpp"

namespace xgrad::models
{
// (name, gradient) pairs, in backward order.
template <class T>
using named_gradients = std::vector<std::pair<std::string, array<T>>>;

// A gradient agrees when max |reference - candidate| <= atol + rtol * (largest |entry| of either).
struct divergence_tolerance
{
    double rtol = 1e-9;
    double atol = 1e-12;
};

// Tight enough to catch a wrong rule, loose enough for rounding: rtol 1e-9, atol 1e-12 in float64;
// rtol 1e-4, atol 1e-7 in float32.
template <class T>
divergence_tolerance default_tolerance()
{
    return std::is_same_v<T, float> ? divergence_tolerance{1e-4, 1e-7} : divergence_tolerance{1e-9, 1e-12};
}

struct gradient_comparison
{
    std::string name;
    shape_t reference_shape, candidate_shape;
    bool in_reference = true, in_candidate = true;
    double max_abs = 0;    // max |reference - candidate| (infinite when the shapes differ or only one is NaN)
    double max_rel = 0;    // max_abs / largest |entry| of either (0 when both are all zeros)
    bool diverges = false;
    bool reference_all_zero = false;  // e.g. a tape whose backward did not retain the graph
};

struct divergence_report
{
    std::string reference_label = "tape", candidate_label = "manual";
    divergence_tolerance tolerance;
    std::vector<gradient_comparison> rows;  // backward order (the reference's), then names only the candidate has
    std::optional<std::size_t> first;       // index of the first divergent row

    bool diverged() const { return first.has_value(); }
    const gradient_comparison* first_divergence() const { return first ? &rows[*first] : nullptr; }
    // "first divergence: d blocks.1.res_1 (2, 6, 16): max abs 3.1e-02, max rel 4.0e-01 (tolerance ...)" and a
    // second line saying what that means; or "no divergence: ...".
    std::string summary() const;
    // One line per gradient: name, shape, max abs, max rel, and a mark on the divergent ones.
    std::string table() const;
    std::string to_string() const;  // summary, then table
};

// Walks `reference` in its order, comparing each gradient with the candidate's gradient of the same
// name. A name missing from either side diverges.
template <class T>
divergence_report first_divergence(const named_gradients<T>& reference, const named_gradients<T>& candidate,
                                   const divergence_tolerance& tolerance = default_tolerance<T>());

// ---- the GPT --------------------------------------------------------------------------------------

// The tape's gradients of the GPT in manual::gpt_backward_order, which lists the variant's own nodes too
// (mlp_gate, mlp_up, mlp_swiglu; lm_head, the attention biases): the named activations' var::grad()
// (run t.backward(loss, /*retain_graph=*/true) so that the tape keeps them) and the parameters'
// parameter::grad() (zero them before the backward: they accumulate).
template <class T>
named_gradients<T> tape_gradients(const gpt_result<T>& taped, const gpt_parameters<T>& params);

// first_divergence(tape_gradients(taped, params), manual.in_backward_order, tolerance).
template <class T>
divergence_report first_divergence(const gpt_result<T>& taped, const gpt_parameters<T>& params,
                                   const manual::gpt_gradients<T>& manual,
                                   const divergence_tolerance& tolerance = default_tolerance<T>());
}  // namespace xgrad::models
