// Optimisers, gradient clipping and the learning-rate schedule (optim/optim.hpp).
// tests/data/optim_fixtures/ holds five steps of torch.optim in float64 (written by
// tests/fixtures/make_optim_fixtures.py from docs/spec.md and torch): every step's parameters, clip_grad_norm_'s
// norms and the final optimiser state must agree to 1e-12 relative. Around them: the schedule's boundaries by
// hand, weight decay only on rank >= 2, bit-for-bit resume through export/import, float32, errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/npy.hpp"
#include "optim/optim.hpp"
#include "source_dir.hpp"

namespace test_optim
{
using namespace xgrad;
using namespace xgrad::optim;
namespace fs = std::filesystem;

namespace
{
const fs::path data_dir = fs::path(xgrad::test::source_dir()) / "tests" / "data" / "optim_fixtures";

// The fixture's parameters, in this order: (3, 4) and (2, 3, 2) are decayed, the (4,) vector is not.
const std::vector<std::string> parameter_names = {"linear.weight", "linear.bias", "conv.weight"};
constexpr std::size_t steps = 5;
constexpr double max_norm = 1.0;  // the clip cases' max_norm

// max |actual - expected| over a tensor, divided by max |expected| over it (as tests/test_fixtures.cpp).
constexpr double tolerance = 1e-12;

const double not_a_number = std::numeric_limits<double>::quiet_NaN();

// The cases of make_optim_fixtures.py, with the same hyperparameters.
struct optim_case
{
    std::string name;
    std::optional<sgd_options> sgd;
    std::optional<adam_options> adam;
    bool clip = false;  // clip_grad_norm(max_norm) before each step
};

const std::vector<optim_case> cases = {
    {"sgd_momentum", sgd_options{0.1, 0.9, false, 0.0}, std::nullopt},
    {"sgd_nesterov", sgd_options{0.1, 0.9, true, 0.0}, std::nullopt},
    {"sgd_momentum_decay", sgd_options{0.1, 0.9, false, 0.1}, std::nullopt},
    {"sgd_nesterov_decay", sgd_options{0.1, 0.9, true, 0.1}, std::nullopt},
    {"adam", std::nullopt, adam_options{0.01, 0.9, 0.999, 1e-8, 0.0, false}},
    {"adam_l2_decay", std::nullopt, adam_options{0.01, 0.9, 0.999, 1e-8, 0.1, false}},
    {"adamw", std::nullopt, adamw_options(0.01, 0.1, 0.9, 0.95, 1e-8)},
    {"adamw_clip_schedule", std::nullopt, adamw_options(0.01, 0.1, 0.9, 0.95, 1e-8), true},
};

const optim_case& find_case(const std::string& name)
{
    return *std::find_if(cases.begin(), cases.end(), [&](const optim_case& c) { return c.name == name; });
}

template <class T>
std::unique_ptr<optimiser<T>> make_optimiser(const optim_case& c, std::vector<parameter<T>> params)
{
    if (c.sgd)
    {
        return std::make_unique<sgd<T>>(std::move(params), *c.sgd);
    }
    return std::make_unique<adam<T>>(std::move(params), *c.adam);
}

template <class T>
array<T> load(const fs::path& path)
{
    return npy::load_float<T>(path.string());
}

// Entry k of a (steps, *shape) stack.
template <class T>
array<T> stack_entry(const array<T>& stacked, std::size_t k)
{
    const shape_t shape(stacked.shape().begin() + 1, stacked.shape().end());
    array<T> out = array<T>::from_shape(shape);
    std::copy_n(stacked.data() + k * out.size(), out.size(), out.data());
    return out;
}

// The fixture's parameter `name` after each step: (steps, *shape).
array<double> load_after(const optim_case& c, const std::string& name)
{
    return load<double>(data_dir / c.name / "after" / (name + ".npy"));
}

template <class T>
std::vector<parameter<T>> initial_parameters()
{
    std::vector<parameter<T>> params;
    for (const std::string& name : parameter_names)
    {
        params.emplace_back(load<T>(data_dir / "initial" / (name + ".npy")), name);
    }
    return params;
}

// Fresh parameters holding copies of the values (what loading a checkpoint gives).
template <class T>
std::vector<parameter<T>> copies_of(const std::vector<parameter<T>>& params)
{
    std::vector<parameter<T>> out;
    for (const parameter<T>& p : params)
    {
        out.emplace_back(array<T>(p.value()), p.name());
    }
    return out;
}

// The fixture's gradients and learning rates, in T.
template <class T>
struct fixture_inputs
{
    std::vector<array<T>> grads;  // per parameter, (steps, *shape)
    array<double> lrs;            // (steps,)

    explicit fixture_inputs(const optim_case& c) : lrs(load<double>(data_dir / c.name / "lr.npy"))
    {
        for (const std::string& name : parameter_names)
        {
            grads.push_back(load<T>(data_dir / "grads" / (name + ".npy")));
        }
    }
};

// One training-loop step k (from 0) as the fixture script takes it: gradients in, clip, lr, step.
// Returns the norm clip_grad_norm gave, or NaN without clipping.
template <class T>
double take_step(const optim_case& c, optimiser<T>& opt, std::vector<parameter<T>>& params,
                 const fixture_inputs<T>& inputs, std::size_t k)
{
    for (std::size_t i = 0; i < params.size(); ++i)
    {
        params[i].grad() = stack_entry(inputs.grads[i], k);
    }
    const double norm = c.clip ? clip_grad_norm(params, max_norm) : not_a_number;
    opt.set_lr(inputs.lrs(k));
    opt.step();
    return norm;
}

template <class T>
struct run_result
{
    std::vector<std::vector<array<T>>> after;  // [step][parameter]
    std::vector<double> norms;
    named_tensors<T> state;  // after the last step
};

template <class T>
run_result<T> run_case(const optim_case& c)
{
    const fixture_inputs<T> inputs(c);
    std::vector<parameter<T>> params = initial_parameters<T>();
    const auto opt = make_optimiser(c, params);
    run_result<T> result;
    for (std::size_t k = 0; k < steps; ++k)
    {
        result.norms.push_back(take_step(c, *opt, params, inputs, k));
        result.after.emplace_back();
        for (const parameter<T>& p : params)
        {
            result.after.back().push_back(p.value());
        }
    }
    result.state = opt->export_state();
    return result;
}

template <class T>
double relative_error(const array<T>& actual, const array<double>& expected)
{
    REQUIRE(to_shape(actual.shape()) == to_shape(expected.shape()));
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
    {
        const double difference = std::abs(static_cast<double>(actual.flat(i)) - expected.flat(i));
        worst = std::isnan(difference) ? std::numeric_limits<double>::infinity()
                                       : std::max(worst, difference);
        scale = std::max(scale, std::abs(expected.flat(i)));
    }
    return scale > 0 ? worst / scale : worst;
}

// Every element identical, bit for bit.
template <class T>
bool same_bits(const array<T>& a, const array<T>& b)
{
    return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

std::set<std::string> state_files(const optim_case& c)
{
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(data_dir / c.name))
    {
        const std::string file = entry.path().filename().string();
        if (file.rfind("optim.", 0) == 0)
        {
            names.insert(file.substr(0, file.size() - 4));  // without ".npy"
        }
    }
    return names;
}

template <class T>
std::set<std::string> names_of(const named_tensors<T>& tensors)
{
    std::set<std::string> names;
    for (const auto& entry : tensors)
    {
        names.insert(entry.first);
    }
    return names;
}

template <class T>
array<T> values(std::initializer_list<T> list, const shape_t& shape)
{
    array<T> a = array<T>::from_shape(shape);
    std::copy(list.begin(), list.end(), a.begin());
    return a;
}

template <class T>
array<T> scalar(T value)
{
    array<T> a = array<T>::from_shape(shape_t{});
    a() = value;
    return a;
}
}  // namespace

TEST_CASE("every case of the fixture folder is listed here")
{
    std::set<std::string> on_disk, listed;
    for (const auto& entry : fs::directory_iterator(data_dir))
    {
        const std::string name = entry.path().filename().string();
        if (entry.is_directory() && name != "initial" && name != "grads")
        {
            on_disk.insert(name);
        }
    }
    for (const optim_case& c : cases)
    {
        listed.insert(c.name);
    }
    CHECK(on_disk == listed);
}

TEST_CASE("SGD, Adam and AdamW follow torch.optim step by step, with clipping and a scheduled lr")
{
    for (const optim_case& c : cases)
    {
        CAPTURE(c.name);
        const run_result<double> result = run_case<double>(c);
        for (std::size_t i = 0; i < parameter_names.size(); ++i)
        {
            CAPTURE(parameter_names[i]);
            const array<double> expected = load_after(c, parameter_names[i]);
            for (std::size_t k = 0; k < steps; ++k)
            {
                CAPTURE(k + 1);
                CHECK(relative_error(result.after[k][i], stack_entry(expected, k)) <= tolerance);
            }
        }
        if (c.clip)
        {
            const array<double> norms = load<double>(data_dir / c.name / "grad_norm.npy");
            for (std::size_t k = 0; k < steps; ++k)
            {
                CHECK(std::abs(result.norms[k] - norms(k)) <= tolerance * norms(k));
            }
        }
        // The state under xgrad's names is torch's state (momentum_buffer, exp_avg, exp_avg_sq, step).
        CHECK(names_of(result.state) == state_files(c));
        for (const std::string& name : state_files(c))
        {
            CAPTURE(name);
            const array<double> expected = load<double>(data_dir / c.name / (name + ".npy"));
            CHECK(relative_error(result.state.at(name), expected) <= tolerance);
        }
    }
}

TEST_CASE("the scheduled fixture case took its learning rates from the docs/spec.md schedule X=0.01, W=2, D=4")
{
    const array<double> lrs = load<double>(data_dir / "adamw_clip_schedule" / "lr.npy");
    const lr_schedule schedule{0.01, 2, 4};
    for (std::size_t k = 0; k < steps; ++k)
    {
        CHECK(std::abs(schedule.at(static_cast<std::int64_t>(k) + 1) - lrs(k)) <= tolerance * lrs(k));
    }
}

TEST_CASE("the learning-rate schedule matches the fixture table over steps 1 .. D + 5")
{
    const array<double> table = load<double>(data_dir / "lr_schedule.npy");  // rows X, W, D, s, lr
    REQUIRE(table.dimension() == 2);
    REQUIRE(table.shape()[1] == 5);
    REQUIRE(table.shape()[0] > 100);
    for (std::size_t r = 0; r < table.shape()[0]; ++r)
    {
        const lr_schedule schedule{table(r, 0), static_cast<std::int64_t>(table(r, 1)),
                                   static_cast<std::int64_t>(table(r, 2))};
        const auto s = static_cast<std::int64_t>(table(r, 3));
        CAPTURE(schedule.peak_lr);
        CAPTURE(schedule.warmup);
        CAPTURE(schedule.decay_steps);
        CAPTURE(s);
        CHECK(std::abs(schedule.at(s) - table(r, 4)) <= tolerance * table(r, 4));
    }
}

TEST_CASE("the schedule at its boundary steps, by hand")
{
    SUBCASE("X = 1, W = 2, D = 4")
    {
        const lr_schedule schedule{1.0, 2, 4};
        CHECK(schedule.at(1) == 0.5);                                  // X s / W
        CHECK(schedule.at(2) == 1.0);                                  // s = W: the peak
        CHECK(schedule.at(3) == doctest::Approx(0.55).epsilon(1e-15));  // s = W + 1: halfway, cos(pi/2) = 0
        CHECK(schedule.at(4) == 0.1);                                  // s = D: cos(pi) = -1, X / 10
        CHECK(schedule.at(5) == 0.1);                                  // s = D + 1
        CHECK(schedule.at(1000000) == 0.1);
    }
    SUBCASE("W = 10, D = 100: the first decay step is just below the peak")
    {
        const lr_schedule schedule{6e-4, 10, 100};
        CHECK(schedule.at(10) == doctest::Approx(6e-4).epsilon(1e-15));
        // 6e-5 + 0.5 (5.4e-4) (1 + cos(pi / 90)), cos(pi / 90) = 0.99939082701909573
        CHECK(schedule.at(11) == doctest::Approx(6e-5 + 2.7e-4 * 1.99939082701909573).epsilon(1e-14));
        CHECK(schedule.at(100) == doctest::Approx(6e-5).epsilon(1e-15));
        CHECK(schedule.at(101) == doctest::Approx(6e-5).epsilon(1e-15));
    }
    SUBCASE("W = 0: no warm-up, the cosine starts at step 1")
    {
        const lr_schedule schedule{1.0, 0, 4};
        // 0.1 + 0.45 (1 + cos(pi / 4)), cos(pi / 4) = 0.70710678118654752
        CHECK(schedule.at(1) == doctest::Approx(0.1 + 0.45 * 1.70710678118654752).epsilon(1e-15));
        CHECK(schedule.at(2) == doctest::Approx(0.55).epsilon(1e-15));
        CHECK(schedule.at(4) == 0.1);
        CHECK(schedule.at(5) == 0.1);
    }
    SUBCASE("W >= D: the warm-up, then X / 10")
    {
        const lr_schedule schedule{1.0, 5, 3};
        CHECK(schedule.at(3) == 0.6);
        CHECK(schedule.at(5) == 1.0);
        CHECK(schedule.at(6) == 0.1);
        const lr_schedule equal{1.0, 4, 4};
        CHECK(equal.at(4) == 1.0);
        CHECK(equal.at(5) == 0.1);
    }
    SUBCASE("bad settings")
    {
        CHECK_THROWS_WITH_AS(lr_schedule({1.0, 2, 4}).at(-1), doctest::Contains("steps count from 1"),
                             std::invalid_argument);
        CHECK_THROWS_AS(lr_schedule({1.0, 2, 4, -0.1}).at(1), std::invalid_argument);
        CHECK_THROWS_AS(lr_schedule({-1.0, 2, 4}).at(1), std::invalid_argument);
        CHECK_THROWS_AS(lr_schedule({not_a_number, 2, 4}).at(1), std::invalid_argument);
        CHECK_THROWS_AS(lr_schedule({1.0, -1, 4}).at(1), std::invalid_argument);
        CHECK_THROWS_AS(lr_schedule({1.0, 2, -4}).at(1), std::invalid_argument);
    }
}

TEST_CASE("step 0 is the formula at s = 0, and a given min_lr replaces X / 10")
{
    CHECK(lr_schedule({1.0, 2, 4}).at(0) == 0.0);  // X 0 / W
    CHECK(lr_schedule({1.0, 0, 4}).at(0) == 1.0);  // no warm-up: the cosine at progress 0 is X
    const lr_schedule floor{1.0, 0, 4, 0.2};
    // 0.2 + 0.4 (1 + cos(pi / 2)) = 0.6 at s = 2; 0.2 from D on.
    CHECK(floor.at(2) == doctest::Approx(0.6).epsilon(1e-15));
    CHECK(floor.at(4) == 0.2);
    CHECK(floor.at(9) == 0.2);
    CHECK(make_lr_schedule(1.0, 4, 0, std::nullopt, 0.0).at(9) == 0.0);
}

TEST_CASE("docs/spec.md's schedule defaults: D = N, W = min(100, D / 10)")
{
    CHECK(default_decay_steps(50) == 50);
    CHECK(default_warmup(50) == 5);
    CHECK(default_warmup(9) == 0);
    CHECK(default_warmup(1009) == 100);
    CHECK(default_warmup(5000) == 100);

    const lr_schedule run = make_lr_schedule(1e-3, 120);
    CHECK(run.peak_lr == 1e-3);
    CHECK(run.decay_steps == 120);
    CHECK(run.warmup == 12);
    // docs/spec.md's resume example: --steps 60 --decay-steps 120 has the schedule of --steps 120.
    const lr_schedule first_half = make_lr_schedule(1e-3, 60, std::nullopt, 120);
    CHECK(first_half.decay_steps == 120);
    CHECK(first_half.warmup == 12);
    for (std::int64_t s = 1; s <= 60; ++s)
    {
        CHECK(first_half.at(s) == run.at(s));
    }
    const lr_schedule given = make_lr_schedule(1e-3, 120, 0, 30);
    CHECK(given.warmup == 0);
    CHECK(given.decay_steps == 30);
}

TEST_CASE("weight decay touches rank >= 2 only")
{
    CHECK_FALSE(takes_weight_decay(shape_t{}));
    CHECK_FALSE(takes_weight_decay(shape_t{4}));
    CHECK(takes_weight_decay(shape_t{3, 4}));
    CHECK(takes_weight_decay(shape_t{2, 3, 2}));

    // With zero gradients only the decay moves a parameter: the matrix shrinks, the vector does not.
    std::vector<parameter<double>> params{parameter<double>(values<double>({1, -2, 4, 8}, {2, 2}), "w"),
                                          parameter<double>(values<double>({1, -2}, {2}), "b")};
    SUBCASE("SGD: p - lr wd p")
    {
        sgd<double> opt(params, {0.5, 0.0, false, 0.1});
        opt.step();
        CHECK(same_bits(params[0].value(), values<double>({0.95, -1.9, 3.8, 7.6}, {2, 2})));
        CHECK(same_bits(params[1].value(), values<double>({1, -2}, {2})));
    }
    SUBCASE("AdamW: p (1 - lr wd), and m = v = 0 adds nothing")
    {
        adam<double> opt(params, adamw_options(0.5, 0.1));
        opt.step();
        CHECK(same_bits(params[0].value(), values<double>({0.95, -1.9, 3.8, 7.6}, {2, 2})));
        CHECK(same_bits(params[1].value(), values<double>({1, -2}, {2})));
    }
    SUBCASE("decay_every_parameter: torch's rule, the vector shrinks too")
    {
        adam_options every = adamw_options(0.5, 0.1);
        every.decay_every_parameter = true;
        adam<double> opt(params, every);
        opt.step();
        CHECK(same_bits(params[1].value(), values<double>({0.95, -1.9}, {2})));
        sgd_options plain{0.5, 0.0, false, 0.1};
        plain.decay_every_parameter = true;
        sgd<double> descent(params, plain);
        descent.step();
        CHECK(params[1].value()(0) == doctest::Approx(0.95 * 0.95).epsilon(1e-15));
    }
}

TEST_CASE("the first steps by hand: SGD momentum and Adam's bias correction")
{
    std::vector<parameter<double>> params{parameter<double>(values<double>({1, 2}, {2}), "p")};
    SUBCASE("SGD, momentum 0.5, Nesterov off and on")
    {
        // g = 1 twice: buf = 1, then 1.5; p = 1 - 0.1, then - 0.15. Nesterov: p -= 0.1 (1 + 0.5 buf).
        params[0].grad() = values<double>({1, 0}, {2});
        sgd<double> heavy(params, {0.1, 0.5, false, 0.0});
        heavy.step();
        heavy.step();
        CHECK(params[0].value()(0) == doctest::Approx(1 - 0.1 - 0.15).epsilon(1e-15));
        CHECK(params[0].value()(1) == 2.0);

        std::vector<parameter<double>> other{parameter<double>(values<double>({1, 2}, {2}), "p")};
        other[0].grad() = values<double>({1, 0}, {2});
        sgd<double> nesterov(other, {0.1, 0.5, true, 0.0});
        nesterov.step();  // buf = 1: p -= 0.1 (1 + 0.5)
        nesterov.step();  // buf = 1.5: p -= 0.1 (1 + 0.75)
        CHECK(other[0].value()(0) == doctest::Approx(1 - 0.15 - 0.175).epsilon(1e-15));
    }
    SUBCASE("Adam's first step moves every coordinate by lr (sign of g), whatever |g|")
    {
        // t = 1: m / (1 - beta1) = g, sqrt(v / (1 - beta2)) = |g|, so p -= lr g / (|g| + eps).
        params[0].grad() = values<double>({3, -0.001}, {2});
        adam<double> opt(params, adam_options{0.01, 0.9, 0.999, 0.0, 0.0, false});
        opt.step();
        CHECK(params[0].value()(0) == doctest::Approx(0.99).epsilon(1e-14));
        CHECK(params[0].value()(1) == doctest::Approx(2.01).epsilon(1e-14));
    }
}

TEST_CASE("export, import into a fresh optimiser and continue: identical to a run that never stopped")
{
    for (const std::string name : {"sgd_nesterov_decay", "adam_l2_decay", "adamw_clip_schedule"})
    {
        CAPTURE(name);
        const optim_case& c = find_case(name);
        const fixture_inputs<double> inputs(c);

        std::vector<parameter<double>> straight = initial_parameters<double>();
        const auto uninterrupted = make_optimiser(c, straight);
        for (std::size_t k = 0; k < steps; ++k)
        {
            take_step(c, *uninterrupted, straight, inputs, k);
        }

        std::vector<parameter<double>> first = initial_parameters<double>();
        const auto before = make_optimiser(c, first);
        for (std::size_t k = 0; k < 3; ++k)
        {
            take_step(c, *before, first, inputs, k);
        }
        const named_tensors<double> saved = before->export_state();
        CHECK(saved.at("optim.step")() == 3.0);

        std::vector<parameter<double>> resumed = copies_of(first);
        const auto after = make_optimiser(c, resumed);
        after->import_state(saved);
        CHECK(after->step_count() == 3);
        for (std::size_t k = 3; k < steps; ++k)
        {
            take_step(c, *after, resumed, inputs, k);
        }
        for (std::size_t i = 0; i < straight.size(); ++i)
        {
            CHECK(same_bits(resumed[i].value(), straight[i].value()));
        }
        const named_tensors<double> end_state = after->export_state();
        CHECK(names_of(end_state) == names_of(uninterrupted->export_state()));
        for (const auto& [state_name, tensor] : uninterrupted->export_state())
        {
            CAPTURE(state_name);
            CHECK(same_bits(end_state.at(state_name), tensor));
        }

        // Without the imported state the continuation differs (so the comparison above can fail).
        std::vector<parameter<double>> forgetful = copies_of(first);
        const auto fresh = make_optimiser(c, forgetful);
        for (std::size_t k = 3; k < steps; ++k)
        {
            take_step(c, *fresh, forgetful, inputs, k);
        }
        CHECK_FALSE(same_bits(forgetful[0].value(), straight[0].value()));
    }
}

TEST_CASE("float32 resumes bit for bit too, and agrees with the float64 fixtures")
{
    for (const optim_case& c : cases)
    {
        CAPTURE(c.name);
        const run_result<float> result = run_case<float>(c);
        for (std::size_t i = 0; i < parameter_names.size(); ++i)
        {
            CAPTURE(parameter_names[i]);
            const array<double> expected = load_after(c, parameter_names[i]);
            CHECK(relative_error(result.after[steps - 1][i], stack_entry(expected, steps - 1)) <= 2e-6);
        }
    }

    const optim_case& c = find_case("adamw_clip_schedule");
    const fixture_inputs<float> inputs(c);
    std::vector<parameter<float>> straight = initial_parameters<float>();
    const auto uninterrupted = make_optimiser(c, straight);
    std::vector<parameter<float>> first = initial_parameters<float>();
    const auto before = make_optimiser(c, first);
    for (std::size_t k = 0; k < steps; ++k)
    {
        take_step(c, *uninterrupted, straight, inputs, k);
        if (k < 2)
        {
            take_step(c, *before, first, inputs, k);
        }
    }
    std::vector<parameter<float>> resumed = copies_of(first);
    const auto after = make_optimiser(c, resumed);
    after->import_state(before->export_state());
    for (std::size_t k = 2; k < steps; ++k)
    {
        take_step(c, *after, resumed, inputs, k);
    }
    for (std::size_t i = 0; i < straight.size(); ++i)
    {
        CHECK(same_bits(resumed[i].value(), straight[i].value()));
    }
}

TEST_CASE("state names: one tensor per parameter and kind, plus the step")
{
    std::vector<parameter<double>> params = initial_parameters<double>();
    const std::set<std::string> adam_names = {"optim.step",
                                              "optim.exp_avg.linear.weight",
                                              "optim.exp_avg.linear.bias",
                                              "optim.exp_avg.conv.weight",
                                              "optim.exp_avg_sq.linear.weight",
                                              "optim.exp_avg_sq.linear.bias",
                                              "optim.exp_avg_sq.conv.weight"};
    CHECK(names_of(adam<double>(params, {}).export_state()) == adam_names);
    const std::set<std::string> momentum_names = {"optim.step", "optim.momentum.linear.weight",
                                                  "optim.momentum.linear.bias", "optim.momentum.conv.weight"};
    CHECK(names_of(sgd<double>(params, {0.1, 0.9, false, 0.0}).export_state()) == momentum_names);
    const std::set<std::string> plain_names = {"optim.step"};
    CHECK(names_of(sgd<double>(params, {0.1, 0.0, false, 0.0}).export_state()) == plain_names);

    const named_tensors<double> state = adam<double>(params, {}).export_state();
    CHECK(state.at("optim.step").dimension() == 0);
    CHECK(state.at("optim.step")() == 0.0);
    CHECK(to_shape(state.at("optim.exp_avg.conv.weight").shape()) == shape_t{2, 3, 2});
}

TEST_CASE("import_state rejects what does not fit, and changes nothing then")
{
    std::vector<parameter<double>> params = initial_parameters<double>();
    adam<double> source(params, {});
    for (auto& p : params)
    {
        p.grad() = xt::ones<double>(p.value().shape());
    }
    source.step();
    const named_tensors<double> good = source.export_state();

    std::vector<parameter<double>> other = copies_of(params);
    adam<double> target(other, {});

    named_tensors<double> missing = good;
    missing.erase("optim.exp_avg_sq.linear.bias");
    CHECK_THROWS_WITH_AS(target.import_state(missing),
                         doctest::Contains("no tensor 'optim.exp_avg_sq.linear.bias'"),
                         std::invalid_argument);

    named_tensors<double> reshaped = good;
    reshaped["optim.exp_avg.linear.weight"] = xt::zeros<double>({4, 3});
    CHECK_THROWS_WITH_AS(target.import_state(reshaped),
                         doctest::Contains("'optim.exp_avg.linear.weight' has shape (4, 3), expected (3, 4)"),
                         std::invalid_argument);

    named_tensors<double> unknown = good;
    unknown["optim.momentum.linear.weight"] = xt::zeros<double>({3, 4});
    CHECK_THROWS_WITH_AS(target.import_state(unknown),
                         doctest::Contains("unknown state tensor 'optim.momentum"), std::invalid_argument);

    // 1e30 and 2^63 are whole numbers beyond int64: once cast to a negative step count (NaN updates).
    for (double bad_step :
         {-1.0, 2.5, not_a_number, std::numeric_limits<double>::infinity(), 1e30, 9223372036854775808.0})
    {
        named_tensors<double> bad = good;
        bad["optim.step"] = scalar(bad_step);
        CHECK_THROWS_WITH_AS(target.import_state(bad), doctest::Contains("optim.step must be a whole number"),
                             std::invalid_argument);
    }
    named_tensors<double> vector_step = good;
    vector_step["optim.step"] = xt::ones<double>({1});
    CHECK_THROWS_AS(target.import_state(vector_step), std::invalid_argument);

    // Nothing was imported by the failed calls.
    CHECK(target.step_count() == 0);
    for (const auto& [name, tensor] : target.export_state())
    {
        CHECK(std::all_of(tensor.begin(), tensor.end(), [](double v) { return v == 0; }));
    }

    // A whole checkpoint may be passed: parameters (no "optim." prefix) are ignored.
    named_tensors<double> checkpoint = good;
    checkpoint["linear.weight"] = xt::zeros<double>({7});
    target.import_state(checkpoint);
    CHECK(target.step_count() == 1);
    const std::string name = "optim.exp_avg.conv.weight";
    CHECK(same_bits(target.export_state().at(name), good.at(name)));
}

TEST_CASE("bad parameters and hyperparameters are errors naming the optimiser")
{
    CHECK_THROWS_WITH_AS(sgd<double>({}, {}), doctest::Contains("sgd: no parameters"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(adam<float>({}, {}), doctest::Contains("adam: no parameters"),
                         std::invalid_argument);

    const parameter<double> unnamed(xt::zeros<double>({2, 2}));
    CHECK_THROWS_WITH_AS(adam<double>({unnamed}, {}), doctest::Contains("shape (2, 2) has no name"),
                         std::invalid_argument);
    const parameter<double> w(xt::zeros<double>({2, 2}), "w");
    CHECK_THROWS_WITH_AS(sgd<double>({w, w}, {}), doctest::Contains("'w' appears twice"),
                         std::invalid_argument);

    CHECK_THROWS_WITH_AS(sgd<double>({w}, {-0.1}), doctest::Contains("learning rate must be a finite number >= 0"),
                         std::invalid_argument);
    CHECK_THROWS_AS(sgd<double>({w}, {not_a_number}), std::invalid_argument);
    const double infinite = std::numeric_limits<double>::infinity();  // every parameter -inf after one step
    CHECK_THROWS_WITH_AS(sgd<double>({w}, {infinite}), doctest::Contains("learning rate must be a finite number"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(adam<double>({w}, adamw_options(0.1, infinite)),
                         doctest::Contains("adamw: weight_decay must be a finite number"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(sgd<double>({w}, {0.1, -0.9}), doctest::Contains("momentum must be a finite number >= 0"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(sgd<double>({w}, {0.1, 0.0, true}), doctest::Contains("nesterov needs momentum"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(sgd<double>({w}, {0.1, 0.9, false, -1.0}),
                         doctest::Contains("weight_decay must be a finite number >= 0"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(adam<double>({w}, {0.1, 1.0}), doctest::Contains("beta1 must be in [0, 1)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(adam<double>({w}, {0.1, 0.9, -0.1}), doctest::Contains("beta2 must be in [0, 1)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(adam<double>({w}, {0.1, 0.9, 0.99, -1e-8}), doctest::Contains("eps must be a finite number >= 0"),
                         std::invalid_argument);
    CHECK_THROWS_AS(adam<double>({w}, adamw_options(0.1, not_a_number)), std::invalid_argument);
    CHECK_THROWS_WITH_AS(adam<double>({w}, adamw_options(0.1, -1.0)),
                         doctest::Contains("adamw: weight_decay"), std::invalid_argument);

    sgd<double> opt({w}, {});
    CHECK_THROWS_WITH_AS(opt.set_lr(-1), doctest::Contains("sgd: learning rate"), std::invalid_argument);
    CHECK(opt.lr() == 1e-3);
}

TEST_CASE("a gradient or state of the wrong shape stops the step before anything moves")
{
    std::vector<parameter<double>> params = initial_parameters<double>();
    const std::vector<parameter<double>> start = copies_of(params);
    for (auto& p : params)
    {
        p.grad() = xt::ones<double>(p.value().shape());
    }
    SUBCASE("a gradient of another shape")
    {
        adam<double> opt(params, {});
        params[2].grad() = xt::ones<double>({2, 6});
        CHECK_THROWS_WITH_AS(opt.step(),
                             doctest::Contains("adam: the gradient of 'conv.weight' has shape (2, 6), "
                                               "the parameter (2, 3, 2)"),
                             std::invalid_argument);
        CHECK(opt.step_count() == 0);
    }
    SUBCASE("a parameter reshaped after its state was made")
    {
        sgd<double> opt(params, {0.1, 0.9});
        params[1].value() = xt::zeros<double>({5});
        params[1].grad() = xt::zeros<double>({5});
        CHECK_THROWS_WITH_AS(opt.step(),
                             doctest::Contains("the momentum state of 'linear.bias' has shape (4), "
                                               "the parameter now (5)"),
                             std::invalid_argument);
        CHECK(opt.step_count() == 0);
    }
    CHECK(same_bits(params[0].value(), start[0].value()));
}

TEST_CASE("a zero-size parameter takes part without harm")
{
    std::vector<parameter<double>> params = initial_parameters<double>();
    params.emplace_back(xt::zeros<double>({0, 3}), "empty");
    for (auto& p : params)
    {
        p.grad() = xt::ones<double>(p.value().shape());
    }
    adam<double> opt(params, adamw_options(0.01, 0.1));
    opt.step();
    CHECK(params.back().value().size() == 0);
    CHECK(to_shape(opt.export_state().at("optim.exp_avg.empty").shape()) == shape_t{0, 3});
    CHECK(clip_grad_norm(params, 1.0) == doctest::Approx(std::sqrt(28.0)).epsilon(1e-15));
}

TEST_CASE("clip_grad_norm")
{
    std::vector<parameter<double>> params{parameter<double>(xt::zeros<double>({2}), "a"),
                                          parameter<double>(xt::zeros<double>({1, 2}), "b")};
    SUBCASE("zero gradients: norm 0, nothing scaled, no NaN")
    {
        CHECK(clip_grad_norm(params, 1.0) == 0.0);
        CHECK(same_bits(params[0].grad(), values<double>({0, 0}, {2})));
        CHECK(same_bits(params[1].grad(), values<double>({0, 0}, {1, 2})));
    }
    SUBCASE("a norm above max_norm: every gradient times max_norm / (norm + 1e-6)")
    {
        params[0].grad() = values<double>({1, 2}, {2});
        params[1].grad() = values<double>({0, -2}, {1, 2});  // norm sqrt(1 + 4 + 4) = 3
        CHECK(clip_grad_norm(params, 1.5) == 3.0);
        const double scale = 1.5 / (3.0 + 1e-6);
        CHECK(params[0].grad()(0) == doctest::Approx(scale).epsilon(1e-15));
        CHECK(params[0].grad()(1) == doctest::Approx(2 * scale).epsilon(1e-15));
        CHECK(params[1].grad()(0, 1) == doctest::Approx(-2 * scale).epsilon(1e-15));
        CHECK(clip_grad_norm(params, 1.5) == doctest::Approx(1.5).epsilon(1e-6));
    }
    SUBCASE("max_norm above the norm leaves the gradients bit for bit; at the norm, the 1e-6 scales them")
    {
        params[0].grad() = values<double>({1, 2}, {2});
        params[1].grad() = values<double>({0, -2}, {1, 2});  // norm 3
        CHECK(clip_grad_norm(params, 3.5) == 3.0);
        CHECK(same_bits(params[0].grad(), values<double>({1, 2}, {2})));
        CHECK(same_bits(params[1].grad(), values<double>({0, -2}, {1, 2})));
        CHECK(clip_grad_norm(params, 3.0) == 3.0);  // 3 / (3 + 1e-6) < 1
        CHECK(params[0].grad()(1) == doctest::Approx(2 * 3.0 / (3.0 + 1e-6)).epsilon(1e-15));
        CHECK(params[0].grad()(1) < 2.0);
    }
    SUBCASE("NaN in a gradient: the norm is NaN and the gradients are left as they are")
    {
        params[0].grad() = values<double>({not_a_number, 2}, {2});
        CHECK(std::isnan(clip_grad_norm(params, 1.0)));
        CHECK(params[0].grad()(1) == 2.0);
    }
    SUBCASE("float32")
    {
        std::vector<parameter<float>> small{parameter<float>(values<float>({3, 4}, {2}), "a")};
        small[0].grad() = values<float>({3, 4}, {2});
        CHECK(clip_grad_norm(small, 1.0) == 5.0);
        CHECK(small[0].grad()(0) == doctest::Approx(0.6).epsilon(1e-6));
        CHECK(small[0].grad()(1) == doctest::Approx(0.8).epsilon(1e-6));
    }
    SUBCASE("no parameters: norm 0; max_norm must be > 0")
    {
        CHECK(clip_grad_norm(std::vector<parameter<double>>{}, 1.0) == 0.0);
        CHECK_THROWS_WITH_AS(clip_grad_norm(params, 0.0),
                             doctest::Contains("clip_grad_norm: max_norm must be > 0"),
                             std::invalid_argument);
        CHECK_THROWS_AS(clip_grad_norm(params, not_a_number), std::invalid_argument);
    }
}

TEST_CASE("NaN in a gradient reaches only its own coordinate")
{
    std::vector<parameter<double>> params{parameter<double>(values<double>({1, 2, 3}, {3}), "p")};
    params[0].grad() = values<double>({0.5, not_a_number, -0.5}, {3});
    adam<double> opt(params, {});
    opt.step();
    CHECK(std::isfinite(params[0].value()(0)));
    CHECK(std::isnan(params[0].value()(1)));
    CHECK(std::isfinite(params[0].value()(2)));
}
}  // namespace test_optim
