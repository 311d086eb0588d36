// The main demo: multi-head attention built as a graph on the tape, read like a worked solution.
//   Exercise 20.2  the shape trace, node by node, straight off the tape
//   Exercise 20.3  parameter and FLOP budget: the chapter's formulas beside what the tape counted
//   Exercise 20.4  gradients three ways: tape vs hand-derived vs central differences
//   Memory         what the tape holds for backward, with the B*H*T*T attention weights called out
// and writes the graph as Graphviz DOT (plus SVG and PNG when Graphviz's `dot` is installed).
//
// Usage: mha_demo [OUTPUT_DIR]     (default: the current directory; --help prints the usage)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "autodiff/compare.hpp"
#include "autodiff/gradcheck.hpp"
#include "examples/command_line.hpp"
#include "models/mha_manual.hpp"

using namespace xgrad;
using namespace xgrad::models;

namespace
{
array<double> random_array(const shape_t& shape, std::mt19937& rng, double scale = 1.0)
{
    std::normal_distribution<double> normal(0.0, scale);
    array<double> a = array<double>::from_shape(shape);
    for (auto& x : a)
    {
        x = normal(rng);
    }
    return a;
}

void heading(const char* title)
{
    std::printf("\n== %s ==\n\n", title);
}

std::string with_commas(std::uint64_t n)
{
    std::string s = std::to_string(n);
    for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
    {
        s.insert(static_cast<std::size_t>(i), ",");
    }
    return s;
}

// Everything one attention layer needs: inputs, weights, the upstream gradient G of loss = sum(Y * G).
struct layer_inputs
{
    mha_config config;
    array<double> xq, xk, xv, w_q, w_k, w_v, w_o, g;
    bool self = false;
    bool causal = true;
};

struct three_way
{
    std::vector<std::string> names;
    std::vector<array<double>> tape, manual, numeric;
};

// Runs the layer on a tape and by hand, finite-differences every input, and prints the table.
three_way check_gradients(layer_inputs in)
{
    const mha_options options{nullptr, in.causal};
    three_way r;

    tape<double> t;
    var<double> xq = t.input(in.xq, "Xq"), xk = in.self ? xq : t.input(in.xk, "Xk"),
                xv = in.self ? xq : t.input(in.xv, "Xv");
    mha_weights<double> w{t.input(in.w_q, "W_Q"), t.input(in.w_k, "W_K"), t.input(in.w_v, "W_V"),
                          t.input(in.w_o, "W_O")};
    auto y = multi_head_attention(xq, xk, xv, w, in.config, options).output;
    t.backward(y, in.g);

    auto m = manual::mha_forward(in.xq, in.xk, in.xv, in.w_q, in.w_k, in.w_v, in.w_o, in.config, options);
    auto mg = manual::mha_backward(in.g, m.cache);

    auto loss = [&in, &options] {
        const auto& xk = in.self ? in.xq : in.xk;
        const auto& xv = in.self ? in.xq : in.xv;
        auto f = manual::mha_forward(in.xq, xk, xv, in.w_q, in.w_k, in.w_v, in.w_o, in.config, options);
        return double(xt::sum(f.output * in.g)());
    };
    auto add = [&](const char* name, const var<double>& v, const array<double>& manual, array<double>& x) {
        r.names.push_back(name);
        r.tape.push_back(v.grad());
        r.manual.push_back(manual);
        r.numeric.push_back(numeric_gradient(loss, x));
    };
    if (in.self)
    {
        add("dX", xq, mg.xq + mg.xk + mg.xv, in.xq);  // one X feeds three paths: their sum
    }
    else
    {
        add("dXq", xq, mg.xq, in.xq);
        add("dXk", xk, mg.xk, in.xk);
        add("dXv", xv, mg.xv, in.xv);
    }
    add("dW_Q", w.W_Q, mg.w_q, in.w_q);
    add("dW_K", w.W_K, mg.w_k, in.w_k);
    add("dW_V", w.W_V, mg.w_v, in.w_v);
    add("dW_O", w.W_O, mg.w_o, in.w_o);

    std::printf("  %-6s %-12s | %-21s | %-21s | %-21s\n", "tensor", "shape", "tape vs manual", "tape vs finite diff",
                "manual vs finite diff");
    std::printf("  %-6s %-12s | %10s %10s | %10s %10s | %10s %10s\n", "", "", "max abs", "max rel", "max abs", "max rel",
                "max abs", "max rel");
    for (std::size_t i = 0; i < r.names.size(); ++i)
    {
        const auto tm = compare(r.tape[i], r.manual[i]);
        const auto tn = compare(r.tape[i], r.numeric[i]);
        const auto mn = compare(r.manual[i], r.numeric[i]);
        std::printf("  %-6s %-12s | %10.2e %10.2e | %10.2e %10.2e | %10.2e %10.2e\n", r.names[i].c_str(),
                    shape_str(to_shape(r.tape[i].shape())).c_str(), tm.max_abs, tm.max_rel, tn.max_abs, tn.max_rel,
                    mn.max_abs, mn.max_rel);
    }
    return r;
}

bool write_graph(const tape<double>& t, const std::string& dir)
{
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    const std::string graph = dir + "/mha_graph";  // .dot, and .svg and .png when Graphviz renders it
    const std::string dot = graph + ".dot";
    std::ofstream file(dot);
    file << t.to_dot();
    file.close();
    if (!file)
    {
        std::fprintf(stderr, "mha_demo: cannot write %s\n", dot.c_str());
        return false;
    }
    std::printf("  wrote %s (blue: inputs; bold: values saved for backward)", dot.c_str());
    if (std::system("command -v dot >/dev/null 2>&1") == 0)
    {
        const std::string svg = graph + ".svg", png = graph + ".png";
        // The path reaches the shell as a variable inside double quotes: any folder name is taken as it is.
        setenv("MHA_GRAPH", graph.c_str(), 1);
        const auto render = [](const std::string& format) {
            const std::string command = "dot -T" + format + " \"$MHA_GRAPH.dot\" -o \"$MHA_GRAPH." + format + "\"";
            return std::system(command.c_str()) == 0;
        };
        const bool ok = render("svg") && render("png");
        std::printf(ok ? ", %s and %s\n" : "; Graphviz failed to render it\n", svg.c_str(), png.c_str());
    }
    else
    {
        std::printf(" (install graphviz to get SVG and PNG: apt-get install graphviz)\n");
    }
    return true;
}
}  // namespace

int main(int argc, char** argv)
{
    examples::command_line cli{"Multi-head attention as a graph: shape trace, counting, memory and the three-way gradient check",
                 "mha_demo"};
    std::string out_dir = ".";
    cli.add_option("output_dir", out_dir, "folder for the graph (mha_graph.dot, .svg, .png)");
    if (const auto status = cli.parse(argc, argv))
    {
        return *status;
    }
    const std::size_t B = 2, T = 5, d = 8, H = 2;
    std::mt19937 rng(7);
    layer_inputs in;
    in.config = {d, H};
    in.self = true;
    in.xq = random_array({B, T, d}, rng);
    in.xk = in.xv = in.xq;
    const double w = 1.0 / std::sqrt(double(d));
    in.w_q = random_array({d, d}, rng, w);
    in.w_k = random_array({d, d}, rng, w);
    in.w_v = random_array({d, d}, rng, w);
    in.w_o = random_array({d, d}, rng, w);
    in.g = random_array({B, T, d}, rng);

    std::printf("xgrad: multi-head self-attention as a graph of primitive ops\n");
    std::printf("B = %zu sequences, T = %zu tokens, d = %zu, H = %zu heads of d_h = %zu; causal mask; float64\n", B,
                T, d, H, d / H);

    // ---- Exercise 20.2 --------------------------------------------------------------------------------
    heading("Exercise 20.2: shape trace, read off the tape");
    tape<double> t;
    var<double> x = t.input(in.xq, "X");
    mha_weights<double> weights{t.input(in.w_q, "W_Q"), t.input(in.w_k, "W_K"), t.input(in.w_v, "W_V"),
                                t.input(in.w_o, "W_O")};
    mha_result<double> r = self_attention(x, weights, in.config, {nullptr, true});
    std::printf("%s", t.trace().c_str());
    std::printf("\n  %%N is node N; 'saved' marks values a backward rule will read. Q, K, V go from (B, T, d)\n"
                "  to (B, H, T, d_h) by reshape + permute (split_heads); scores and attention weights are\n"
                "  (B, H, T, T); combine_heads permutes and reshapes back to (B, T, d) before W_O.\n");

    // ---- Exercise 20.3 --------------------------------------------------------------------------------
    heading("Exercise 20.3: parameter and FLOP budget (multiply-adds; FLOPs = 2 x multiply-adds)");
    std::uint64_t weight_sizes = 0;
    for (const auto& v : {weights.W_Q, weights.W_K, weights.W_V, weights.W_O})
    {
        weight_sizes += v.value().size();
    }
    const std::uint64_t formula = self_attention_multiply_adds(B, T, d);
    std::printf("  parameters     4 d^2            = %-10s counted on the tape: %s\n",
                with_commas(parameter_count(d)).c_str(), with_commas(weight_sizes).c_str());
    std::printf("  projections    4 B T d^2        = %s\n", with_commas(4 * B * T * d * d).c_str());
    std::printf("  attention      2 B T^2 d        = %s\n", with_commas(2 * B * T * T * d).c_str());
    std::printf("  forward total  (20.5)           = %-10s counted on the tape: %s  %s\n", with_commas(formula).c_str(),
                with_commas(t.multiply_adds()).c_str(), formula == t.multiply_adds() ? "(equal)" : "(DIFFERENT)");
    std::printf("  per matmul node:\n");
    for (const auto& n : t.nodes())
    {
        if (n.multiply_adds)
        {
            std::printf("    %%%-3u %-12s %s\n", n.index, n.label.c_str(), with_commas(n.multiply_adds).c_str());
        }
    }

    // ---- Memory ---------------------------------------------------------------------------------------
    heading("Memory: what the tape holds for backward");
    std::size_t attention_bytes = 0;
    for (const auto& n : t.nodes())
    {
        attention_bytes += n.label == "attention" ? n.value_bytes : 0;
    }
    const std::size_t saved = t.bytes_saved_for_backward();
    std::printf("  saved for backward: %s bytes in all\n", with_commas(saved).c_str());
    std::printf("  attention weights B*H*T*T = %zu*%zu*%zu*%zu = %zu values = %s bytes (%.0f%% of it)\n", B, H, T, T,
                B * H * T * T, with_commas(attention_bytes).c_str(), 100.0 * attention_bytes / saved);
    std::printf("  they grow with T^2: at B = 8, H = 16, T = 2048 in float32 they alone take %.1f GiB\n",
                8.0 * 16 * 2048 * 2048 * 4 / (1 << 30));
    std::printf("  every value and gradient the tape owns: %s bytes\n", with_commas(t.bytes_held()).c_str());

    heading("Graph");
    if (!write_graph(t, out_dir))
    {
        return 1;
    }

    // ---- Exercise 20.4 --------------------------------------------------------------------------------
    heading("Exercise 20.4: gradient check, loss = sum(Y * G), G random");
    std::printf("  self-attention: dX is the sum of the query, key and value paths\n\n");
    check_gradients(in);

    layer_inputs cross = in;
    cross.self = false;
    cross.xq = random_array({B, 3, d}, rng);
    cross.xk = random_array({B, 6, d}, rng);
    cross.xv = random_array({B, 6, d}, rng);
    cross.g = random_array({B, 3, d}, rng);
    std::printf("\n  cross-attention, Tq = 3 queries over Tk = 6 keys, causal bottom-right (query i sees keys <= i + 3)\n\n");
    check_gradients(cross);
    std::printf("\n  tape and manual agree to rounding (~1e-16); finite differences (eps = 1e-6) to ~1e-9.\n");
    return 0;
}
