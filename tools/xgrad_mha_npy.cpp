// xgrad-mha-npy: multi-head attention forward and backward on NumPy .npy files, with the tape or the
// hand-derived backward (docs/spec.md, "The .npy command-line tool"). Everything is computed in
// memory first; the outputs are then written to a temporary directory and renamed into place, so a run
// leaves either every output file or none.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "models/mha.hpp"
#include "models/mha_manual.hpp"
#include "io/escape.hpp"
#include "io/npy.hpp"
#include "tools/output_folder.hpp"
#include "tools/tool_errors.hpp"
#include "tools/mha_npy_args.hpp"
#include "train/memory_estimate.hpp"  // inputs the machine cannot compute are refused first

namespace fs = std::filesystem;
using namespace xgrad;
using namespace xgrad::tools::mha_npy;
using xgrad::tools::entry_exists;

namespace
{
const char* const program = "xgrad-mha-npy";
const tools::error_rules errors = tools::npy_tool_rules(program);

const char* const usage_text = R"(usage: xgrad-mha-npy --in DIR --out DIR --heads H [--kv-heads G] [--causal]
                     [--grad tape|manual] [--dtype float64|float32] [--detect-anomaly]

Runs multi-head attention (row-vector convention, Q = Xq W_Q, scores scaled by 1/sqrt(d/H)) forward and
backward on NumPy .npy files.

Inputs in --in (C order, float64 or float32, converted to --dtype):
  X.npy (B,T,d)            self-attention: X feeds queries, keys and values. When X.npy exists,
                           Xq/Xk/Xv.npy are ignored.
  Xq.npy (B,Tq,d), Xk.npy (B,Tk,d), Xv.npy (B,Tk,d)
                           cross-attention, used when there is no X.npy.
  W_Q.npy (d,d), W_K.npy (d,G*dh), W_V.npy (d,G*dh), W_O.npy (d,d), where dh = d/H.
  mask.npy                 optional, dtype bool, true = this query may attend to this key; applies to
                           every head alike and is ANDed with --causal. Shapes:
                             2-D (Tq,Tk): the same mask for every batch element;
                             3-D (B,Tq,Tk): one mask per batch element, read as (B,1,Tq,Tk); any axis
                                 may be 1 to broadcast, e.g. (B,1,Tk) is a per-sequence padding mask;
                             1-D (Tk,) or 4-D: NumPy broadcasting to (B,H,Tq,Tk).
                           A query whose keys are all masked gets weights 0, output 0 and no gradient.
  grad_output.npy (B,Tq,d) optional dL/d(output); default all ones (the gradient of sum(output)).

Outputs in --out (created if missing), in the compute dtype:
  output.npy (B,Tq,d), attn.npy (B,H,Tq,Tk), grad_W_Q.npy, grad_W_K.npy, grad_W_V.npy, grad_W_O.npy,
  and grad_X.npy (self-attention) or grad_Xq.npy, grad_Xk.npy, grad_Xv.npy (cross-attention).

Options:
  --in DIR                 directory holding the input files
  --out DIR                directory for the outputs (created if missing; existing files are replaced)
  --heads H                number of query heads; d % H must be 0
  --kv-heads G             key/value heads (grouped-query attention, query head h reads key/value head
                           h / (H/G)); H % G must be 0. Default G = H (ordinary MHA); G = 1 is MQA.
  --causal                 causal mask, bottom-right aligned: query i sees key j iff j <= i + (Tk - Tq)
  --grad tape|manual       backward by the autodiff tape (default) or the hand-derived backward
  --dtype float64|float32  compute and output dtype (default float64)
  --detect-anomaly         stop at the first op of the tape whose value or gradient turns NaN or inf
                           from finite inputs, and name it (exit status 3); NaN or inf already in the
                           inputs only propagates. Not with --grad manual.
  --help                   print this text and exit
A value may also be attached with '=', as in --heads=8.

Exit status: 0 on success (one summary line on stdout); 2 on bad usage or bad input, 1 when the
outputs cannot be written, 3 when --detect-anomaly finds an anomaly. On failure one line goes to
stderr and no output file is left behind.
)";

template <class T>
struct problem
{
    bool self = true;
    array<T> xq, xk, xv;  // xk, xv stay empty for self-attention
    array<T> w_q, w_k, w_v, w_o;
    std::optional<mask_t> mask;
    array<T> grad_output;
    models::mha_config config;
};

void check_shape(const std::string& file, const shape_t& got, const shape_t& want, const std::string& meaning,
                 const std::string& context = "")
{
    if (got != want)
    {
        throw input_error(file + ": shape " + shape_str(got) + " must be " + meaning + " = " +
                          shape_str(want) + context);
    }
}

template <class T>
problem<T> load_problem(const options& o)
{
    std::error_code ec;
    if (!fs::is_directory(o.in, ec))
    {
        throw input_error("--in " + o.in.string() + ": " +
                          (entry_exists(o.in) ? "not a directory" : "no such directory"));
    }
    auto file = [&](const char* name) { return (o.in / name).string(); };

    problem<T> p;
    p.self = entry_exists(o.in / "X.npy");
    if (!p.self && !entry_exists(o.in / "Xq.npy") && !entry_exists(o.in / "Xk.npy") &&
        !entry_exists(o.in / "Xv.npy"))
    {
        throw input_error(o.in.string() +
                          ": no X.npy (self-attention) and no Xq.npy, Xk.npy, Xv.npy (cross-attention)");
    }
    const std::string q_name = p.self ? "X.npy" : "Xq.npy";
    p.xq = npy::load_float<T>(file(q_name.c_str()));
    const shape_t qs = to_shape(p.xq.shape());
    if (qs.size() != 3)
    {
        throw input_error(file(q_name.c_str()) + ": shape " + shape_str(qs) + " must be (B, T, d)");
    }
    const std::size_t batch = qs[0], tq = qs[1], d = qs[2];
    std::size_t tk = tq;
    if (!p.self)
    {
        p.xk = npy::load_float<T>(file("Xk.npy"));
        p.xv = npy::load_float<T>(file("Xv.npy"));
        const shape_t ks = to_shape(p.xk.shape());
        if (ks.size() != 3 || ks[0] != batch || ks[2] != d)
        {
            throw input_error(file("Xk.npy") + ": shape " + shape_str(ks) +
                              " must be (B, Tk, d) with B = " + std::to_string(batch) +
                              " and d = " + std::to_string(d) + " from Xq.npy " + shape_str(qs));
        }
        tk = ks[1];
        check_shape(file("Xv.npy"), to_shape(p.xv.shape()), ks, "the shape of Xk.npy");
    }

    const std::string x_names = p.self ? "X.npy" : "Xq.npy";
    if (d == 0)
    {
        throw input_error(file(q_name.c_str()) + ": d (the last axis) must be positive, got shape " +
                          shape_str(qs));
    }
    p.config.d_model = d;
    p.config.heads = o.heads;
    p.config.kv_heads = o.kv_heads;
    if (d % o.heads != 0)
    {
        throw input_error("--heads " + std::to_string(o.heads) + " does not divide d = " + std::to_string(d) +
                          " (the last axis of " + x_names + ")");
    }
    if (o.heads % p.config.kv_head_count() != 0)
    {
        throw input_error("--kv-heads " + std::to_string(o.kv_heads) + " does not divide --heads " +
                          std::to_string(o.heads));
    }
    const std::size_t kv = p.config.kv_width();
    const std::string dims = " (d = " + std::to_string(d) + ", H = " + std::to_string(o.heads) +
                             ", G = " + std::to_string(p.config.kv_head_count()) + ")";
    p.w_q = npy::load_float<T>(file("W_Q.npy"));
    check_shape(file("W_Q.npy"), to_shape(p.w_q.shape()), {d, d}, "(d, d)", dims);
    p.w_k = npy::load_float<T>(file("W_K.npy"));
    check_shape(file("W_K.npy"), to_shape(p.w_k.shape()), {d, kv}, "(d, G*dh)", dims);
    p.w_v = npy::load_float<T>(file("W_V.npy"));
    check_shape(file("W_V.npy"), to_shape(p.w_v.shape()), {d, kv}, "(d, G*dh)", dims);
    p.w_o = npy::load_float<T>(file("W_O.npy"));
    check_shape(file("W_O.npy"), to_shape(p.w_o.shape()), {d, d}, "(d, d)", dims);

    // attn.npy has B*H*Tq*Tk elements: refuse sizes whose byte count, or whose strides (a size 0 counted
    // as 1: an empty batch of T = 2^40 still has Tq*Tk strides), do not fit a signed 64-bit integer.
    std::size_t attn_bytes = sizeof(T);
    for (std::size_t n : {batch, o.heads, tq, tk})
    {
        if (__builtin_mul_overflow(attn_bytes, std::max<std::size_t>(n, 1), &attn_bytes) ||
            attn_bytes > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()))
        {
            throw input_error("the attention weights (B, H, Tq, Tk) = " +
                              shape_str({batch, o.heads, tq, tk}) + " are too large to compute");
        }
    }

    if (const std::string m =
          train::memory_shortfall(train::estimate_attention_run(batch, tq, tk, d, o.heads, sizeof(T)),
                                  train::available_memory(), "this input", "use smaller inputs");
        !m.empty())
    {
        throw input_error(m);
    }
    const shape_t scores{batch, o.heads, tq, tk};
    if (entry_exists(o.in / "mask.npy"))
    {
        mask_t m = npy::load_bool(file("mask.npy"));
        const shape_t ms = to_shape(m.shape());
        if (ms.size() == 3)
        {
            m.reshape({ms[0], 1, ms[1], ms[2]});
        }
        if (ms.size() > 4 || !broadcasts_to(to_shape(m.shape()), scores))
        {
            throw input_error(
                file("mask.npy") + ": shape " + shape_str(ms) +
                " does not broadcast to (B, H, Tq, Tk) = " + shape_str(scores) +
                " (use (Tq, Tk), (B, Tq, Tk), which is read as (B, 1, Tq, Tk), or a 4-D shape)");
        }
        p.mask = std::move(m);
    }

    const shape_t out_shape{batch, tq, d};
    if (entry_exists(o.in / "grad_output.npy"))
    {
        p.grad_output = npy::load_float<T>(file("grad_output.npy"));
        check_shape(file("grad_output.npy"), to_shape(p.grad_output.shape()), out_shape,
                    "the output's (B, Tq, d)");
    }
    else
    {
        p.grad_output = xt::ones<T>(out_shape);
    }
    return p;
}

template <class T>
using named_arrays = std::vector<std::pair<std::string, array<T>>>;

template <class T>
named_arrays<T> run_tape(const problem<T>& p, const models::mha_options& mo, bool detect_anomaly)
{
    tape<T> t;
    t.detect_anomaly(detect_anomaly);
    const var<T> xq = t.input(p.xq, p.self ? "X" : "Xq");
    const var<T> xk = p.self ? xq : t.input(p.xk, "Xk");
    const var<T> xv = p.self ? xq : t.input(p.xv, "Xv");
    const models::mha_weights<T> w{t.input(p.w_q, "W_Q"), t.input(p.w_k, "W_K"), t.input(p.w_v, "W_V"),
                                   t.input(p.w_o, "W_O")};
    const auto r = models::multi_head_attention(xq, xk, xv, w, p.config, mo);
    named_arrays<T> out{{"output", r.output.value()}, {"attn", r.attention.value()}};
    t.backward(r.output, p.grad_output);
    out.emplace_back("grad_W_Q", w.W_Q.grad());
    out.emplace_back("grad_W_K", w.W_K.grad());
    out.emplace_back("grad_W_V", w.W_V.grad());
    out.emplace_back("grad_W_O", w.W_O.grad());
    if (p.self)
    {
        out.emplace_back("grad_X", xq.grad());
    }
    else
    {
        out.emplace_back("grad_Xq", xq.grad());
        out.emplace_back("grad_Xk", xk.grad());
        out.emplace_back("grad_Xv", xv.grad());
    }
    return out;
}

template <class T>
named_arrays<T> run_manual(const problem<T>& p, const models::mha_options& mo)
{
    const array<T>& xk = p.self ? p.xq : p.xk;
    const array<T>& xv = p.self ? p.xq : p.xv;
    auto f = models::manual::mha_forward(p.xq, xk, xv, p.w_q, p.w_k, p.w_v, p.w_o, p.config, mo);
    auto g = models::manual::mha_backward(p.grad_output, f.cache);
    named_arrays<T> out{{"output", std::move(f.output)}, {"attn", std::move(f.cache.weights)}};
    out.emplace_back("grad_W_Q", std::move(g.w_q));
    out.emplace_back("grad_W_K", std::move(g.w_k));
    out.emplace_back("grad_W_V", std::move(g.w_v));
    out.emplace_back("grad_W_O", std::move(g.w_o));
    if (p.self)
    {
        out.emplace_back("grad_X", array<T>(g.xq + g.xk + g.xv));  // X fed all three projections
    }
    else
    {
        out.emplace_back("grad_Xq", std::move(g.xq));
        out.emplace_back("grad_Xk", std::move(g.xk));
        out.emplace_back("grad_Xv", std::move(g.xv));
    }
    return out;
}

// Writes every array as <name>.npy in `out`, or (on any failure) leaves no file and no directory it made.
template <class T>
void write_all(const fs::path& out, const named_arrays<T>& arrays)
{
    std::vector<tools::output_file> files;
    for (const auto& [name, a] : arrays)
    {
        files.push_back({name + ".npy", [&a = a](const std::string& f) { npy::save(f, a); }});
    }
    tools::write_output_folder(out, files, program);
}

template <class T>
std::string run(const options& o)
{
    problem<T> p = load_problem<T>(o);
    models::mha_options mo;
    mo.mask = p.mask ? &*p.mask : nullptr;
    mo.causal = o.causal;
    named_arrays<T> arrays;
    try
    {
        arrays = o.manual ? run_manual(p, mo) : run_tape(p, mo, o.detect_anomaly);
    }
    catch (const std::invalid_argument& e)
    {
        throw input_error(e.what());  // a check of the library's that the ones above did not anticipate
    }
    try
    {
        write_all(o.out, arrays);
    }
    catch (const npy::error& e)
    {
        throw tools::output_error(e.what());
    }
    catch (const fs::filesystem_error& e)
    {
        throw tools::output_error(e.what());
    }
    const shape_t s = to_shape(p.xq.shape());
    const std::string sizes = p.self ? "B=" + std::to_string(s[0]) + " T=" + std::to_string(s[1])
                                     : "B=" + std::to_string(s[0]) + " Tq=" + std::to_string(s[1]) +
                                           " Tk=" + std::to_string(p.xk.shape()[1]);
    return std::string(p.self ? "self" : "cross") + "-attention " + sizes + " d=" + std::to_string(s[2]) +
           " H=" + std::to_string(o.heads) + " G=" + std::to_string(p.config.kv_head_count()) +
           (o.causal ? " causal" : "") + (p.mask ? " masked" : "") + ", " +
           (o.float32 ? "float32" : "float64") + ", " + (o.manual ? "manual" : "tape") + " backward: wrote " +
           std::to_string(arrays.size()) + " files to " + o.out.string();
}
}  // namespace

int main(int argc, char** argv)
{
    signal(SIGPIPE, SIG_IGN);  // a closed stdout or stderr must not kill the process
    try
    {
        const std::vector<std::string> args(argv + 1, argv + argc);
        for (const std::string& a : args)
        {
            if (a == "--help" || a == "-h")
            {
                std::cout << usage_text << std::flush;
                return std::cout ? 0 : 1;
            }
        }
        const options o = parse_arguments(args);
        if (const std::string why = tools::output_folder_problem(o.out); !why.empty())
        {
            throw input_error(why);
        }
        const std::string summary = o.float32 ? run<float>(o) : run<double>(o);
        std::cout << program << ": " << io::one_line(summary) << std::endl;
        return 0;
    }
    catch (...)
    {
        return tools::fail_with_current_exception(errors);
    }
}
