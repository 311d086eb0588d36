// Reference fixtures for the whole GPT from an independent implementation: tests/data/gpt_fixtures/<case>/
// holds small models computed in float64 with PyTorch autograd (tests/fixtures/make_gpt_fixtures.py, written
// from docs/spec.md only). The tape (models::gpt_forward, fused and composed) and the hand-derived backward
// (models::manual) must give PyTorch's logits, loss and the gradient of every parameter to 1e-10 relative.
// Layout per case, as xgrad-gpt-npy reads and writes it: model.safetensors (the checkpoint), in/tokens.npy
// and in/targets.npy, expected/logits.npy, expected/loss.npy and expected/grads.safetensors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "models/gpt.hpp"
#include "models/gpt_manual.hpp"
#include "models/manual_faults.hpp"
#include "source_dir.hpp"

namespace test_gpt_fixtures
{
using namespace xgrad;
using namespace xgrad::models;
namespace fs = std::filesystem;

namespace
{
const fs::path fixtures_dir = fs::path(xgrad::test::source_dir()) / "tests" / "data" / "gpt_fixtures";

// The relative tolerance: max |xgrad - torch| over a tensor, divided by max |torch| over it (or the plain
// difference when the tensor is all zeros).
constexpr double tolerance = 1e-10;
// float32 against the float64 fixtures: rounding of ~6e-8 per operation, amplified by a few layers (the
// worst seen is about 2e-6).
constexpr double float32_tolerance = 2e-5;

const char* const case_names[] = {"one_layer", "three_layers", "gqa",          "mqa",   "t1",
                                  "full_block", "ignored_some", "ignored_all", "batch1"};

// What PyTorch computed for one case.
struct fixture
{
    std::string name;
    fs::path dir;
    ids_t tokens, targets;
    array<double> logits;
    double loss = 0;
    std::map<std::string, array<double>> grads;  // by docs/spec.md parameter name
    bool every_target_ignored = false;
};

// What one xgrad path computed, in double whatever T it ran in.
struct result
{
    array<double> logits;
    double loss = 0;
    std::map<std::string, array<double>> grads;
};

// The worst relative difference seen over every tensor one TEST_CASE compared.
struct worst_difference
{
    double relative = 0;
    std::string where;

    void see(double r, const std::string& fixture_name, const std::string& tensor)
    {
        if (r >= relative)
        {
            relative = r;
            where = fixture_name + " " + tensor;
        }
    }
};

fixture load_fixture(const std::string& name)
{
    fixture f;
    f.name = name;
    f.dir = fixtures_dir / name;
    f.tokens = npy::load_ids((f.dir / "in" / "tokens.npy").string());
    f.targets = npy::load_ids((f.dir / "in" / "targets.npy").string());
    f.logits = npy::load_float<double>((f.dir / "expected" / "logits.npy").string());
    const array<double> loss = npy::load_float<double>((f.dir / "expected" / "loss.npy").string());
    REQUIRE(loss.dimension() == 0);
    f.loss = loss.flat(0);
    for (auto& [tensor_name, stored] : io::read_safetensors((f.dir / "expected" / "grads.safetensors").string()).tensors)
    {
        f.grads[tensor_name] = std::move(stored.values);
    }
    f.every_target_ignored = std::all_of(f.targets.begin(), f.targets.end(), [](std::int64_t t) { return t == -1; });
    return f;
}

template <class T>
array<double> to_double(const array<T>& a)
{
    return xt::cast<double>(a);
}

// The composed model on a tape: forward with targets, backward from the loss, every parameter's gradient.
template <class T>
result run_tape(const fixture& f, const gpt_options& options)
{
    io::checkpoint<T> checkpoint = io::load_checkpoint<T>((f.dir / "model.safetensors").string());
    tape<T> t;
    gpt_result<T> r = gpt_forward(t, checkpoint.params, f.tokens, &f.targets, options);
    REQUIRE(r.loss.valid());
    REQUIRE(r.loss.value().size() == 1);
    result out{to_double(r.logits.value()), static_cast<double>(r.loss.value().flat(0)), {}};
    t.backward(r.loss);
    for (const parameter<T>& p : checkpoint.params.named_parameters())
    {
        out.grads[p.name()] = to_double(p.grad());
    }
    return out;
}

// The hand-derived forward and backward of the whole model, on plain arrays; `broken` makes one of its
// deliberate mistakes.
template <class T>
result run_manual(const fixture& f, manual::broken_rule broken = manual::broken_rule::none)
{
    io::checkpoint<T> checkpoint = io::load_checkpoint<T>((f.dir / "model.safetensors").string());
    auto forward = manual::gpt_forward(checkpoint.params, f.tokens, &f.targets);
    REQUIRE(forward.has_loss);
    result out{to_double(forward.logits), static_cast<double>(forward.loss), {}};
    for (const auto& [name, grad] : manual::gpt_backward(forward.cache, broken).parameters())
    {
        out.grads[name] = to_double(grad);
    }
    return out;
}

bool all_finite(const array<double>& a)
{
    return std::all_of(a.begin(), a.end(), [](double v) { return std::isfinite(v); });
}

// max |actual - expected| / max |expected| (the plain difference when `expected` is all zeros).
double relative_difference(const array<double>& actual, const array<double>& expected)
{
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
    {
        diff = std::max(diff, std::abs(actual.flat(i) - expected.flat(i)));
        scale = std::max(scale, std::abs(expected.flat(i)));
    }
    return scale > 0 ? diff / scale : diff;
}

// Compares one tensor with PyTorch's: same shape, finite, max |a - b| <= tol * max |b|. With
// `exact_zeros`, every value PyTorch has as exactly 0 must be exactly 0 here too.
void check_tensor(const fixture& f, const std::string& name, const array<double>& actual,
                  const array<double>& expected, double tol, worst_difference& worst, bool exact_zeros = false)
{
    CAPTURE(f.name);
    CAPTURE(name);
    REQUIRE(to_shape(actual.shape()) == to_shape(expected.shape()));
    CHECK(all_finite(expected));
    CHECK(all_finite(actual));
    const double relative = relative_difference(actual, expected);
    worst.see(relative, f.name, name);
    CAPTURE(relative);
    CHECK(relative <= tol);
    if (exact_zeros)
    {
        std::size_t zeros_missed = 0;
        for (std::size_t i = 0; i < expected.size(); ++i)
        {
            zeros_missed += expected.flat(i) == 0.0 && actual.flat(i) != 0.0;
        }
        CHECK(zeros_missed == 0);
    }
}

void check_against_torch(const fixture& f, const result& r, double tol, worst_difference& worst)
{
    check_tensor(f, "logits", r.logits, f.logits, tol, worst);
    // docs/spec.md: every target ignored -> the loss is exactly 0 and every gradient exactly 0, never NaN.
    const bool exact = f.every_target_ignored;
    array<double> loss = xt::zeros<double>(shape_t{});
    loss.flat(0) = r.loss;
    array<double> expected_loss = xt::zeros<double>(shape_t{});
    expected_loss.flat(0) = f.loss;
    check_tensor(f, "loss", loss, expected_loss, tol, worst, exact);
    CHECK(r.grads.size() == f.grads.size());
    for (const auto& [name, expected] : f.grads)
    {
        CAPTURE(name);
        REQUIRE(r.grads.count(name) == 1);
        check_tensor(f, "grad " + name, r.grads.at(name), expected, tol, worst, exact);
    }
}

void report(const std::string& path, const worst_difference& worst)
{
    std::ostringstream line;
    line << path << ": worst relative difference from PyTorch " << worst.relative << " (" << worst.where << ")";
    MESSAGE(line.str());
}
}  // namespace

TEST_CASE("the GPT fixture cases are all there and each checkpoint loads with the gradients' names")
{
    for (const char* name : case_names)
    {
        const fs::path dir = fixtures_dir / name;
        CAPTURE(dir.string());
        REQUIRE(fs::is_regular_file(dir / "model.safetensors"));
        REQUIRE(fs::is_regular_file(dir / "in" / "tokens.npy"));
        REQUIRE(fs::is_regular_file(dir / "in" / "targets.npy"));
        REQUIRE(fs::is_regular_file(dir / "expected" / "logits.npy"));
        REQUIRE(fs::is_regular_file(dir / "expected" / "loss.npy"));
        REQUIRE(fs::is_regular_file(dir / "expected" / "grads.safetensors"));

        const fixture f = load_fixture(name);
        const io::checkpoint<double> checkpoint = io::load_checkpoint<double>((dir / "model.safetensors").string());
        const gpt_config& config = checkpoint.params.config;
        CHECK(config.vocab_size == 11);
        CHECK(config.block_size == 8);
        CHECK(config.d_model == 8);
        // The gradients are stored under exactly the parameters' names and shapes.
        const auto params = checkpoint.params.named_parameters();
        CHECK(params.size() == f.grads.size());
        for (const parameter<double>& p : params)
        {
            CAPTURE(p.name());
            REQUIRE(f.grads.count(p.name()) == 1);
            CHECK(to_shape(f.grads.at(p.name()).shape()) == to_shape(p.value().shape()));
        }
        // Tokens and targets agree in shape, T fits the context, logits are (B, T, V).
        REQUIRE(f.tokens.dimension() == 2);
        CHECK(to_shape(f.targets.shape()) == to_shape(f.tokens.shape()));
        CHECK(f.tokens.shape()[1] <= config.block_size);
        CHECK(to_shape(f.logits.shape()) == shape_t{f.tokens.shape()[0], f.tokens.shape()[1], config.vocab_size});
    }
    // The cases cover what they are named for.
    CHECK(io::load_checkpoint<double>((fixtures_dir / "gqa" / "model.safetensors").string()).params.config.kv_head_count() == 2);
    CHECK(io::load_checkpoint<double>((fixtures_dir / "mqa" / "model.safetensors").string()).params.config.kv_head_count() == 1);
    CHECK(load_fixture("t1").tokens.shape()[1] == 1);
    CHECK(load_fixture("full_block").tokens.shape()[1] == 8);
    CHECK(load_fixture("ignored_all").every_target_ignored);
    CHECK(load_fixture("ignored_all").loss == 0.0);
}

TEST_CASE("tape (fused ops): logits, loss and every parameter gradient equal PyTorch's on every GPT fixture")
{
    worst_difference worst;
    for (const char* name : case_names)
    {
        const fixture f = load_fixture(name);
        check_against_torch(f, run_tape<double>(f, gpt_options{true}), tolerance, worst);
    }
    report("tape, fused", worst);
}

TEST_CASE("tape (composed from primitives): logits, loss and every parameter gradient equal PyTorch's")
{
    worst_difference worst;
    for (const char* name : case_names)
    {
        const fixture f = load_fixture(name);
        check_against_torch(f, run_tape<double>(f, gpt_options{false}), tolerance, worst);
    }
    report("tape, composed", worst);
}

TEST_CASE("hand-derived backward: logits, loss and every parameter gradient equal PyTorch's on every GPT fixture")
{
    worst_difference worst;
    for (const char* name : case_names)
    {
        const fixture f = load_fixture(name);
        check_against_torch(f, run_manual<double>(f), tolerance, worst);
    }
    report("hand-derived", worst);
}

TEST_CASE("float32: the tape and the hand-derived backward stay close to PyTorch's float64 values")
{
    worst_difference worst_tape, worst_manual;
    for (const char* name : case_names)
    {
        const fixture f = load_fixture(name);
        check_against_torch(f, run_tape<float>(f, gpt_options{}), float32_tolerance, worst_tape);
        check_against_torch(f, run_manual<float>(f), float32_tolerance, worst_manual);
    }
    report("tape, float32", worst_tape);
    report("hand-derived, float32", worst_manual);
}

TEST_CASE("the fixtures catch each deliberate mistake of the hand-derived backward")
{
    // A mistake counts as caught when some parameter gradient of some case misses PyTorch's by far more
    // than the tolerance. (The cross-entropy mistake shows only where targets are ignored; the encoder's
    // where a token repeats or the tied head adds its part.)
    for (manual::broken_rule rule : manual::breakable_rules(gpt_config{}))  // the default model's rules
    {
        CAPTURE(manual::to_string(rule));
        double worst = 0;
        for (const char* name : case_names)
        {
            const fixture f = load_fixture(name);
            const result r = run_manual<double>(f, rule);
            for (const auto& [param, expected] : f.grads)
            {
                worst = std::max(worst, relative_difference(r.grads.at(param), expected));
            }
        }
        CHECK(worst > 1e-3);
    }
}
}  // namespace test_gpt_fixtures
