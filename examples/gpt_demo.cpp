// Exercise 20.3 for the whole small GPT: the parameter and multiply-add formulas beside what the model
// and the tape actually hold and count, for one seeded configuration (docs/spec.md, "The small GPT"), and
// the same two counts for the Llama and GPT-2 layouts (docs/spec.md, "Architecture variants").
//
// Usage: gpt_demo
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>

#include "examples/command_line.hpp"
#include "examples/random_ids.hpp"
#include "models/gpt.hpp"

using namespace xgrad;
using namespace xgrad::models;
using xgrad::examples::random_ids;

namespace
{
std::string with_commas(std::uint64_t n)
{
    std::string s = std::to_string(n);
    for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
    {
        s.insert(static_cast<std::size_t>(i), ",");
    }
    return s;
}

void heading(const char* title)
{
    std::printf("\n== %s ==\n\n", title);
}

const char* equal_or_not(std::uint64_t a, std::uint64_t b)
{
    return a == b ? "(equal)" : "(DIFFERENT)";
}

// The term of gpt_multiply_adds a matmul node belongs to, told by the declaration of the parameter it
// multiplies (a parameter leaf is labelled with its name): the embedding or head is "head", a matrix of
// a block's attention "projections", one of its MLP "mlp"; a product of two activations is attention.
std::string term_of(const gpt_config& c, const std::vector<node_info>& nodes, const node_info& n)
{
    std::map<std::string, parameter_role> roles;
    for_each_gpt_parameter(c, [&](const std::string& name, const declaration& d) { roles.emplace(name, d.role); });
    for (auto input : n.inputs)
    {
        const node_info& in = nodes[input];
        const auto found = roles.find(in.label);
        if (in.op != "param" || found == roles.end())
        {
            continue;
        }
        switch (found->second)
        {
        case parameter_role::embedding:
        case parameter_role::head: return "head";
        case parameter_role::matrix:
            if (in.label.find(".attn.") != std::string::npos)
            {
                return "projections";
            }
            return "mlp";
        case parameter_role::norm_weight:
        case parameter_role::bias: break;
        }
    }
    return "attention";
}
}  // namespace

// Parameters and forward multiply-adds of three layouts: the counting functions against the declared
// tensors and the tape.
void print_variants(const gpt_config& base, std::size_t B, std::size_t T, const ids_t& tokens, const ids_t& targets)
{
    heading("Architecture variants");
    gpt_config llama = base, gpt2 = base;
    llama.norm = norm_kind::rmsnorm;
    llama.position = position_kind::rope;
    llama.mlp = mlp_kind::swiglu;
    llama.bias = bias_kind::none;
    gpt2.bias = bias_kind::all;
    gpt2.mlp = mlp_kind::gelu;
    std::printf("  %-34s %10s %10s   %14s %14s\n", "layout", "parameters", "tensors", "multiply-adds", "on the tape");
    const std::pair<const char*, gpt_config> layouts[] = {
        {"default", base}, {"Llama (rmsnorm rope swiglu none)", llama}, {"GPT-2 (bias all, exact gelu)", gpt2}};
    for (const auto& [name, c] : layouts)
    {
        const auto params = gpt_parameters<double>::init(c, 1);
        tape<double> t;
        gpt_forward(t, params, tokens, &targets);
        const std::uint64_t matmuls = t.multiply_adds();
        const std::uint64_t formula = gpt_forward_multiply_adds(c, B, T).total();
        std::printf("  %-34s %10s %10s   %14s %14s  %s\n", name, with_commas(gpt_parameter_count(c)).c_str(),
                    with_commas(parameter_scalars(params)).c_str(), with_commas(formula).c_str(),
                    with_commas(matmuls).c_str(), equal_or_not(formula, matmuls));
    }
    std::printf("\n  SwiGLU's three matrices cost 3 d h against GELU's 2 d h; at h = 4 d that is 12 d^2 per token.\n");
}

int main(int argc, char** argv)
{
    examples::command_line cli{"The GPT's parameter and multiply-add formulas beside what the tape counts", "gpt_demo"};
    if (const auto status = cli.parse(argc, argv))
    {
        return *status;
    }
    const gpt_config c{/*V=*/65, /*block_size=*/64, /*L=*/2, /*d=*/64, /*H=*/4};
    const std::size_t B = 2, T = 16;
    const unsigned seed = 1;
    const std::size_t V = c.vocab_size, S = c.block_size, L = c.layers, d = c.d_model;
    const std::size_t H = c.heads, G = c.kv_head_count(), dh = d / H;

    std::printf("xgrad: a small GPT composed from ops, counted two ways\n");
    std::printf("V = %zu, block_size = %zu, L = %zu, d = %zu, H = %zu, G = %zu (d_h = %zu); B = %zu, T = %zu; "
                "float64, seed %u\n", V, S, L, d, H, G, dh, B, T, seed);

    const auto params = gpt_parameters<double>::init(c, seed);
    std::mt19937_64 rng(seed);
    const ids_t tokens = random_ids(B, T, c.vocab_size, rng);
    const ids_t targets = random_ids(B, T, c.vocab_size, rng);
    tape<double> t;
    const gpt_result<double> r = gpt_forward(t, params, tokens, &targets);

    // ---- parameters -----------------------------------------------------------------------------------
    heading("Parameters");
    std::uint64_t sizes = 0;
    const auto named = params.named_parameters();
    for (const auto& p : named)
    {
        sizes += p.value().size();
    }
    const std::uint64_t count = gpt_parameter_count(c);
    std::printf("  V d + block_size d + L (2 d^2 + 2 d G dh + 8 d^2 + 9 d) + 2 d\n");
    std::printf("    = %s + %s + %zu (%s + %s + %s + %s) + %s = %s\n", with_commas(V * d).c_str(),
                with_commas(S * d).c_str(), L, with_commas(2 * d * d).c_str(),
                with_commas(2 * d * G * dh).c_str(), with_commas(8 * d * d).c_str(), with_commas(9 * d).c_str(),
                with_commas(2 * d).c_str(), with_commas(count).c_str());
    std::printf("  summed over named_parameters (%zu tensors, wte counted once: the head is tied) = %s  %s\n",
                named.size(), with_commas(sizes).c_str(), equal_or_not(count, sizes));

    // ---- multiply-adds --------------------------------------------------------------------------------
    heading("Forward multiply-adds (FLOPs = 2 x multiply-adds)");
    std::map<std::string, std::uint64_t> counted;
    const auto nodes = t.nodes();
    for (const auto& n : nodes)
    {
        if (n.multiply_adds)
        {
            counted[term_of(c, nodes, n)] += n.multiply_adds;
        }
    }
    const gpt_multiply_adds m = gpt_forward_multiply_adds(c, B, T);
    std::printf("  %-12s %-26s   %12s   %12s\n", "term", "formula", "value", "on the tape");
    auto row = [&](const char* term, const char* formula, std::uint64_t value) {
        std::printf("  %-12s %-26s = %12s   %12s  %s\n", term, formula, with_commas(value).c_str(),
                    with_commas(counted[term]).c_str(), equal_or_not(value, counted[term]));
    };
    row("projections", "L B T (2 d^2 + 2 d G dh)", m.projections);
    row("mlp", "L B T 8 d^2", m.mlp);
    row("attention", "L 2 B T^2 d", m.attention);
    row("head", "B T V d", m.head);
    std::printf("  %-12s %-26s = %12s   %12s  %s\n", "total", "", with_commas(m.total()).c_str(),
                with_commas(t.multiply_adds()).c_str(), equal_or_not(m.total(), t.multiply_adds()));
    std::printf("\n  The MLP is twice the projections' cost per token (8 d^2 against 4 d^2); attention grows\n"
                "  with T^2 and overtakes the projections once T > 2 d; the head grows with V.\n");

    const double loss = r.loss.value().flat(0);
    std::printf("\n  loss at initialisation %.4f, ln V = %.4f: an untrained model is close to uniform\n", loss,
                std::log(double(V)));
    print_variants(c, B, T, tokens, targets);
    return 0;
}
