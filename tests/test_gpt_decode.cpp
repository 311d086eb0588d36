// Decoding with a key/value cache gives the logits of the full causal forward pass at every position,
// whether the tokens arrive all at once, one at a time or in chunks; and sampling draws as it says.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <type_traits>

#include "kernels/parallel.hpp"
#include "models/gpt_decode.hpp"
#include "test_util.hpp"

namespace test_gpt_decode
{
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

namespace
{
// The decoder's logits, one token at a time, against gpt_decode's for the same tokens (one sequence), to
// 1e-12 in float64 and 1e-4 in float32 (other summation orders).
template <class T = double>
void check_decoder_against_gpt_decode(const gpt_config& c, std::size_t positions, double scale)
{
    auto p = gpt_parameters<T>::init(c, 11);
    for (auto& param : p.named_parameters())  // larger weights than GPT-2's init: sharper attention
    {
        param.value() = param.value() * static_cast<T>(scale);
    }
    const ids_t tokens = random_ids(1, positions, c.vocab_size, 4);
    kv_cache<T> cache;
    const array<T> expected = gpt_decode(p, tokens, cache);
    decoder<T> d(p);
    for (std::size_t t = 0; t < positions; ++t)
    {
        const T* logits = d.step(tokens(0, t));
        const array<double> row = xt::cast<double>(xt::view(expected, 0, t, xt::all()));
        array<double> got = array<double>::from_shape({c.vocab_size});
        std::copy(logits, logits + c.vocab_size, got.begin());
        CAPTURE(t);
        CHECK(max_relative_difference(got, row) < (std::is_same<T, float>::value ? 1e-4 : 1e-12));
    }
    CHECK(d.length() == positions);
}

gpt_config variant(gpt_config c, const std::map<std::string, std::string>& keys)
{
    return config_with_values(c, keys);
}
}  // namespace

TEST_CASE("the decoder's logits equal gpt_decode's at every position, for every variant")
{
    const gpt_config sizes{13, 9, 2, 24, 4, 2};
    const std::vector<std::map<std::string, std::string>> variants{
      {},
      {{"norm", "rmsnorm"}, {"position", "rope"}, {"mlp", "swiglu"}, {"bias", "none"},
       {"tied_head", "false"}},
      {{"mlp", "gelu"}, {"bias", "all"}, {"position", "none"}, {"mlp_hidden", "40"}},
      {{"mlp", "swiglu"}, {"bias", "all"}, {"position", "rope"}, {"rope_base", "500"}, {"mlp_hidden", "36"}},
      {{"bias", "none"}, {"tied_head", "false"}},
      {{"qk_norm", "rms"}, {"mlp", "relu2"}, {"logit_softcap", "1.5"}},
      {{"norm", "rmsnorm"}, {"position", "rope"}, {"mlp", "swiglu"}, {"bias", "none"}, {"qk_norm", "rms"},
       {"logit_softcap", "30"}},
      {{"attention_window", "3"}, {"position", "rope"}},
      {{"attention_window", "1"}, {"qk_norm", "rms"}, {"mlp", "relu2"}},
      {{"attention_window", "40"}},
    };
    for (const auto& keys : variants)
    {
        CAPTURE(describe(variant(sizes, keys)));
        check_decoder_against_gpt_decode(variant(sizes, keys), 9, 10.0);
    }
    gpt_config one_head_group = sizes;
    one_head_group.kv_heads = 1;
    check_decoder_against_gpt_decode(one_head_group, 9, 10.0);
}

TEST_CASE("the decoder's logits equal gpt_decode's across many tiles of its key cache")
{
    // 70 positions span several tiles of keys (two batches each); windows that begin inside a tile; heads
    // of an odd width and of fewer entries than a batch (5), of whole batches (48), and of batches and a
    // remainder (22); float32 too, whose tiles are twice as wide as float64's.
    const gpt_config odd_heads = variant({11, 70, 1, 10, 2, 0}, {{"attention_window", "20"}});
    const gpt_config wide_heads =
        variant({11, 70, 1, 96, 2, 1}, {{"attention_window", "33"}, {"position", "rope"}});
    const gpt_config full_causal = variant({11, 70, 2, 44, 2, 0}, {});
    for (const gpt_config& c : {odd_heads, wide_heads, full_causal})
    {
        CAPTURE(describe(c));
        check_decoder_against_gpt_decode<double>(c, 70, 3.0);
        check_decoder_against_gpt_decode<float>(c, 70, 3.0);
    }
}

TEST_CASE("a decoder given its parameters one by one, as from a file, equals one given the model")
{
    const gpt_config c = variant({13, 40, 2, 24, 4, 2}, {{"tied_head", "false"}, {"mlp", "swiglu"}});
    const auto p = gpt_parameters<double>::init(c, 5);
    std::map<std::string, array<double>> stored;
    auto copy = p;
    for (const auto& param : copy.named_parameters())
    {
        stored.emplace(param.name(), param.value());
    }
    std::vector<std::string> asked;
    decoder<double> from_source(c, [&](const std::string& name, double* out) {
        asked.push_back(name);
        std::copy(stored.at(name).begin(), stored.at(name).end(), out);
    });
    CHECK(asked.size() == stored.size());  // each parameter read once
    auto misshapen = p;
    misshapen.blocks[1].W_up = parameter<double>(xt::zeros<double>({24, 5}), "blocks.1.mlp.W_up");
    CHECK_THROWS_WITH_AS(decoder<double>{misshapen},
                         doctest::Contains("decoder: parameter blocks.1.mlp.W_up is (24, 5), the model's"),
                         std::invalid_argument);
    // A block_size whose cache could not be counted (no learned positions to bound it) is refused before
    // anything is allocated from it.
    const gpt_config endless = variant({5, std::size_t(1) << 63, 1, 4, 2, 0}, {{"position", "none"}});
    const auto zeros = [](const std::string&, double* out) { *out = 0; };
    CHECK_THROWS_WITH_AS(decoder<double>(endless, zeros), doctest::Contains("decoder: a cache of block_size"),
                         std::invalid_argument);
    decoder<double> from_model(p);
    for (const std::int32_t token : {3, 1, 4, 1, 5, 9, 2, 6})
    {
        const double* a = from_source.step(token);
        const double* b = from_model.step(token);
        CHECK(std::equal(a, a + c.vocab_size, b));
    }
}

TEST_CASE("the decoder's logits equal gpt_decode's on two threads, its products and heads split")
{
    // d^2 and the attention's positions x d are past the sizes below which the decoder stays on one thread.
    const int before = num_threads();
    set_num_threads(2);
    const gpt_config c = variant({50, 96, 1, 192, 6, 3}, {{"position", "rope"}, {"tied_head", "false"}});
    check_decoder_against_gpt_decode(c, 96, 3.0);
    set_num_threads(before);
}

TEST_CASE("the decoder refuses a full cache and bad ids, and starts over after clear")
{
    const gpt_config c{7, 3, 1, 8, 2, 0};
    const auto p = gpt_parameters<double>::init(c, 1);
    decoder<double> d(p);
    CHECK_THROWS_WITH_AS(d.step(7), doctest::Contains("token id 7 is outside [0, 7)"), std::invalid_argument);
    CHECK_THROWS_AS(d.step(-1), std::invalid_argument);
    d.step(2);
    d.step(2);
    d.step(3);
    CHECK_THROWS_WITH_AS(d.step(1), doctest::Contains("block_size 3"), std::invalid_argument);
    d.clear();
    CHECK(d.length() == 0);
    decoder<double> fresh(p);
    const double* a = fresh.step(5);
    const std::vector<double> expected(a, a + 7);
    const double* b = d.step(5);
    CHECK(std::vector<double>(b, b + 7) == expected);
}

TEST_CASE("greedy sampling follows gpt_decode's most likely token")
{
    const gpt_config c{11, 16, 2, 16, 4, 2};
    const auto p = gpt_parameters<double>::init(c, 6);
    sampling_options o;
    o.tokens = 10;
    o.temperature = 0;
    const std::vector<std::int32_t> got = sample(p, {1, 2}, o);
    kv_cache<double> cache;
    ids_t tokens = ids_t::from_shape({1, 2});
    tokens(0, 0) = 1;
    tokens(0, 1) = 2;
    std::vector<std::int32_t> expected;
    for (std::size_t n = 0; n < 10; ++n)
    {
        const array<double> logits = gpt_decode(p, tokens, cache);
        const std::size_t last = logits.shape()[1] - 1;
        const array<double> row = xt::view(logits, 0, last, xt::all());
        const auto next = static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
        expected.push_back(next);
        tokens = ids_t::from_shape({1, 1});
        tokens(0, 0) = next;
    }
    CHECK(got == expected);
}

TEST_CASE("token_sampler draws as draw_token does, from the same seed")
{
    const std::vector<double> logits{0.3, -1.0, 2.5, 0.0, 1.1, 1.0};
    for (std::size_t top_k : {0, 1, 3, 6})
    {
        std::mt19937_64 rng(5);
        token_sampler sampler(logits.size(), 0.8, top_k, 5);
        for (int i = 0; i < 100; ++i)
        {
            CHECK(sampler.draw(logits.data()) == draw_token(logits, 0.8, top_k, rng));
        }
    }
}
}  // namespace test_gpt_decode
