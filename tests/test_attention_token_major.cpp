// ops::attention_token_major, the fused attention on the projections' (B, T, H dh) layout, against the
// same op on heads split out and against the composed graph (models::attention between split_heads and
// combine_heads): values and the gradients of q, k, v in float64 to 1e-12, for grouped-query heads,
// T = 1, several tiles, causal and padding masks and fully masked rows; central differences; errors.
#include <doctest/doctest.h>

#include "test_util.hpp"

#include <optional>

#include "models/masks.hpp"
#include "models/mha.hpp"

namespace test_attention_token_major
{
using namespace xgrad;
using namespace xgrad::models;

namespace
{
struct layout_case
{
    std::size_t B, Tq, Tk, H, G, dh;
    bool causal;
    std::optional<mask_t> mask;  // broadcast to (B, H, Tq, Tk)
};

std::vector<test::f64> inputs_of(const layout_case& c, unsigned seed)
{
    return {test::random_array({c.B, c.Tq, c.H * c.dh}, seed), test::random_array({c.B, c.Tk, c.G * c.dh}, seed + 1),
            test::random_array({c.B, c.Tk, c.G * c.dh}, seed + 2)};
}

// The three computations of one case, each (q, k, v) -> (B, Tq, H dh).
void check_layouts_agree(const layout_case& c, unsigned seed = 1)
{
    const mask_t* mask = c.mask ? &*c.mask : nullptr;
    auto token_major = [&](const auto& x) {
        return ops::attention_token_major(x[0], x[1], x[2], c.H, c.G, mask, c.causal);
    };
    auto heads_major = [&](const auto& x) {
        return combine_heads(ops::attention(split_heads(x[0], c.H), split_heads(x[1], c.G), split_heads(x[2], c.G),
                                            mask, c.causal));
    };
    const auto combined = combined_mask("test", mask, c.causal, c.B, c.H, c.Tq, c.Tk);
    auto composed = [&](const auto& x) {
        auto heads = attention(split_heads(x[0], c.H), split_heads(x[1], c.G), split_heads(x[2], c.G),
                               combined ? &*combined : nullptr);
        return combine_heads(heads.first);
    };
    const auto in = inputs_of(c, seed);
    const auto fused = test::evaluate_in<double>(token_major, in, seed + 9);
    for (const auto& reference : {test::evaluate_in<double>(heads_major, in, seed + 9),
                                  test::evaluate_in<double>(composed, in, seed + 9)})
    {
        CHECK(test::max_relative_difference(fused.value, reference.value) <= 1e-12);
        for (std::size_t i = 0; i < 3; ++i)
        {
            CAPTURE(i);
            // Some gradients are zero up to rounding (dQ of a row that sees one key): absolute there.
            const difference d = compare(fused.grads[i], reference.grads[i]);
            CAPTURE(d.max_abs);
            CAPTURE(d.scale);
            CHECK(d.within(1e-14, 1e-12));
        }
    }
    CHECK(test::all_finite(fused.value));
}
}  // namespace

TEST_CASE("token-major attention = heads-major fused = composed: causal, none, Tq < Tk, Tq > Tk, T = 1")
{
    check_layouts_agree({2, 5, 5, 4, 4, 3, true, std::nullopt});
    check_layouts_agree({2, 3, 7, 2, 2, 4, false, std::nullopt});
    check_layouts_agree({1, 6, 4, 3, 3, 2, true, std::nullopt});
    check_layouts_agree({1, 1, 1, 2, 2, 4, true, std::nullopt});
    check_layouts_agree({3, 1, 5, 1, 1, 3, false, std::nullopt});
}

TEST_CASE("token-major attention: grouped-query (G = 2) and multi-query (G = 1) heads")
{
    check_layouts_agree({2, 5, 5, 4, 2, 3, true, std::nullopt});
    check_layouts_agree({2, 4, 6, 6, 1, 2, false, std::nullopt});
    check_layouts_agree({1, 1, 1, 4, 2, 2, true, std::nullopt});
}

TEST_CASE("token-major attention: padding masks, fully masked rows, with causal and grouped heads")
{
    mask_t padding = test::full_mask({2, 1, 1, 6}, true);
    padding(1, 0, 0, 4) = padding(1, 0, 0, 5) = false;  // batch 1 has 4 real keys
    check_layouts_agree({2, 6, 6, 4, 2, 3, true, padding});
    check_layouts_agree({2, 3, 6, 2, 2, 4, false, padding});
    mask_t rows = test::random_mask({2, 4, 5, 7}, 3);
    for (std::size_t j = 0; j < 7; ++j)
    {
        rows(0, 1, 2, j) = false;  // a fully masked row: output 0, no gradient, no NaN
    }
    check_layouts_agree({2, 5, 7, 4, 2, 2, false, rows});
    check_layouts_agree({2, 5, 7, 4, 4, 2, true, rows});
}

TEST_CASE("token-major attention over several tiles (T = 70 > 64): online softmax, causal tiles skipped")
{
    check_layouts_agree({1, 70, 70, 2, 1, 3, true, std::nullopt});
    check_layouts_agree({1, 70, 66, 2, 2, 2, false, test::random_mask({1, 1, 70, 66}, 5, 0.8)});
}

TEST_CASE("token-major attention passes gradcheck (float64 central differences), masked, causal, grouped")
{
    const mask_t m = test::random_mask({2, 1, 4, 4}, 7, 0.7);
    auto f = [&m](tape<double>&, const std::vector<var<double>>& x) {
        return ops::attention_token_major(x[0], x[1], x[2], 4, 2, &m, true);
    };
    XGRAD_CHECK_GRADIENTS(f, {test::normal_array<double>({2, 4, 12}, 1), test::normal_array<double>({2, 4, 6}, 2),
                              test::normal_array<double>({2, 4, 6}, 3)});
    auto plain = [](tape<double>&, const std::vector<var<double>>& x) {
        return ops::attention_token_major(x[0], x[1], x[2], 2, 2);
    };
    XGRAD_CHECK_GRADIENTS(plain, {test::normal_array<double>({1, 5, 4}, 4), test::normal_array<double>({1, 3, 4}, 5),
                                  test::normal_array<double>({1, 3, 4}, 6)});
}

TEST_CASE("token-major attention in float32 agrees with float64")
{
    auto f = [](const auto& x) { return ops::attention_token_major(x[0], x[1], x[2], 4, 2, nullptr, true); };
    test::check_float32_agrees(f, {test::random_array({2, 9, 16}, 1), test::random_array({2, 9, 8}, 2),
                                   test::random_array({2, 9, 8}, 3)});
}

TEST_CASE("token-major attention: bad shapes, head counts and masks throw, naming the op")
{
    tape<double> t;
    auto q = t.input(test::normal_array<double>({2, 3, 8}, 1));
    auto k = t.input(test::normal_array<double>({2, 5, 4}, 2));
    auto k4 = t.input(test::normal_array<double>({2, 2, 5, 4}, 3));
    auto other_batch = t.input(test::normal_array<double>({1, 5, 4}, 4));
    const char* op = "attention_token_major";
    CHECK_THROWS_WITH_AS(ops::attention_token_major(q, k4, k4, 2, 1), doctest::Contains(op), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::attention_token_major(q, other_batch, other_batch, 2, 1), doctest::Contains(op),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::attention_token_major(q, k, q, 2, 1), doctest::Contains(op), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::attention_token_major(q, k, k, 3, 1), doctest::Contains("head width"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::attention_token_major(q, k, k, 2, 2), doctest::Contains("head width"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::attention_token_major(q, k, k, 0, 1), doctest::Contains("heads = 0"),
                         std::invalid_argument);
    const mask_t wrong = test::full_mask({4, 5}, true);
    CHECK_THROWS_WITH_AS(ops::attention_token_major(q, k, k, 2, 1, &wrong), doctest::Contains("does not broadcast"),
                         std::invalid_argument);
}
}  // namespace test_attention_token_major
