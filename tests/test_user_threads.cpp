// Tapes on two user threads at once give the same numbers as one after the other: the buffer pool and
// the kernels' thread pool are shared, the tapes are not.
#include <doctest/doctest.h>

#include <thread>

#include "kernels/parallel.hpp"
#include "models/gpt.hpp"
#include "test_util.hpp"

namespace test_user_threads
{
using namespace xgrad;
using namespace xgrad::models;

namespace
{
struct outcome
{
    double loss = 0;
    std::vector<array<double>> grads;
};

// A few training-like steps: forward, backward, and an SGD update, so each step depends on the last.
outcome train_steps(unsigned seed, int steps)
{
    const gpt_config c{17, 12, 2, 16, 4, 2};
    auto p = gpt_parameters<double>::init(c, seed);
    std::mt19937 rng(seed);
    outcome out;
    for (int s = 0; s < steps; ++s)
    {
        ids_t tokens = ids_t::from_shape({3, 12}), targets = ids_t::from_shape({3, 12});
        for (std::size_t i = 0; i < tokens.size(); ++i)
        {
            tokens.flat(i) = rng() % 17;
            targets.flat(i) = rng() % 17;
        }
        tape<double> t;
        const auto r = gpt_forward(t, p, tokens, &targets);
        t.backward(r.loss);
        out.loss = r.loss.value()();
        out.grads.clear();
        for (auto& param : p.named_parameters())
        {
            out.grads.push_back(param.grad());
            param.value() -= 0.1 * param.grad();
        }
        p.zero_grad();
    }
    return out;
}
}  // namespace

TEST_CASE("two user threads training at once match the same work done one after the other")
{
    const outcome a_alone = train_steps(1, 20), b_alone = train_steps(2, 20);
    for (int round = 0; round < 4; ++round)
    {
        set_num_threads(1 + round % 2);  // with xgrad's own worker threads too: they serve one job at a time
        CAPTURE(num_threads());
        outcome a, b;
        std::thread ta([&] { a = train_steps(1, 20); });
        std::thread tb([&] { b = train_steps(2, 20); });
        ta.join();
        tb.join();
        CHECK(a.loss == a_alone.loss);  // bit for bit
        CHECK(b.loss == b_alone.loss);
        REQUIRE(a.grads.size() == a_alone.grads.size());
        for (std::size_t i = 0; i < a.grads.size(); ++i)
        {
            CHECK(a.grads[i] == a_alone.grads[i]);
            CHECK(b.grads[i] == b_alone.grads[i]);
        }
    }
    set_num_threads(1);
}
}  // namespace test_user_threads
