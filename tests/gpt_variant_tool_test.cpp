// xgrad-gpt-npy on the GPT variants, run as a user runs it: for every case of tests/data/gpt_variant_fixtures
// (PyTorch's float64 numbers, tests/fixtures/make_gpt_variant_fixtures.py), with --grad tape and --grad
// manual, in float64 and float32, the tool's logits.npy, loss.npy and grads.safetensors (every parameter
// the variant has, no other) equal the fixture's to rounding.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "io/checkpoint.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"

namespace gpt_variant_tool_test
{
using namespace xgrad;
namespace fs = std::filesystem;

namespace
{
const std::string tool = xgrad::test::program_dir() + "/xgrad-gpt-npy";
const fs::path fixtures_dir = fs::path(xgrad::test::source_dir()) / "tests" / "data" / "gpt_variant_fixtures";

// max |actual - expected| / max |expected| over one tensor; the denominator is at least `floor` (for a
// gradient that is 0 but for rounding, such as b_K's without rope: softmax ignores a shift of a row).
double relative_error(const array<double>& actual, const array<double>& expected, double floor = 0)
{
    REQUIRE(actual.shape() == expected.shape());
    double worst = 0;
    for (std::size_t i = 0; i < actual.size(); ++i)
    {
        worst = std::max(worst, std::abs(actual.flat(i) - expected.flat(i)));
    }
    return worst / std::max({test::max_abs(expected), floor, 1e-300});
}

std::vector<fs::path> case_dirs()
{
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(fixtures_dir))
    {
        dirs.push_back(e.path());
    }
    std::sort(dirs.begin(), dirs.end());
    return dirs;
}
}  // namespace

TEST_CASE("xgrad-gpt-npy gives PyTorch's logits, loss and gradients on every variant, tape and manual")
{
    const auto dirs = case_dirs();
    REQUIRE(dirs.size() >= 9);
    double worst64 = 0, worst32 = 0;
    for (const auto& dir : dirs)
    {
        const auto expected = io::read_safetensors((dir / "expected" / "grads.safetensors").string());
        const array<double> logits = npy::load_float<double>((dir / "expected" / "logits.npy").string());
        const array<double> loss = npy::load_float<double>((dir / "expected" / "loss.npy").string());
        double largest_gradient = 0;
        for (const auto& entry : expected.tensors)
        {
            largest_gradient = std::max(largest_gradient, test::max_abs(entry.second.values));
        }
        for (const std::string grad : {"tape", "manual"})
        {
            for (const std::string dtype : {"float64", "float32"})
            {
                CAPTURE(dir.filename().string());
                CAPTURE(grad);
                CAPTURE(dtype);
                test::temp_dir out;
                const std::string command = "'" + tool + "' --checkpoint '" + (dir / "model.safetensors").string() +
                                            "' --in '" + (dir / "in").string() + "' --out '" + out.path.string() +
                                            "' --grad " + grad + " --dtype " + dtype + " 2>'" + (out / "err") + "'";
                const int status = std::system(command.c_str());
                INFO(test::read_bytes(out / "err"));
                REQUIRE(WIFEXITED(status));
                REQUIRE(WEXITSTATUS(status) == 0);
                const double tolerance = dtype == "float64" ? 1e-11 : 2e-4;
                double worst = relative_error(npy::load_float<double>(out / "logits.npy"), logits);
                worst = std::max(worst, relative_error(npy::load_float<double>(out / "loss.npy"), loss));
                const auto grads = io::read_safetensors(out / "grads.safetensors");
                REQUIRE(grads.tensors.size() == expected.tensors.size());
                for (const auto& [name, tensor] : expected.tensors)
                {
                    CAPTURE(name);
                    REQUIRE(grads.tensors.count(name) == 1);
                    CHECK(grads.tensors.at(name).dtype == (dtype == "float64" ? "F64" : "F32"));
                    const double error = relative_error(grads.tensors.at(name).values, tensor.values,
                                                        1e-3 * largest_gradient);
                    worst = std::max(worst, error);
                }
                CHECK(worst < tolerance);
                (dtype == "float64" ? worst64 : worst32) = std::max(dtype == "float64" ? worst64 : worst32, worst);
            }
        }
    }
    MESSAGE("worst relative error against PyTorch: float64 " << worst64 << ", float32 " << worst32);
}

TEST_CASE("xgrad-gpt-npy's variant flags run a checkpoint's tensors as that variant: PyTorch's numbers again")
{
    // Each fixture's tensors saved as the variant's base model, then run with the variant's flags (and the
    // fixture's own values: the metadata keys of the same names).
    const std::pair<const char*, std::vector<std::string>> cases[] = {
        {"gpt2_relu2_softcap", {"mlp", "logit_softcap"}},
        {"llama_qk_norm_window", {"qk_norm", "attention_window"}},
        {"relu2_softcap_window_long", {"mlp", "logit_softcap", "attention_window"}},
    };
    for (const auto& [name, keys] : cases)
    {
        CAPTURE(name);
        const fs::path dir = fixtures_dir / name;
        io::checkpoint<double> ck = io::load_checkpoint<double>((dir / "model.safetensors").string());
        const models::gpt_config variant = ck.params.config;
        std::string args;
        for (const std::string& key : keys)
        {
            std::string flag = "--" + key;
            std::replace(flag.begin(), flag.end(), '_', '-');  // the tools' spelling of a key
            args += " " + flag + " " + models::config_metadata(variant).at(key);
        }
        models::gpt_config base = variant;
        base.mlp = variant.mlp == models::mlp_kind::relu2 ? models::mlp_kind::gelu_tanh : variant.mlp;
        base.qk_norm = models::qk_norm_kind::none;
        base.logit_softcap = {};
        base.attention_window = {};
        ck.params.config = base;
        test::temp_dir out;
        io::save_checkpoint((out / "base.safetensors"), ck.params);
        const std::string command = "'" + tool + "' --checkpoint '" + (out / "base.safetensors") + "' --in '" +
                                    (dir / "in").string() + "' --out '" + (out / "run") + "'" + args +
                                    " 2>'" + (out / "err") + "'";
        INFO(command);
        const int status = std::system(command.c_str());
        INFO(test::read_bytes(out / "err"));
        REQUIRE(WIFEXITED(status));
        REQUIRE(WEXITSTATUS(status) == 0);
        const array<double> logits = npy::load_float<double>((dir / "expected" / "logits.npy").string());
        CHECK(relative_error(npy::load_float<double>(out / "run/logits.npy"), logits) < 1e-11);
    }
}

TEST_CASE("xgrad-gpt-npy refuses a variant flag whose model has other tensors, in one line, exit 2")
{
    const fs::path dir = fixtures_dir / "gpt2_relu2_softcap";
    test::temp_dir out;
    const std::string command = "'" + tool + "' --checkpoint '" + (dir / "model.safetensors").string() + "' --in '" +
                                (dir / "in").string() + "' --out '" + (out / "run") +
                                "' --mlp swiglu 2>'" + (out / "err") + "'";
    const int status = std::system(command.c_str());
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 2);
    CHECK(test::read_bytes(out / "err") ==
          "xgrad-gpt-npy: run_as: mlp = swiglu needs other tensors than the checkpoint's, trained with mlp = relu2\n");
    CHECK_FALSE(fs::exists(out.path / "run"));
}
}  // namespace gpt_variant_tool_test
