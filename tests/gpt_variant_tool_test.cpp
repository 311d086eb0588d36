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

#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"

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
