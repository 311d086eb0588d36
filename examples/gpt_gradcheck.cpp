// Gradients of a whole GPT three ways, for any architecture variant, and how to find a mistake in a
// hand-derived backward.
//
// A seeded GPT in float64 (by default V = 11, block 8, L = 2, d = 16, H = 4; B = 2 sequences of T = 6
// tokens, a few targets -1) of the variant the flags choose (docs/spec.md, "Architecture variants"). For
// every parameter, the largest differences between the tape's gradient (models/gpt.hpp), the hand-derived
// one (models/gpt_manual.hpp) and central finite differences of the loss, taken on every entry. Then the
// first-divergence report (models/divergence.hpp): every named activation and parameter in backward order,
// tape against manual.
//
// With --break RULE the hand-derived backward makes one deliberate mistake (models/manual_faults.hpp, set
// through gpt_backward's fault hook), and the report points at the first gradient it corrupts.
//
//   gpt_gradcheck                                         the default model (GPT-2 layout, tied head)
//   gpt_gradcheck --norm rmsnorm --position rope --mlp swiglu --bias none --untied-head   the Llama block
//   gpt_gradcheck --position rope --break rope            find a deliberate mistake
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "autodiff/compare.hpp"
#include "autodiff/gradcheck.hpp"
#include "examples/command_line.hpp"
#include "examples/random_ids.hpp"
#include "models/divergence.hpp"
#include "models/manual_faults.hpp"

using namespace xgrad;
using namespace xgrad::models;
using xgrad::examples::random_ids;

namespace
{
std::string rule_list()
{
    std::string list;
    for (manual::broken_rule rule : manual::breakable_rules())
    {
        list += (list.empty() ? "" : ", ") + std::string(manual::to_string(rule));
    }
    return list;
}

// Seeded values for every parameter: matrices N(0, 1 / rows), so that every layer's output has about unit
// size; norm weights 1 + N(0, 0.1) and every other vector N(0, 0.1). Not GPT-2's initialisation
// (gpt_parameters::init): its N(0, 0.02) weights make every attention score nearly 0 and the softmax
// nearly uniform, so that W_Q's and W_K's gradients are ~1e-6 and finite differences' ~1e-10 noise
// reads as a 1e-4 relative error; and its zero biases and unit norm weights can hide a missing term.
void randomise(gpt_parameters<double>& params, unsigned seed)
{
    std::mt19937 rng(seed);
    for (auto& [name, p] : manual::named_parameters(params))
    {
        const bool matrix = p.value().dimension() == 2;
        const bool norm_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
        std::normal_distribution<double> normal(norm_weight ? 1.0 : 0.0,
                                                matrix ? 1.0 / std::sqrt(double(p.value().shape()[0])) : 0.1);
        for (double& v : p.value())
        {
            v = normal(rng);
        }
    }
}

// The command line: the model's sizes, its variant (the trainer's flag names) and the rule to break.
struct options
{
    gpt_config config{/*V=*/11, /*block_size=*/8, /*L=*/2, /*d=*/16, /*H=*/4};
    std::string broken = "none";
};
}  // namespace

int main(int argc, char** argv)
{
    options o;
    examples::command_line cli{"A whole GPT's gradients three ways (tape, manual, finite differences), and the "
                               "first-divergence report, for any architecture variant",
                               "gpt_gradcheck"};
    cli.add_model_flags(o.config);
    // Small enough for finite differences of every parameter.
    cli.get_option("--layers").range(1, 8);
    cli.get_option("--d-model").range(1, 64);
    cli.get_option("--heads").range(1, 64);
    cli.get_option("--block").range(1, 16);
    cli.add_option("--break", o.broken, "make one deliberate mistake in the manual backward: " + rule_list());
    gpt_config config;
    manual::broken_rule broken = manual::broken_rule::none;
    if (const auto status = cli.parse(argc, argv))
    {
        return *status;
    }
    try
    {
        config = o.config;
        config.validate("gpt_gradcheck");
        const auto rule = manual::broken_rule_from_string(o.broken);
        if (!rule)
        {
            throw std::invalid_argument("--break: unknown rule '" + o.broken + "'; valid rules: " + rule_list());
        }
        if (const auto why = manual::not_used_by(*rule, config))
        {
            throw std::invalid_argument("--break " + o.broken + ": this variant does not use the rule (" + *why + ")");
        }
        broken = *rule;
    }
    catch (const std::exception& e)
    {
        std::fprintf(stderr, "gpt_gradcheck: %s\n", e.what());
        return 2;
    }

    // ---- the model and a batch ---------------------------------------------------------------------
    const std::size_t B = 2, T = 6;
    gpt_parameters<double> params = gpt_parameters<double>::init(config, /*seed=*/2024);  // shapes and names
    randomise(params, 7);
    std::mt19937 rng(11);
    const ids_t tokens = random_ids(B, T, config.vocab_size, rng);
    ids_t targets = random_ids(B, T, config.vocab_size, rng);
    targets(0, 2) = targets(1, 5) = -1;  // ignored positions

    std::printf("xgrad: a whole GPT's gradients three ways\n");
    std::printf("V = %zu, block_size = %zu, L = %zu layers, d = %zu, H = %zu heads, G = %zu; B = %zu, T = %zu; "
                "targets (0, 2) and (1, 5) are -1; float64\n",
                config.vocab_size, config.block_size, config.layers, config.d_model, config.heads,
                config.kv_head_count(), B, T);
    std::printf("variant: %s\n", variant_line(config).c_str());
    if (broken != manual::broken_rule::none)
    {
        std::printf("broken on purpose (--break %s): %s\n", manual::to_string(broken),
                    manual::describe(broken, config.layers).c_str());
    }

    // ---- the tape: keep every node's gradient (retain_graph) for the report -------------------------
    tape<double> t;
    const gpt_result<double> taped = gpt_forward(t, params, tokens, &targets);
    params.zero_grad();
    t.backward(taped.loss, /*retain_graph=*/true);

    // ---- by hand -----------------------------------------------------------------------------------
    const manual::gpt_forward_result<double> forward = manual::gpt_forward(params, tokens, &targets);
    // the fault hook swaps the broken rule (if any) into the backward's table, at its one site
    const manual::fault_hook<double> hook = manual::break_rule<double>(broken, config);
    const manual::gpt_gradients<double> by_hand = manual::gpt_backward(forward.cache, hook);
    std::printf("\nloss: tape %.15f, manual %.15f\n", taped.loss.value()(), forward.loss);

    // ---- three ways, parameter by parameter ---------------------------------------------------------
    std::printf("\n== Gradient check: every parameter, central differences (eps = 1e-6) on every entry ==\n\n");
    auto loss = [&] { return manual::gpt_forward(params, tokens, &targets).loss; };
    std::printf("  %-20s %-8s | %-21s | %-21s | %-21s\n", "parameter", "shape", "tape vs manual",
                "tape vs finite diff", "manual vs finite diff");
    std::printf("  %-20s %-8s | %10s %10s | %10s %10s | %10s %10s\n", "", "", "max abs", "max rel", "max abs",
                "max rel", "max abs", "max rel");
    const auto start = std::chrono::steady_clock::now();
    std::size_t entries = 0;
    for (auto& [name, p] : manual::named_parameters(params))
    {
        const array<double> numeric = numeric_gradient(loss, p.value());
        entries += numeric.size();
        const auto tm = compare(p.grad(), by_hand.of(name));
        const auto tn = compare(p.grad(), numeric);
        const auto mn = compare(by_hand.of(name), numeric);
        std::printf("  %-20s %-8s | %10.2e %10.2e | %10.2e %10.2e | %10.2e %10.2e\n", name.c_str(),
                    shape_str(to_shape(p.value().shape())).c_str(), tm.max_abs, tm.max_rel, tn.max_abs, tn.max_rel,
                    mn.max_abs, mn.max_rel);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("\n  %zu entries, %zu forward passes in %.1f s. max rel = max abs / the largest |entry| of the two.\n",
                entries, 2 * entries, seconds);

    // ---- where the manual backward first goes wrong ------------------------------------------------
    std::printf("\n== First-divergence report: tape vs manual, in backward order ==\n\n");
    const divergence_report report = first_divergence(taped, params, by_hand);
    std::printf("%s\n", broken == manual::broken_rule::none && !report.diverged() ? report.summary().c_str()
                                                                                    : report.to_string().c_str());
    // A divergence nobody asked for is a bug in one of the two backward passes; a break nobody finds is a
    // bug in the report.
    return report.diverged() == (broken != manual::broken_rule::none) ? 0 : 1;
}
