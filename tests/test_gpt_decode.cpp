// Decoding with a key/value cache gives the logits of the full causal forward pass at every position,
// whether the tokens arrive all at once, one at a time or in chunks; and sampling draws as it says.
#include <doctest/doctest.h>

#include <map>

#include "models/gpt_decode.hpp"
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::models;
using xgrad::test::max_relative_difference;
using xgrad::test::random_ids;

namespace
{
array<double> full_forward(const gpt_parameters<double>& p, const ids_t& tokens)
{
    tape<double> t;
    return gpt_forward(t, p, tokens).logits.value();
}

ids_t columns(const ids_t& tokens, std::size_t begin, std::size_t end)
{
    return xt::view(tokens, xt::all(), xt::range(begin, end));
}
}  // namespace

TEST_CASE("cached decoding equals the full causal forward at every position")
{
    for (std::size_t kv_heads : {4, 2, 1})
    {
        CAPTURE(kv_heads);
        const gpt_config c{13, 9, 2, 16, 4, kv_heads};
        auto p = gpt_parameters<double>::init(c, 5);
        for (auto& param : p.named_parameters())  // larger weights than GPT-2's init: sharper attention
        {
            param.value() = param.value() * 10.0;
        }
        const ids_t tokens = random_ids(2, 9, 13, 3);
        const array<double> full = full_forward(p, tokens);

        kv_cache<double> all_at_once;
        CHECK(max_relative_difference(gpt_decode(p, tokens, all_at_once), full) < 1e-12);
        CHECK(all_at_once.length() == 9);

        kv_cache<double> one_by_one;
        for (std::size_t i = 0; i < 9; ++i)
        {
            const array<double> step = gpt_decode(p, columns(tokens, i, i + 1), one_by_one);
            const array<double> expected = xt::view(full, xt::all(), xt::range(i, i + 1), xt::all());
            CAPTURE(i);
            CHECK(max_relative_difference(step, expected) < 1e-12);
        }

        kv_cache<double> chunks;
        const array<double> first = gpt_decode(p, columns(tokens, 0, 4), chunks);
        const array<double> rest = gpt_decode(p, columns(tokens, 4, 9), chunks);
        CHECK(max_relative_difference(first, xt::view(full, xt::all(), xt::range(0, 4), xt::all())) < 1e-12);
        CHECK(max_relative_difference(rest, xt::view(full, xt::all(), xt::range(4, 9), xt::all())) < 1e-12);
    }
}

TEST_CASE("cached decoding returns the attention weights of every layer")
{
    const gpt_config c{7, 6, 2, 8, 2, 0};
    const auto p = gpt_parameters<double>::init(c, 1);
    kv_cache<double> cache;
    std::vector<array<double>> weights;
    gpt_decode(p, random_ids(1, 5, 7, 2), cache, &weights);
    REQUIRE(weights.size() == 2);
    CHECK(weights[0].shape() == std::vector<std::size_t>{1, 2, 5, 5});
    for (std::size_t i = 0; i < 5; ++i)
    {
        double row = 0;
        for (std::size_t j = 0; j < 5; ++j)
        {
            row += weights[1](0, 1, i, j);
            if (j > i)
            {
                CHECK(weights[1](0, 1, i, j) == 0.0);  // causal
            }
        }
        CHECK(row == doctest::Approx(1.0).epsilon(1e-12));
    }
}

TEST_CASE("decoding refuses positions past block_size, a batch that changes and bad ids")
{
    const gpt_config c{7, 4, 1, 8, 2, 0};
    const auto p = gpt_parameters<double>::init(c, 1);
    kv_cache<double> cache;
    gpt_decode(p, random_ids(2, 3, 7, 1), cache);
    CHECK_THROWS_WITH_AS(gpt_decode(p, random_ids(2, 2, 7, 1), cache), doctest::Contains("block_size 4"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(gpt_decode(p, random_ids(1, 1, 7, 1), cache), doctest::Contains("batch of 2"),
                         std::invalid_argument);
    kv_cache<double> fresh;
    ids_t bad = random_ids(1, 2, 7, 1);
    bad(0, 1) = 7;
    CHECK_THROWS_AS(gpt_decode(p, bad, fresh), std::invalid_argument);
}

TEST_CASE("draw_token: temperature 0 and top-k 1 take the largest; top-k never leaves the k largest")
{
    std::mt19937_64 rng(1);
    const std::vector<double> logits{0.1, 2.0, -1.0, 1.5, 1.9};
    CHECK(draw_token(logits, 0.0, 0, rng) == 1);
    for (int i = 0; i < 50; ++i)
    {
        CHECK(draw_token(logits, 1.0, 1, rng) == 1);
        const auto id = draw_token(logits, 5.0, 2, rng);
        CHECK((id == 1 || id == 4));
    }
}

TEST_CASE("draw_token samples in proportion to softmax(logits / temperature)")
{
    std::mt19937_64 rng(7);
    const std::vector<double> logits{0.0, std::log(2.0), std::log(5.0)};  // probabilities 1/8, 2/8, 5/8
    std::map<int, int> counts;
    const int n = 40000;
    for (int i = 0; i < n; ++i)
    {
        ++counts[draw_token(logits, 1.0, 0, rng)];
    }
    CHECK(counts[0] / double(n) == doctest::Approx(0.125).epsilon(0.05));
    CHECK(counts[1] / double(n) == doctest::Approx(0.25).epsilon(0.05));
    CHECK(counts[2] / double(n) == doctest::Approx(0.625).epsilon(0.05));
    // temperature 2 flattens: probabilities proportional to 1, sqrt 2, sqrt 5
    counts.clear();
    for (int i = 0; i < n; ++i)
    {
        ++counts[draw_token(logits, 2.0, 0, rng)];
    }
    const double z = 1 + std::sqrt(2.0) + std::sqrt(5.0);
    CHECK(counts[2] / double(n) == doctest::Approx(std::sqrt(5.0) / z).epsilon(0.05));
}

TEST_CASE("sampling is seeded, stays in the vocabulary and runs past block_size")
{
    const gpt_config c{11, 8, 2, 16, 4, 0};
    const auto p = gpt_parameters<float>::init(c, 3);
    sampling_options o;
    o.tokens = 30;  // several refills of an 8-token context
    o.seed = 9;
    const auto a = sample(p, {1, 2, 3}, o);
    CHECK(a.size() == 30);
    CHECK(a == sample(p, {1, 2, 3}, o));
    for (auto id : a)
    {
        CHECK((id >= 0 && id < 11));
    }
    o.seed = 10;
    CHECK(a != sample(p, {1, 2, 3}, o));
    CHECK_THROWS_AS(sample(p, {}, o), std::invalid_argument);
    // a prompt longer than the context keeps its last block_size tokens
    CHECK(sample(p, std::vector<std::int32_t>(20, 4), o).size() == 30);
}
