// The xgrad-gpt-npy command line, run as a user runs it. Good runs (with and without targets, float64
// and float32, tape and manual backward) are judged against a loop-written GPT (gpt_reference.hpp) and
// central differences of its loss, not against the library; every class of bad input must give a non-zero
// status, exactly one line on stderr and no output file.
#include <doctest/doctest.h>

#include "gpt_reference.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "models/gpt.hpp"

namespace gpt_tool_test
{
using namespace xgrad;
using xgrad::test::listing;
using xgrad::test::max_relative_difference;
using xgrad::test::quote;
using xgrad::test::read_bytes;
using xgrad::test::run_tool;
using xgrad::test::temp_dir;
using xgrad::test::tool_run;
using xgrad::test::gpt_reference::ref_logits;
using xgrad::test::gpt_reference::ref_loss;
namespace fs = std::filesystem;

namespace
{
const std::string tool = xgrad::test::program_dir() + "/xgrad-gpt-npy";

// ---- cases --------------------------------------------------------------------------------------

struct gpt_case
{
    models::gpt_parameters<double> params;  // as saved in `checkpoint`
    std::string checkpoint;
    ids_t tokens, targets;
};

// A checkpoint of seeded values (larger than GPT-2's init, so the layers matter), with the text metadata
// and optimiser state a training run leaves (which the tool must ignore), and tokens and targets.
gpt_case make_case(const temp_dir& scratch, const models::gpt_config& c, std::size_t batch,
                   std::size_t length, unsigned seed)
{
    gpt_case g{models::gpt_parameters<double>::init(c, seed),
               (scratch.path / ("model" + std::to_string(seed) + ".safetensors")).string(), {}, {}};
    unsigned k = seed * 100;
    for (parameter<double>& p : g.params.named_parameters())
    {
        const bool norm_weight = p.name().find(".weight") != std::string::npos;
        p.value() = test::normal_array<double>(to_shape(p.value().shape()), k++, norm_weight ? 0.2 : 0.3);
        if (norm_weight)
        {
            p.value() += 1.0;
        }
    }
    io::checkpoint_extras extras;
    extras.metadata = {{"vocab", "[97, 98, 99]"}, {"step", "12"}};
    extras.tensors["optim.m.wte"] = {"F64", test::random_array({c.vocab_size, c.d_model}, 1)};
    io::save_checkpoint(g.checkpoint, g.params, extras);

    std::mt19937 rng(seed);
    g.tokens = ids_t::from_shape({batch, length});
    g.targets = ids_t::from_shape({batch, length});
    for (std::size_t i = 0; i < g.tokens.size(); ++i)
    {
        g.tokens.flat(i) = static_cast<std::int64_t>(rng() % c.vocab_size);
        // Every fifth target is ignored.
        g.targets.flat(i) = i % 5 == 3 ? -1 : static_cast<std::int64_t>(rng() % c.vocab_size);
    }
    return g;
}

struct outputs
{
    array<double> logits;
    std::optional<double> loss;
    io::safetensors_file grads;
};

// Runs one good case and checks the file set, shapes and dtypes.
outputs run_good(const temp_dir& scratch, const gpt_case& g, const fs::path& in, const fs::path& out,
                 const std::string& flags, bool with_targets, const std::string& dtype)
{
    const tool_run r = run_tool(tool, scratch, "--checkpoint " + quote(g.checkpoint) + " --in " + quote(in) +
                                             " --out " + quote(out) + " --dtype " + dtype + " " + flags);
    INFO(flags, " ", dtype, ": ", r.err);
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
    const std::set<std::string> expected_files =
      with_targets ? std::set<std::string>{"logits.npy", "loss.npy", "grads.safetensors"}
                   : std::set<std::string>{"logits.npy"};
    REQUIRE(listing(out) == expected_files);
    const char* descr = dtype == "float32" ? "'descr': '<f4'" : "'descr': '<f8'";
    CHECK(read_bytes(out / "logits.npy").find(descr) != std::string::npos);
    outputs o;
    o.logits = npy::load_float<double>((out / "logits.npy").string());
    const std::size_t B = g.tokens.shape()[0], T = g.tokens.shape()[1];
    CHECK(to_shape(o.logits.shape()) == shape_t{B, T, g.params.config.vocab_size});
    if (with_targets)
    {
        CHECK(read_bytes(out / "loss.npy").find(descr) != std::string::npos);
        const array<double> loss = npy::load_float<double>((out / "loss.npy").string());
        CHECK(loss.dimension() == 0);
        o.loss = loss();
        o.grads = io::read_safetensors((out / "grads.safetensors").string());
        CHECK(o.grads.metadata == io::read_safetensors(g.checkpoint).metadata);  // copied, extras included
        const auto named = g.params.named_parameters();
        CHECK(o.grads.tensors.size() == named.size());  // the parameters only: no optim.*
        for (const parameter<double>& p : named)
        {
            CAPTURE(p.name());
            REQUIRE(o.grads.tensors.count(p.name()));
            CHECK(o.grads.tensors.at(p.name()).dtype == (dtype == "float32" ? "F32" : "F64"));
            CHECK(o.grads.tensors.at(p.name()).values.size() == p.value().size());
        }
    }
    return o;
}

void write_inputs(const fs::path& in, const gpt_case& g, bool with_targets, npy::int_width width)
{
    fs::create_directories(in);
    npy::save_ids((in / "tokens.npy").string(), g.tokens, width);
    if (with_targets)
    {
        npy::save_ids((in / "targets.npy").string(), g.targets, width);
    }
}

void check_logits_against_reference(const array<double>& logits, const gpt_case& g, double tolerance)
{
    const array<double> want = ref_logits(g.params, g.tokens);
    REQUIRE(logits.shape() == want.shape());
    double worst = 0;
    for (std::size_t k = 0; k < want.size(); ++k)
    {
        worst = std::max(worst, std::abs(logits.flat(k) - want.flat(k)));
    }
    CHECK(worst <= tolerance);
}

double reference_loss(const gpt_case& g)
{
    return ref_loss(ref_logits(g.params, g.tokens), g.targets);
}

// Central differences of the reference loss at a few entries of every parameter. The parameters are
// handles: an entry is moved and put back in g's own model.
void check_gradients_numerically(const io::safetensors_file& grads, const gpt_case& g, double tolerance)
{
    const double eps = 1e-5;
    for (parameter<double> p : g.params.named_parameters())
    {
        array<double>& values = p.value();
        const array<double>& analytic = grads.tensors.at(p.name()).values;
        for (std::size_t k : {std::size_t(0), values.size() / 2, values.size() - 1})
        {
            CAPTURE(p.name());
            CAPTURE(k);
            const double saved = values.flat(k);
            values.flat(k) = saved + eps;
            const double up = reference_loss(g);
            values.flat(k) = saved - eps;
            const double down = reference_loss(g);
            values.flat(k) = saved;
            const double numeric = (up - down) / (2 * eps);
            CHECK(std::abs(analytic.flat(k) - numeric) <= tolerance * (1.0 + std::abs(numeric)));
        }
    }
}
}  // namespace

TEST_CASE("xgrad-gpt-npy --help")
{
    temp_dir scratch;
    const tool_run r = run_tool(tool, scratch, "--help");
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(r.out.find("usage: xgrad-gpt-npy --checkpoint FILE --in DIR --out DIR") == 0);
    CHECK(r.out.find("--grad tape|manual") != std::string::npos);
    CHECK(r.out.find("targets.npy (B,T)") != std::string::npos);
}

TEST_CASE("xgrad-gpt-npy: logits, loss and gradients against a loop-written GPT and central differences")
{
    temp_dir scratch;
    // Grouped-query heads (H = 4, G = 2), two layers, T < block_size; int32 tokens and targets.
    const gpt_case g = make_case(scratch, {11, 6, 2, 8, 4, 2}, 2, 5, 3);
    const fs::path in = scratch.path / "in";
    write_inputs(in, g, true, npy::int_width::int32);

    const outputs tape64 = run_good(scratch, g, in, scratch.path / "tape64", "", true, "float64");
    check_logits_against_reference(tape64.logits, g, 1e-10);
    REQUIRE(tape64.loss);
    CHECK(std::abs(*tape64.loss - reference_loss(g)) <= 1e-10);
    check_gradients_numerically(tape64.grads, g, 1e-6);

    const outputs tape32 = run_good(scratch, g, in, scratch.path / "tape32", "--grad tape", true, "float32");
    CHECK(max_relative_difference(tape32.logits, tape64.logits) <= 1e-4);
    CHECK(std::abs(*tape32.loss - *tape64.loss) <= 1e-4);
    for (const auto& [name, t] : tape64.grads.tensors)
    {
        CAPTURE(name);
        CHECK(max_relative_difference(tape32.grads.tensors.at(name).values, t.values) <= 1e-3);
    }

    SUBCASE("without targets: logits only")
    {
        const fs::path in_tokens = scratch.path / "in_tokens";
        write_inputs(in_tokens, g, false, npy::int_width::int64);
        for (const char* dtype : {"float64", "float32"})
        {
            const outputs o = run_good(scratch, g, in_tokens, scratch.path / (std::string("logits_") + dtype),
                                       "", false, dtype);
            CHECK(max_relative_difference(o.logits, tape64.logits) <=
                  (std::string(dtype) == "float64" ? 0 : 1e-4));
        }
    }
    SUBCASE("every target ignored: loss 0, every gradient 0")
    {
        gpt_case ignored = g;
        ignored.targets = test::filled<std::int64_t>({2, 5}, -1);
        const fs::path in_ignored = scratch.path / "in_ignored";
        write_inputs(in_ignored, ignored, true, npy::int_width::int64);
        const outputs o =
          run_good(scratch, ignored, in_ignored, scratch.path / "ignored", "", true, "float64");
        CHECK(*o.loss == 0.0);
        for (const auto& [name, t] : o.grads.tensors)
        {
            CAPTURE(name);
            CHECK(test::max_abs(t.values) == 0.0);
        }
    }
    SUBCASE("T = block_size, B = 1, one layer, multi-query attention (G = 1)")
    {
        const gpt_case full = make_case(scratch, {5, 4, 1, 6, 3, 1}, 1, 4, 8);
        const fs::path in_full = scratch.path / "in_full";
        write_inputs(in_full, full, true, npy::int_width::int64);
        const outputs o = run_good(scratch, full, in_full, scratch.path / "full", "", true, "float64");
        check_logits_against_reference(o.logits, full, 1e-10);
        check_gradients_numerically(o.grads, full, 1e-6);
    }
}

TEST_CASE("xgrad-gpt-npy: --grad manual agrees with the tape (1e-10 relative in float64)")
{
    temp_dir scratch;
    const gpt_case g = make_case(scratch, {11, 6, 2, 8, 4, 2}, 2, 5, 4);
    const fs::path in = scratch.path / "in";
    write_inputs(in, g, true, npy::int_width::int64);
    for (const std::string dtype : {"float64", "float32"})
    {
        CAPTURE(dtype);
        const bool f64 = dtype == "float64";
        const outputs tape =
          run_good(scratch, g, in, scratch.path / ("tape_" + dtype), "--grad tape", true, dtype);
        const outputs manual =
          run_good(scratch, g, in, scratch.path / ("manual_" + dtype), "--grad manual", true, dtype);
        const double tolerance = f64 ? 1e-10 : 1e-4;
        CHECK(max_relative_difference(manual.logits, tape.logits) <= tolerance);
        REQUIRE(manual.loss);
        CHECK(std::abs(*manual.loss - *tape.loss) <= tolerance * std::max(1.0, std::abs(*tape.loss)));
        for (const auto& [name, t] : tape.grads.tensors)
        {
            CAPTURE(name);
            CHECK(max_relative_difference(manual.grads.tensors.at(name).values, t.values) <= tolerance);
        }
    }
}

TEST_CASE("xgrad-gpt-npy bad input: non-zero status, one line on stderr, no output left behind")
{
    temp_dir scratch;
    const gpt_case g = make_case(scratch, {7, 4, 1, 4, 2, 2}, 2, 3, 5);
    const fs::path good_in = scratch.path / "good";
    write_inputs(good_in, g, true, npy::int_width::int64);
    const std::string checkpoint = g.checkpoint;
    const io::safetensors_file good_checkpoint = io::read_safetensors(checkpoint);

    struct bad_case
    {
        std::string name;
        std::string needle;  // what the stderr line must mention
        std::function<void(const fs::path& in, const fs::path& model)> corrupt;  // on copies of both
        std::string flags = "";
    };
    const auto save_ids = [](const fs::path& file, const ids_t& ids) { npy::save_ids(file.string(), ids); };
    const auto edit_checkpoint =
      [&](const fs::path& model, const std::function<void(io::safetensors_file&)>& edit)
    {
        io::safetensors_file f = good_checkpoint;
        edit(f);
        io::write_safetensors(model.string(), f);
    };
    const std::vector<bad_case> cases = {
      {"token out of range", "tokens.npy: token 7 at (1, 2) is outside [0, V) with V = 7",
       [&](const fs::path& in, const fs::path&) {
           save_ids(in / "tokens.npy", ids_t{{0, 1, 2}, {3, 4, 7}});
       }},
      {"negative token", "tokens.npy: token -1 at (0, 0) is outside [0, V)",
       [&](const fs::path& in, const fs::path&) {
           save_ids(in / "tokens.npy", ids_t{{-1, 1, 2}, {3, 4, 5}});
       }},
      {"T > block_size", "tokens.npy: T = 5 (shape (2, 5)) is longer than the checkpoint's block_size = 4",
       [&](const fs::path& in, const fs::path&)
       {
           save_ids(in / "tokens.npy", xt::zeros<std::int64_t>({2, 5}));
           save_ids(in / "targets.npy", xt::zeros<std::int64_t>({2, 5}));
       }},
      {"1-D tokens", "tokens.npy: shape (3) must be 2-D (B, T)",
       [&](const fs::path& in, const fs::path&) {
           save_ids(in / "tokens.npy", ids_t{1, 2, 3});
       }},
      {"3-D tokens", "tokens.npy: shape (1, 2, 3) must be 2-D (B, T)",
       [&](const fs::path& in, const fs::path&) {
           save_ids(in / "tokens.npy", xt::zeros<std::int64_t>({1, 2, 3}));
       }},
      {"empty tokens", "tokens.npy: shape (2, 0) is empty",
       [&](const fs::path& in, const fs::path&) {
           save_ids(in / "tokens.npy", ids_t::from_shape({2, 0}));
       }},
      {"float tokens", "tokens.npy: dtype '<f8' (float64) is not supported; an integer array is needed",
       [&](const fs::path& in, const fs::path&) {
           npy::save((in / "tokens.npy").string(), array<double>{{0.0, 1.0, 2.0}, {3.0, 4.0, 5.0}});
       }},
      {"bool targets", "targets.npy: dtype '|b1' (bool) is not supported; an integer array is needed",
       [&](const fs::path& in, const fs::path&) {
           npy::save_bool((in / "targets.npy").string(), mask_t(xt::zeros<bool>({2, 3})));
       }},
      {"targets of another shape", "targets.npy: shape (3, 2) must be the shape of",
       [&](const fs::path& in, const fs::path&) {
           save_ids(in / "targets.npy", xt::zeros<std::int64_t>({3, 2}));
       }},
      {"target out of range", "targets.npy: target -2 at (0, 1) is outside [0, V) with V = 7 and is not -1",
       [&](const fs::path& in, const fs::path&) {
           save_ids(in / "targets.npy", ids_t{{0, -2, 0}, {0, 0, 0}});
       }},
      {"truncated tokens", "tokens.npy: truncated",
       [](const fs::path& in, const fs::path&)
       { fs::resize_file(in / "tokens.npy", fs::file_size(in / "tokens.npy") - 3); }},
      {"missing tokens", "tokens.npy: cannot open (No such file or directory)",
       [](const fs::path& in, const fs::path&) { fs::remove(in / "tokens.npy"); }},
      {"missing --in directory", "no such directory",
       [](const fs::path& in, const fs::path&) { fs::remove_all(in); }},
      {"missing checkpoint", ".safetensors: cannot open (No such file or directory)",
       [](const fs::path&, const fs::path& model) { fs::remove(model); }},
      {"corrupt checkpoint", ".safetensors: header length",
       [](const fs::path&, const fs::path& model)
       { std::ofstream(model, std::ios::binary) << "not a checkpoint"; }},
      {"truncated checkpoint", "outside the data buffer",
       [](const fs::path&, const fs::path& model) { fs::resize_file(model, fs::file_size(model) - 4); }},
      {"checkpoint with a missing tensor", "tensor 'blocks.0.attn.W_V' is missing",
       [&](const fs::path&, const fs::path& model)
       { edit_checkpoint(model, [](io::safetensors_file& f) { f.tensors.erase("blocks.0.attn.W_V"); }); }},
      {"checkpoint tensor of a wrong shape",
       "tensor 'wpe' has shape (3, 4), expected (block_size, d) = (4, 4)",
       [&](const fs::path&, const fs::path& model)
       {
           edit_checkpoint(model,
                           [](io::safetensors_file& f) {
                               f.tensors["wpe"].values = test::random_array({3, 4}, 1);
                           });
       }},
      {"checkpoint with d % H != 0", "heads = 3, kv_heads = 2) do not make a model",
       [&](const fs::path&, const fs::path& model)
       { edit_checkpoint(model, [](io::safetensors_file& f) { f.metadata["heads"] = "3"; }); }},
      {"checkpoint without sizes", "metadata has no 'block_size'",
       [&](const fs::path&, const fs::path& model)
       { edit_checkpoint(model, [](io::safetensors_file& f) { f.metadata.erase("block_size"); }); }},
      {"unknown variant value", "metadata 'norm' = 'batchnorm' is not one of layernorm, rmsnorm",
       [&](const fs::path&, const fs::path& model)
       { edit_checkpoint(model, [](io::safetensors_file& f) { f.metadata["norm"] = "batchnorm"; }); }},
      {"a tensor the variant does not have", "unknown tensor 'wpe' with shape (4, 4)",
       [&](const fs::path&, const fs::path& model)
       { edit_checkpoint(model, [](io::safetensors_file& f) { f.metadata["position"] = "none"; }); }},
      {"a tensor the variant needs", "tensor 'lm_head' is missing",
       [&](const fs::path&, const fs::path& model)
       { edit_checkpoint(model, [](io::safetensors_file& f) { f.metadata["tied_head"] = "false"; }); }},
      {"a shape the variant disagrees with", "tensor 'blocks.0.mlp.W_fc' has shape (4, 16), expected (d, h) = (4, 12)",
       [&](const fs::path&, const fs::path& model)
       { edit_checkpoint(model, [](io::safetensors_file& f) { f.metadata["mlp_hidden"] = "12"; }); }},
      {"dh odd with RoPE", "position = rope needs an even head width",
       [&](const fs::path&, const fs::path& model)
       {
           edit_checkpoint(model, [](io::safetensors_file& f) {
               f.metadata["position"] = "rope";
               f.metadata["heads"] = "4";  // dh = 1
           });
       }},
      {"unknown flag", "unknown option '--temperature' (see --help)", [](const fs::path&, const fs::path&) {},
       "--temperature 2"},
      {"bad --grad", "--grad: numeric not in {tape,manual}", [](const fs::path&, const fs::path&) {},
       "--grad numeric"},
      {"bad --dtype", "--dtype: float16 not in {float64,float32}", [](const fs::path&, const fs::path&) {},
       "--dtype float16"},
      {"flag without its value", "--grad: 1 required tape|manual missing",
       [](const fs::path&, const fs::path&) {}, "--grad"},
      {"stray argument", "unexpected argument 'extra' (see --help)", [](const fs::path&, const fs::path&) {},
       "extra"},
      {"--detect-anomaly with --grad manual", "--detect-anomaly watches the tape's ops",
       [](const fs::path&, const fs::path&) {}, "--detect-anomaly --grad manual"},
      {"control byte in an argument", "--dtype: \\x1b[31m not in {float64,float32}",
       [](const fs::path&, const fs::path&) {}, "--dtype \"$(printf '\\033[31m')\""},
    };

    int index = 0;
    for (const bad_case& c : cases)
    {
        CAPTURE(c.name);
        const fs::path in = scratch.path / ("in" + std::to_string(index));
        const fs::path model = scratch.path / ("model" + std::to_string(index) + ".safetensors");
        fs::copy(good_in, in, fs::copy_options::recursive);
        fs::copy_file(checkpoint, model);
        c.corrupt(in, model);
        for (const bool out_exists : {false, true})
        {
            CAPTURE(out_exists);
            const fs::path out = scratch.path / ("out" + std::to_string(index++));
            if (out_exists)
            {
                fs::create_directory(out);
            }
            const tool_run r = run_tool(tool, scratch, "--checkpoint " + quote(model) + " --in " + quote(in) +
                                                     " --out " + quote(out) + " " + c.flags);
            CAPTURE(r.err);
            CHECK(r.status == 2);
            CHECK(r.out.empty());
            CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
            CHECK((!r.err.empty() && r.err.back() == '\n'));
            CHECK(r.err.rfind("xgrad-gpt-npy: ", 0) == 0);
            CHECK(r.err.find(c.needle) != std::string::npos);
            CHECK(std::all_of(r.err.begin(), r.err.end() - 1, [](char ch) { return ch >= 0x20 && ch < 0x7f; }));
            CHECK(fs::exists(out) == out_exists);
            if (out_exists)
            {
                CHECK(fs::is_empty(out));
            }
        }
    }
}

TEST_CASE("xgrad-gpt-npy usage and output failures")
{
    temp_dir scratch;
    const gpt_case g = make_case(scratch, {7, 4, 1, 4, 2, 2}, 2, 3, 6);
    const fs::path in = scratch.path / "in";
    write_inputs(in, g, true, npy::int_width::int64);
    const std::string inputs = "--checkpoint " + quote(g.checkpoint) + " --in " + quote(in);

    SUBCASE("no arguments")
    {
        const tool_run r = run_tool(tool, scratch, "");
        CHECK(r.status == 2);
        CHECK(r.err == "xgrad-gpt-npy: missing required option --checkpoint (see --help)\n");
    }
    SUBCASE("an unknown flag is named even when required options are missing")
    {
        const tool_run r = run_tool(tool, scratch, "--in x --chekpoint m.safetensors");
        CHECK(r.status == 2);
        CHECK(r.err == "xgrad-gpt-npy: unknown option '--chekpoint' (see --help)\n");
        const tool_run attached = run_tool(tool, scratch, "--chekpoint=m.safetensors");
        CHECK(attached.err == "xgrad-gpt-npy: unknown option '--chekpoint' (see --help)\n");
    }
    SUBCASE("--out is a file")
    {
        const fs::path out = scratch.path / "a_file";
        std::ofstream(out) << "keep me";
        const tool_run r = run_tool(tool, scratch, inputs + " --out " + quote(out));
        CHECK(r.status == 2);
        CHECK(r.err.find("exists and is not a directory") != std::string::npos);
        CHECK(read_bytes(out) == "keep me");
    }
    SUBCASE("--out cannot be created: status 1, nothing created")
    {
        const fs::path blocker = scratch.path / "blocker";
        std::ofstream(blocker) << "x";
        const tool_run r = run_tool(tool, scratch, inputs + " --out " + quote(blocker / "sub" / "dir"));
        CHECK(r.status == 1);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(r.err.find("cannot create") != std::string::npos);
        CHECK(read_bytes(blocker) == "x");
    }
    SUBCASE("a failure while renaming the outputs into place removes those already placed")
    {
        const fs::path out = scratch.path / "nested" / "out";
        fs::create_directories(out / "grads.safetensors");  // a directory where the last output goes
        const tool_run r = run_tool(tool, scratch, inputs + " --out " + quote(out));
        CHECK(r.status == 1);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(r.err.find("grads.safetensors: is a directory") != std::string::npos);
        CHECK(listing(out) == std::set<std::string>{"grads.safetensors"});
    }
    SUBCASE("missing parent directories of --out are created, and not on failure")
    {
        const fs::path out = scratch.path / "p1" / "p2" / "out";
        const tool_run ok = run_tool(tool, scratch, inputs + " --out " + quote(out));
        CHECK(ok.status == 0);
        CHECK(ok.out.find("xgrad-gpt-npy: B=2 T=3 V=7 L=1 d=4 H=2 G=2, float64, tape backward, loss ") == 0);
        CHECK(listing(out) == std::set<std::string>{"logits.npy", "loss.npy", "grads.safetensors"});
        const tool_run bad = run_tool(tool, scratch, inputs + " --out " + quote(scratch.path / "q1" / "q2" / "out") + " --dtype float16");
        CHECK(bad.status == 2);
        CHECK_FALSE(fs::exists(scratch.path / "q1"));
    }
}

TEST_CASE("xgrad-gpt-npy --detect-anomaly: the same files when nothing is anomalous; an overflow is named")
{
    temp_dir scratch;
    const gpt_case g = make_case(scratch, {7, 4, 1, 4, 2, 2}, 2, 3, 9);
    const fs::path in = scratch.path / "in";
    write_inputs(in, g, true, npy::int_width::int64);
    run_good(scratch, g, in, scratch.path / "plain", "", true, "float64");
    run_good(scratch, g, in, scratch.path / "watched", "--detect-anomaly", true, "float64");
    for (const char* name : {"logits.npy", "loss.npy", "grads.safetensors"})
    {
        CAPTURE(name);
        CHECK(read_bytes(scratch.path / "plain" / name) == read_bytes(scratch.path / "watched" / name));
    }

    // Token embeddings of +-1e200: finite, but their variance, 1e400, is not. The fused layer norm's forward
    // stays finite (1 / sqrt(inf) = 0 gives a zero row); its backward does not, and is named.
    io::safetensors_file f = io::read_safetensors(g.checkpoint);
    auto& wte = f.tensors.at("wte").values;
    std::fill(wte.begin(), wte.end(), 1e200);
    for (std::size_t k = 0; k < wte.size(); k += 2)
    {
        wte.flat(k) = -1e200;
    }
    const fs::path model = scratch.path / "overflowing.safetensors";
    io::write_safetensors(model.string(), f);
    const fs::path out = scratch.path / "overflow";
    const tool_run r = run_tool(tool, scratch, "--checkpoint " + quote(model) + " --in " + quote(in) + " --out " +
                                             quote(out) + " --detect-anomaly");
    CAPTURE(r.err);
    CHECK(r.status == 3);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.rfind("xgrad-gpt-npy: anomaly in backward: ", 0) == 0);
    CHECK(r.err.find("layer_norm 'ln_f'") != std::string::npos);  // the walk meets the last norm first
    CHECK(r.err.find("; forward trace: ") != std::string::npos);
    CHECK_FALSE(fs::exists(out));
}

TEST_CASE("xgrad-gpt-npy runs every variant's checkpoint: logits and loss as the library's forward, gradients "
          "as central differences")
{
    temp_dir scratch;
    std::vector<models::gpt_config> configs(3, models::gpt_config{7, 4, 2, 8, 2, 1});
    configs[0].norm = models::norm_kind::rmsnorm;  // the Llama block
    configs[0].position = models::position_kind::rope;
    configs[0].mlp = models::mlp_kind::swiglu;
    configs[0].bias = models::bias_kind::none;
    configs[1].bias = models::bias_kind::all;      // GPT-2 with the exact GELU and an untied head
    configs[1].mlp = models::mlp_kind::gelu;
    configs[1].tied_head = false;
    configs[2].position = models::position_kind::none;
    configs[2].mlp_hidden = 12;
    unsigned seed = 40;
    for (const models::gpt_config& c : configs)
    {
        CAPTURE(models::describe(c));
        gpt_case g = make_case(scratch, c, 2, 3, seed++);
        const fs::path in = scratch.path / ("variant_in" + std::to_string(seed));
        const fs::path out = scratch.path / ("variant_out" + std::to_string(seed));
        write_inputs(in, g, true, npy::int_width::int32);
        const outputs o = run_good(scratch, g, in, out, "", true, "float64");
        tape<double> t;
        const auto want = models::gpt_forward(t, g.params, g.tokens, &g.targets);
        CHECK(max_relative_difference(o.logits, want.logits.value()) < 1e-12);
        REQUIRE(o.loss);
        CHECK(*o.loss == doctest::Approx(want.loss.item()).epsilon(1e-12));
        const double eps = 1e-5;
        for (parameter<double> p : g.params.named_parameters())
        {
            array<double>& values = p.value();
            for (std::size_t k : {std::size_t(0), values.size() - 1})
            {
                CAPTURE(p.name());
                const double saved = values.flat(k);
                auto loss_at = [&](double x) {
                    values.flat(k) = x;
                    tape<double> u;
                    return models::gpt_forward(u, g.params, g.tokens, &g.targets).loss.item();
                };
                const double numeric = (loss_at(saved + eps) - loss_at(saved - eps)) / (2 * eps);
                values.flat(k) = saved;
                CHECK(std::abs(o.grads.tensors.at(p.name()).values.flat(k) - numeric) <= 1e-6 * (1 + std::abs(numeric)));
            }
        }
    }
}
}  // namespace gpt_tool_test
