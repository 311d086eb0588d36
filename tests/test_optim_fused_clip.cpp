// optimiser::scaled_step(grad_scale) with grad_norm and clip_factor against clip_grad_norm then step(),
// the semantics of torch's clip_grad_norm_ then step: parameters, optimiser state and the (scaled)
// gradients equal bit for bit, over several steps, for AdamW, Adam with L2 decay and SGD (which
// scales in a pass of its own), clipping on and off, a NaN gradient, float32 and float64.
#include <doctest/doctest.h>

#include "test_util.hpp"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>

#include "optim/optim.hpp"

namespace test_optim_fused_clip
{
using namespace xgrad;

namespace
{
template <class T>
std::vector<parameter<T>> make_params(unsigned seed)
{
    return {parameter<T>(test::to_float_type<T>(test::random_array({3, 4}, seed)), "w"),
            parameter<T>(test::to_float_type<T>(test::random_array({4}, seed + 1)), "b")};
}

// The gradients of step s: seeded, larger than max_norm when `big`.
template <class T>
void set_gradients(std::vector<parameter<T>>& params, int s, double magnitude)
{
    for (std::size_t i = 0; i < params.size(); ++i)
    {
        params[i].grad() = test::to_float_type<T>(
            test::random_array(to_shape(params[i].value().shape()), 100 + 10 * s + i, -magnitude, magnitude));
    }
}

template <class T>
bool bitwise_equal(const array<T>& a, const array<T>& b)
{
    return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
using make_optimiser = std::function<std::unique_ptr<optim::optimiser<T>>(std::vector<parameter<T>>)>;

// Runs both forms for `steps` steps and compares everything after each.
template <class T>
void check_same(const make_optimiser<T>& make, double magnitude, double max_norm, bool nan_gradient = false)
{
    auto separate = make_params<T>(1), fused = make_params<T>(1);
    auto opt_separate = make(separate), opt_fused = make(fused);
    for (int s = 1; s <= 4; ++s)
    {
        CAPTURE(s);
        set_gradients(separate, s, magnitude);
        set_gradients(fused, s, magnitude);
        if (nan_gradient)
        {
            separate[0].grad()(1, 2) = fused[0].grad()(1, 2) = std::numeric_limits<T>::quiet_NaN();
        }
        const double norm_separate = optim::clip_grad_norm(separate, max_norm);
        opt_separate->step();
        const double norm_fused = optim::grad_norm(fused);
        opt_fused->scaled_step(optim::clip_factor(norm_fused, max_norm));
        CHECK((norm_separate == norm_fused || (std::isnan(norm_separate) && std::isnan(norm_fused))));
        for (std::size_t i = 0; i < separate.size(); ++i)
        {
            CHECK(bitwise_equal(separate[i].value(), fused[i].value()));
            CHECK(bitwise_equal(separate[i].grad(), fused[i].grad()));
        }
        const auto a = opt_separate->export_state(), b = opt_fused->export_state();
        REQUIRE(a.size() == b.size());
        for (const auto& [name, tensor] : a)
        {
            CAPTURE(name);
            REQUIRE(b.count(name) == 1);
            CHECK(bitwise_equal(tensor, b.at(name)));
        }
    }
}

template <class T>
void check_all_optimisers()
{
    const make_optimiser<T> adamw = [](std::vector<parameter<T>> p) {
        return std::make_unique<optim::adam<T>>(std::move(p), optim::adamw_options(1e-2, 0.1));
    };
    const make_optimiser<T> adam_l2 = [](std::vector<parameter<T>> p) {
        optim::adam_options o;
        o.lr = 1e-2;
        o.weight_decay = 0.05;
        return std::make_unique<optim::adam<T>>(std::move(p), o);
    };
    const make_optimiser<T> sgd = [](std::vector<parameter<T>> p) {
        optim::sgd_options o;
        o.lr = 0.1;
        o.momentum = 0.9;
        return std::make_unique<optim::sgd<T>>(std::move(p), o);
    };
    for (const auto& make : {adamw, adam_l2, sgd})
    {
        check_same(make, 5.0, 1.0);         // norm about 10: clipped
        check_same(make, 0.01, 1.0);        // norm about 0.02: left alone
        check_same(make, 5.0, 1.0, true);   // NaN norm: left alone, as clip_grad_norm leaves it
    }
}
}  // namespace

TEST_CASE("scaled_step(clip_factor(grad_norm)) = clip_grad_norm then step(), bit for bit: AdamW, Adam, SGD")
{
    check_all_optimisers<float>();
    check_all_optimisers<double>();
}

TEST_CASE("clip_factor: 1 when nothing is clipped, max_norm / (norm + 1e-6) otherwise; bad max_norm throws")
{
    CHECK(optim::clip_factor(0.0, 1.0) == 1.0);
    CHECK(optim::clip_factor(0.5, 1.0) == 1.0);
    CHECK(optim::clip_factor(4.0, 2.0) == 2.0 / (4.0 + 1e-6));
    CHECK(optim::clip_factor(std::nan(""), 1.0) == 1.0);
    CHECK_THROWS_WITH_AS(optim::clip_factor(1.0, 0.0), doctest::Contains("max_norm"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(optim::clip_factor(1.0, std::nan("")), doctest::Contains("max_norm"),
                         std::invalid_argument);
}
}  // namespace test_optim_fused_clip
