// Reference fixtures from an independent implementation: tests/data/fixtures/<case>/ holds small MHA cases
// computed in float64 with PyTorch autograd (tests/fixtures/make_fixtures.py, written from docs/spec.md only).
// Both the tape (models::multi_head_attention) and the hand-derived backward (models::manual) must give
// PyTorch's output, attention weights and every gradient to ~1e-12 relative, with no NaN anywhere.
// Layout per case: in/ (the .npy tool's inputs), expected/ (its outputs), args.txt (its flags).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "models/mha_manual.hpp"
#include "io/npy.hpp"
#include "source_dir.hpp"

namespace test_fixtures
{
using namespace xgrad;
using namespace xgrad::models;
namespace fs = std::filesystem;

namespace
{
const fs::path fixtures_dir = fs::path(xgrad::test::source_dir()) / "tests" / "data" / "fixtures";

// The relative tolerance: max |xgrad - torch| over a tensor, divided by max |torch| over it.
constexpr double tolerance = 1e-12;

struct fixture
{
    std::string name;
    fs::path dir;
    mha_config config;
    bool causal = false;
    bool self = false;  // in/X.npy: one input feeds all three projections
    array<double> xq, xk, xv, w_q, w_k, w_v, w_o, grad_y;
    std::optional<mask_t> mask;

    mha_options options() const { return {mask ? &*mask : nullptr, causal}; }
    // The input names whose gradients the fixture holds, as in the .npy tool's file names.
    std::vector<std::string> input_names() const
    {
        if (self)
        {
            return {"X", "W_Q", "W_K", "W_V", "W_O"};
        }
        return {"Xq", "Xk", "Xv", "W_Q", "W_K", "W_V", "W_O"};
    }
};

// What one path computed: output, attention weights and the gradients by input name.
struct result
{
    array<double> output, attention;
    std::map<std::string, array<double>> grads;
};

std::vector<fs::path> case_dirs()
{
    std::vector<fs::path> dirs;
    if (fs::is_directory(fixtures_dir))
    {
        for (const auto& entry : fs::directory_iterator(fixtures_dir))
        {
            if (entry.is_directory())
            {
                dirs.push_back(entry.path());
            }
        }
    }
    std::sort(dirs.begin(), dirs.end());
    return dirs;
}

// args.txt holds the .npy tool's flags: --heads H --kv-heads G [--causal].
void read_args(fixture& f)
{
    std::ifstream in(f.dir / "args.txt");
    REQUIRE_MESSAGE(in, "cannot read " << (f.dir / "args.txt").string());
    std::string token;
    while (in >> token)
    {
        if (token == "--heads")
        {
            REQUIRE(static_cast<bool>(in >> f.config.heads));
        }
        else if (token == "--kv-heads")
        {
            REQUIRE(static_cast<bool>(in >> f.config.kv_heads));
        }
        else if (token == "--causal")
        {
            f.causal = true;
        }
        else
        {
            FAIL("unknown flag in args.txt: " << token);
        }
    }
}

fixture load_fixture(const fs::path& dir)
{
    fixture f;
    f.name = dir.filename().string();
    f.dir = dir;
    read_args(f);
    const fs::path in = dir / "in";
    auto load = [&in](const std::string& name)
    {
        return npy::load_float<double>((in / (name + ".npy")).string());
    };
    f.self = fs::exists(in / "X.npy");
    if (f.self)
    {
        f.xq = load("X");
        f.xk = f.xq;
        f.xv = f.xq;
    }
    else
    {
        f.xq = load("Xq");
        f.xk = load("Xk");
        f.xv = load("Xv");
    }
    f.w_q = load("W_Q");
    f.w_k = load("W_K");
    f.w_v = load("W_V");
    f.w_o = load("W_O");
    f.grad_y = load("grad_output");
    f.config.d_model = f.w_q.shape()[0];
    if (fs::exists(in / "mask.npy"))
    {
        // The .npy tool's rule: (Tq, Tk) and 4-D masks broadcast as they are; (B, Tq, Tk) is (B, 1, Tq, Tk).
        mask_t m = npy::load_bool((in / "mask.npy").string());
        if (m.dimension() == 3)
        {
            const shape_t s = to_shape(m.shape());
            m.reshape({s[0], std::size_t(1), s[1], s[2]});
        }
        f.mask = std::move(m);
    }
    return f;
}

// The composed layer on a tape; self-attention records X once and feeds the same var three times.
result run_tape(const fixture& f)
{
    tape<double> t;
    var<double> xq = t.input(f.xq);
    var<double> xk = f.self ? xq : t.input(f.xk);
    var<double> xv = f.self ? xq : t.input(f.xv);
    mha_weights<double> w{t.input(f.w_q), t.input(f.w_k), t.input(f.w_v), t.input(f.w_o)};
    mha_result<double> r = multi_head_attention(xq, xk, xv, w, f.config, f.options());
    result out{r.output.value(), r.attention.value(), {}};
    t.backward(r.output, f.grad_y);
    if (f.self)
    {
        out.grads["X"] = xq.grad();
    }
    else
    {
        out.grads["Xq"] = xq.grad();
        out.grads["Xk"] = xk.grad();
        out.grads["Xv"] = xv.grad();
    }
    out.grads["W_Q"] = w.W_Q.grad();
    out.grads["W_K"] = w.W_K.grad();
    out.grads["W_V"] = w.W_V.grad();
    out.grads["W_O"] = w.W_O.grad();
    return out;
}

// The hand-derived forward and backward; for self-attention the three input gradients are summed.
result run_manual(const fixture& f)
{
    auto fwd = manual::mha_forward(f.xq, f.xk, f.xv, f.w_q, f.w_k, f.w_v, f.w_o, f.config, f.options());
    auto g = manual::mha_backward(f.grad_y, fwd.cache);
    result out{fwd.output, fwd.cache.weights, {}};
    if (f.self)
    {
        out.grads["X"] = g.xq + g.xk + g.xv;
    }
    else
    {
        out.grads["Xq"] = g.xq;
        out.grads["Xk"] = g.xk;
        out.grads["Xv"] = g.xv;
    }
    out.grads["W_Q"] = g.w_q;
    out.grads["W_K"] = g.w_k;
    out.grads["W_V"] = g.w_v;
    out.grads["W_O"] = g.w_o;
    return out;
}

bool all_finite(const array<double>& a)
{
    return std::all_of(a.begin(), a.end(), [](double v) { return std::isfinite(v); });
}

// Compares one tensor with PyTorch's: same shape, finite, max |a - b| <= tolerance * max |b|, and exactly 0
// wherever PyTorch has exactly 0 (masked weights, fully masked rows and the gradients they do not send).
void check_tensor(const fixture& f, const std::string& name, const array<double>& actual)
{
    const array<double> expected = npy::load_float<double>((f.dir / "expected" / (name + ".npy")).string());
    CAPTURE(name);
    REQUIRE(to_shape(actual.shape()) == to_shape(expected.shape()));
    CHECK(all_finite(expected));
    CHECK(all_finite(actual));
    double diff = 0, scale = 0;
    std::size_t zeros_missed = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
    {
        diff = std::max(diff, std::abs(actual.flat(i) - expected.flat(i)));
        scale = std::max(scale, std::abs(expected.flat(i)));
        zeros_missed += expected.flat(i) == 0.0 && actual.flat(i) != 0.0;
    }
    const double relative = scale > 0 ? diff / scale : diff;
    CAPTURE(diff);
    CAPTURE(scale);
    CHECK(relative <= tolerance);
    CHECK(zeros_missed == 0);
}

void check_against_torch(const fixture& f, const result& r)
{
    check_tensor(f, "output", r.output);
    check_tensor(f, "attn", r.attention);
    REQUIRE(r.grads.size() == f.input_names().size());
    for (const auto& name : f.input_names())
    {
        check_tensor(f, "grad_" + name, r.grads.at(name));
    }
}
}  // namespace

TEST_CASE("the fixture cases are all there, each with inputs, expected outputs and args.txt")
{
    const auto dirs = case_dirs();
    CHECK(dirs.size() >= 9);
    for (const auto& dir : dirs)
    {
        CAPTURE(dir.string());
        CHECK(fs::is_regular_file(dir / "args.txt"));
        CHECK(fs::is_regular_file(dir / "in" / "W_Q.npy"));
        CHECK(fs::is_regular_file(dir / "in" / "grad_output.npy"));
        CHECK(fs::is_regular_file(dir / "expected" / "output.npy"));
        CHECK(fs::is_regular_file(dir / "expected" / "attn.npy"));
    }
}

TEST_CASE("tape: output, attention and every gradient equal PyTorch's on every fixture")
{
    for (const auto& dir : case_dirs())
    {
        const fixture f = load_fixture(dir);
        CAPTURE(f.name);
        check_against_torch(f, run_tape(f));
    }
}

TEST_CASE("hand-derived backward: output, attention and every gradient equal PyTorch's on every fixture")
{
    for (const auto& dir : case_dirs())
    {
        const fixture f = load_fixture(dir);
        CAPTURE(f.name);
        check_against_torch(f, run_manual(f));
    }
}
}  // namespace test_fixtures
