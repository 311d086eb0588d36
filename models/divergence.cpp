#include "models/divergence.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "autodiff/compare.hpp"
#include "autodiff/instantiate.hpp"

namespace xgrad::models
{
namespace
{
// Fills max_abs, max_rel and diverges of a row whose gradient is present on both sides.
template <class T>
void compare(gradient_comparison& row, const array<T>& reference, const array<T>& candidate,
             const divergence_tolerance& tolerance)
{
    constexpr double infinity = std::numeric_limits<double>::infinity();
    row.reference_shape = to_shape(reference.shape());
    row.candidate_shape = to_shape(candidate.shape());
    if (row.reference_shape != row.candidate_shape)
    {
        row.max_abs = row.max_rel = infinity;
        row.diverges = true;
        return;
    }
    const difference d = xgrad::compare(reference, candidate);  // autodiff/compare.hpp
    row.reference_all_zero = std::all_of(reference.begin(), reference.end(), [](T v) { return v == T(0); });
    row.max_abs = d.max_abs;
    row.max_rel = d.max_rel;
    row.diverges = !d.within(tolerance.atol, tolerance.rtol);
}

std::string scientific(double v)
{
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.1e", v);
    return buffer;
}

std::string tolerance_str(const divergence_tolerance& t)
{
    return "tolerance: max abs <= " + scientific(t.atol) + " + " + scientific(t.rtol) + " x largest |entry|";
}
}  // namespace

template <class T>
divergence_report first_divergence(const named_gradients<T>& reference, const named_gradients<T>& candidate,
                                   const divergence_tolerance& tolerance)
{
    divergence_report report;
    report.tolerance = tolerance;
    std::map<std::string, const array<T>*> candidates;
    for (const auto& [name, grad] : candidate)
    {
        candidates.emplace(name, &grad);
    }
    std::map<std::string, bool> seen;
    for (const auto& [name, grad] : reference)
    {
        gradient_comparison& row = report.rows.emplace_back();
        row.name = name;
        seen[name] = true;
        const auto found = candidates.find(name);
        if (found == candidates.end())
        {
            row.reference_shape = to_shape(grad.shape());
            row.in_candidate = false;
            row.diverges = true;
            continue;
        }
        compare(row, grad, *found->second, tolerance);
    }
    for (const auto& [name, grad] : candidate)
    {
        if (!seen.count(name))
        {
            gradient_comparison& row = report.rows.emplace_back();
            row.name = name;
            row.candidate_shape = to_shape(grad.shape());
            row.in_reference = false;
            row.diverges = true;
        }
    }
    for (std::size_t k = 0; k < report.rows.size(); ++k)
    {
        if (report.rows[k].diverges)
        {
            report.first = k;
            break;
        }
    }
    return report;
}

std::string divergence_report::summary() const
{
    if (!first)
    {
        return "no divergence: all " + std::to_string(rows.size()) + " gradients agree, " + reference_label +
               " vs " + candidate_label + " (" + tolerance_str(tolerance) + ")";
    }
    const gradient_comparison& row = rows[*first];
    std::string line = "first divergence: d " + row.name + " ";
    if (!row.in_candidate || !row.in_reference)
    {
        line += "is missing from the " + (row.in_candidate ? reference_label : candidate_label) + " gradients";
    }
    else if (row.reference_shape != row.candidate_shape)
    {
        line += "has shape " + shape_str(row.candidate_shape) + " in " + candidate_label + " but " +
                shape_str(row.reference_shape) + " in " + reference_label;
    }
    else
    {
        line += shape_str(row.reference_shape) + ": max abs " + scientific(row.max_abs) + ", max rel " +
                scientific(row.max_rel) + " (" + tolerance_str(tolerance) + ")";
        if (row.reference_all_zero)
        {
            line += "\n  d " + row.name + " is all zeros in " + reference_label +
                    ": if that is a tape, was its backward run with retain_graph = true?";
        }
    }
    line += "\n  every gradient before it in backward order agrees, so the mistake is in the backward step that "
            "produced d " + row.name + "; everything after it in backward order is downstream";
    return line;
}

std::string divergence_report::table() const
{
    std::size_t name_width = 4, shape_width = 5;
    for (const auto& row : rows)
    {
        name_width = std::max(name_width, row.name.size() + 2);
        shape_width = std::max(shape_width, shape_str(row.reference_shape).size());
    }
    auto cell = [](std::string s, std::size_t w) { return s.size() < w ? s + std::string(w - s.size(), ' ') : s; };
    std::string out = "  " + cell("d of", name_width) + " " + cell("shape", shape_width) + "    max abs    max rel\n";
    for (std::size_t k = 0; k < rows.size(); ++k)
    {
        const gradient_comparison& row = rows[k];
        out += "  " + cell("d " + row.name, name_width) + " " +
               cell(shape_str(row.in_reference ? row.reference_shape : row.candidate_shape), shape_width);
        if (!row.in_reference || !row.in_candidate)
        {
            out += "    missing from " + (row.in_reference ? candidate_label : reference_label);
        }
        else
        {
            char numbers[48];
            std::snprintf(numbers, sizeof numbers, " %10.2e %10.2e", row.max_abs, row.max_rel);
            out += numbers;
        }
        out += first && *first == k ? "   <- first divergence" : row.diverges ? "   x" : "";
        out += "\n";
    }
    return out;
}

std::string divergence_report::to_string() const
{
    return summary() + "\n\n" + table();
}

// ---- the GPT --------------------------------------------------------------------------------------

template <class T>
named_gradients<T> tape_gradients(const gpt_result<T>& taped, const gpt_parameters<T>& params)
{
    std::map<std::string, const var<T>*> activations;
    for (const auto& [name, v] : taped.activations)
    {
        activations.emplace(name, &v);
    }
    std::map<std::string, parameter<T>> parameters;
    for (const auto& [name, p] : manual::named_parameters(params))
    {
        parameters.emplace(name, p);
    }
    named_gradients<T> list;
    for (const std::string& name : manual::gpt_backward_order(params.config))
    {
        if (const auto a = activations.find(name); a != activations.end())
        {
            list.emplace_back(name, a->second->grad());
        }
        else if (const auto p = parameters.find(name); p != parameters.end())
        {
            list.emplace_back(name, p->second.grad());
        }
    }
    return list;
}

template <class T>
divergence_report first_divergence(const gpt_result<T>& taped, const gpt_parameters<T>& params,
                                   const manual::gpt_gradients<T>& manual, const divergence_tolerance& tolerance)
{
    return first_divergence(tape_gradients(taped, params), manual.in_backward_order, tolerance);
}

#define XGRAD_DIVERGENCE(T)                                                                                     \
    template divergence_report first_divergence(const named_gradients<T>&, const named_gradients<T>&,          \
                                                const divergence_tolerance&);                                   \
    template named_gradients<T> tape_gradients(const gpt_result<T>&, const gpt_parameters<T>&);                \
    template divergence_report first_divergence(const gpt_result<T>&, const gpt_parameters<T>&,                \
                                                const manual::gpt_gradients<T>&, const divergence_tolerance&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_DIVERGENCE)
}  // namespace xgrad::models
