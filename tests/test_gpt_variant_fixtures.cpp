// The GPT's architecture variants against PyTorch: tests/data/gpt_variant_fixtures/<case>/ holds small
// models of every variant (tests/fixtures/make_gpt_variant_fixtures.py, written from the specification's
// text) with PyTorch's float64 logits, loss and every parameter's gradient. The tape (fused ops and
// composed ones) and the hand-derived backward (models/gpt_manual.hpp) must give them to rounding in
// float64 and float32; the gradients cover every parameter the variant declares, and nothing else.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "io/checkpoint.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "models/gpt_manual.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"

namespace test_gpt_variant_fixtures
{
using namespace xgrad;
using namespace xgrad::models;
namespace fs = std::filesystem;

namespace
{
const fs::path fixtures_dir = fs::path(xgrad::test::source_dir()) / "tests" / "data" / "gpt_variant_fixtures";

struct fixture
{
    std::string name;
    fs::path dir;
    ids_t tokens, targets;
    array<double> logits;
    double loss = 0;
    std::map<std::string, array<double>> grads;
    double largest_gradient = 0;
};

struct result
{
    array<double> logits;
    double loss = 0;
    std::map<std::string, array<double>> grads;
};

std::vector<fixture> load_fixtures()
{
    std::vector<fixture> all;
    for (const auto& entry : fs::directory_iterator(fixtures_dir))
    {
        fixture f;
        f.dir = entry.path();
        f.name = f.dir.filename().string();
        f.tokens = npy::load_ids((f.dir / "in" / "tokens.npy").string());
        f.targets = npy::load_ids((f.dir / "in" / "targets.npy").string());
        f.logits = npy::load_float<double>((f.dir / "expected" / "logits.npy").string());
        f.loss = npy::load_float<double>((f.dir / "expected" / "loss.npy").string()).flat(0);
        for (auto& [name, stored] : io::read_safetensors((f.dir / "expected" / "grads.safetensors").string()).tensors)
        {
            f.largest_gradient = std::max(f.largest_gradient, test::max_abs(stored.values));
            f.grads[name] = std::move(stored.values);
        }
        all.push_back(std::move(f));
    }
    std::sort(all.begin(), all.end(), [](const fixture& a, const fixture& b) { return a.name < b.name; });
    return all;
}

template <class T>
result run_tape(const fixture& f, bool fused)
{
    io::checkpoint<T> checkpoint = io::load_checkpoint<T>((f.dir / "model.safetensors").string());
    tape<T> t;
    gpt_options options;
    options.fused = fused;
    gpt_result<T> r = gpt_forward(t, checkpoint.params, f.tokens, &f.targets, options);
    result out{xt::cast<double>(r.logits.value()), static_cast<double>(r.loss.value().flat(0)), {}};
    t.backward(r.loss);
    for (const parameter<T>& p : checkpoint.params.named_parameters())
    {
        out.grads[p.name()] = xt::cast<double>(p.grad());
    }
    return out;
}

template <class T>
result run_manual(const fixture& f)
{
    io::checkpoint<T> checkpoint = io::load_checkpoint<T>((f.dir / "model.safetensors").string());
    auto forward = manual::gpt_forward(checkpoint.params, f.tokens, &f.targets);
    result out{xt::cast<double>(forward.logits), static_cast<double>(forward.loss), {}};
    for (const auto& [name, grad] : manual::gpt_backward(forward.cache).parameters())
    {
        out.grads[name] = xt::cast<double>(grad);
    }
    return out;
}

// max |actual - expected| / max(max |expected|, floor): the relative error of a whole tensor.
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

// The worst relative error of `r` against the fixture over logits, loss and every gradient; the gradient
// names must be exactly the fixture's. A gradient's floor is 1e-3 of the case's largest one (a gradient
// that is 0 but for rounding: b_K's without rope, W_Q's and W_K's at T = 1).
double worst_error(const fixture& f, const result& r, std::string& where)
{
    double worst = relative_error(r.logits, f.logits);
    where = "logits";
    const double loss_error = std::abs(r.loss - f.loss) / std::abs(f.loss);
    if (loss_error > worst)
    {
        worst = loss_error, where = "loss";
    }
    CHECK(r.grads.size() == f.grads.size());
    for (const auto& [name, expected] : f.grads)
    {
        CAPTURE(name);
        REQUIRE(r.grads.count(name) == 1);
        const double e = relative_error(r.grads.at(name), expected, 1e-3 * f.largest_gradient);
        if (e > worst)
        {
            worst = e, where = name;
        }
    }
    return worst;
}

template <class T>
void check_every_path(double tolerance)
{
    const auto fixtures = load_fixtures();
    REQUIRE(fixtures.size() >= 9);
    for (const std::string path : {"tape fused", "tape composed", "manual"})
    {
        double worst = 0;
        std::string worst_where;
        for (const fixture& f : fixtures)
        {
            CAPTURE(f.name);
            CAPTURE(path);
            const result r = path == "manual" ? run_manual<T>(f) : run_tape<T>(f, path == "tape fused");
            std::string where;
            const double e = worst_error(f, r, where);
            CHECK(e < tolerance);
            if (e >= worst)
            {
                worst = e, worst_where = f.name + " " + where;
            }
        }
        MESSAGE(path << " (" << (sizeof(T) == 8 ? "float64" : "float32") << "): worst relative error " << worst
                     << " at " << worst_where);
    }
}
}  // namespace

TEST_CASE("GPT variants in float64: tape (fused and composed) and manual equal PyTorch to 1e-12")
{
    check_every_path<double>(1e-12);
}

TEST_CASE("GPT variants in float32: tape (fused and composed) and manual equal PyTorch to 1e-4")
{
    check_every_path<float>(1e-4);
}
}  // namespace test_gpt_variant_fixtures
