// The small GPT composed from ops (models/gpt.hpp): docs/spec.md's parameter table and counts, GPT-2 init,
// the forward pass against a loop-written reference (gpt_reference.hpp), causality, the tape's
// multiply-adds against the formulas, fused against composed, float64 central differences for every
// parameter, ignored targets, the argument checks, and float32 against float64.
#include <doctest/doctest.h>

#include "gpt_reference.hpp"
#include "test_util.hpp"

#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "models/gpt.hpp"

namespace test_gpt
{
using namespace xgrad;
using namespace xgrad::models;
using xgrad::test::random_ids;
using namespace xgrad::test::gpt_reference;  // ref_logits, ref_loss: the loop-written model

namespace
{
// ---- configs, data and helpers -------------------------------------------------------------------

// V, block_size, L, d, H, G
gpt_config tiny_config()
{
    return {7, 5, 2, 8, 2, 0};
}
gpt_config tiny_mqa_config()
{
    return {7, 5, 2, 8, 2, 1};
}
gpt_config gqa_config()
{
    return {11, 8, 3, 12, 4, 2};
}

// Replaces every parameter's value by N(0, scale) draws (LayerNorm weights around 1), so no weight is
// special (zero biases, unit gains) when gradients are checked.
template <class T>
void randomise(gpt_parameters<T>& params, unsigned seed, double scale = 0.3)
{
    unsigned k = 0;
    for (parameter<T>& p : params.named_parameters())
    {
        const shape_t shape = to_shape(p.value().shape());
        array<T> v = test::normal_array<T>(shape, seed + 100 * k++, scale);
        if (p.name().find("ln_") != std::string::npos && p.name().find(".weight") != std::string::npos)
        {
            v += T(1);
        }
        p.value() = v;
    }
}

template <class T>
gpt_result<T> forward(tape<T>& t, const gpt_parameters<T>& params, const ids_t& tokens, const ids_t* targets,
                      bool fused = true)
{
    return gpt_forward(t, params, tokens, targets, gpt_options{fused});
}

template <class T>
double loss_of(const gpt_parameters<T>& params, const ids_t& tokens, const ids_t& targets, bool fused = true)
{
    tape<T> t;
    const gpt_result<T> r = forward(t, params, tokens, &targets, fused);
    REQUIRE(r.loss.value().size() == 1);
    return static_cast<double>(r.loss.value().flat(0));
}

// Every parameter's gradient of the loss, in named_parameters order.
template <class T>
std::vector<array<T>> gradients_of(gpt_parameters<T>& params, const ids_t& tokens, const ids_t& targets,
                                   bool fused = true)
{
    params.zero_grad();
    tape<T> t;
    const gpt_result<T> r = forward(t, params, tokens, &targets, fused);
    t.backward(r.loss);
    std::vector<array<T>> grads;
    for (const parameter<T>& p : params.named_parameters())
    {
        grads.push_back(p.grad());
    }
    return grads;
}

array<double> widen(const array<float>& a)
{
    array<double> out = array<double>::from_shape(to_shape(a.shape()));
    std::copy(a.begin(), a.end(), out.begin());
    return out;
}

// ---- docs/spec.md's table, written out again ---------------------------------------------------------------

std::vector<std::pair<std::string, shape_t>> spec_table(const gpt_config& c)
{
    const std::size_t d = c.d_model, kv = (c.kv_heads ? c.kv_heads : c.heads) * (c.d_model / c.heads);
    std::vector<std::pair<std::string, shape_t>> table{{"wte", {c.vocab_size, d}}, {"wpe", {c.block_size, d}}};
    for (std::size_t i = 0; i < c.layers; ++i)
    {
        const std::string b = "blocks." + std::to_string(i) + ".";
        const std::vector<std::pair<std::string, shape_t>> block{
            {b + "ln_1.weight", {d}},  {b + "ln_1.bias", {d}},   {b + "attn.W_Q", {d, d}},
            {b + "attn.W_K", {d, kv}}, {b + "attn.W_V", {d, kv}}, {b + "attn.W_O", {d, d}},
            {b + "ln_2.weight", {d}},  {b + "ln_2.bias", {d}},   {b + "mlp.W_fc", {d, 4 * d}},
            {b + "mlp.b_fc", {4 * d}}, {b + "mlp.W_proj", {4 * d, d}}, {b + "mlp.b_proj", {d}}};
        table.insert(table.end(), block.begin(), block.end());
    }
    table.push_back({"ln_f.weight", {d}});
    table.push_back({"ln_f.bias", {d}});
    return table;
}

// V d + block_size d + L (2 d^2 + 2 d G dh + 8 d^2 + 9 d) + 2 d, as docs/spec.md writes it.
std::uint64_t spec_parameter_count(const gpt_config& c)
{
    const std::uint64_t V = c.vocab_size, S = c.block_size, L = c.layers, d = c.d_model, H = c.heads;
    const std::uint64_t G = c.kv_heads ? c.kv_heads : H, dh = d / H;
    return V * d + S * d + L * (2 * d * d + 2 * d * G * dh + 8 * d * d + 9 * d) + 2 * d;
}

// Which term of gpt_multiply_adds a matmul node belongs to, read from the parameter it multiplies.
std::string term_of(const std::vector<node_info>& nodes, const node_info& n)
{
    for (auto input : n.inputs)
    {
        const std::string& label = nodes[input].label;
        auto ends_with = [&](const std::string& s) {
            return label.size() >= s.size() && label.compare(label.size() - s.size(), s.size(), s) == 0;
        };
        if (nodes[input].op == "param")
        {
            if (ends_with("W_Q") || ends_with("W_K") || ends_with("W_V") || ends_with("W_O"))
            {
                return "projections";
            }
            if (ends_with("W_fc") || ends_with("W_proj"))
            {
                return "mlp";
            }
            if (label == "wte")
            {
                return "head";
            }
        }
    }
    return "attention";
}
}  // namespace

// ---- parameters ------------------------------------------------------------------------------------

TEST_CASE("named_parameters: docs/spec.md's names, order and shapes, sharing the model's storage")
{
    for (const gpt_config& c : {tiny_config(), tiny_mqa_config(), gqa_config(), gpt_config{5, 3, 1, 6, 3, 3}})
    {
        CAPTURE(c.layers);
        CAPTURE(c.kv_heads);
        const auto params = gpt_parameters<double>::init(c, 1);
        const auto named = params.named_parameters();
        const auto table = spec_table(c);
        REQUIRE(named.size() == table.size());
        REQUIRE(named.size() == 2 + 12 * c.layers + 2);
        for (std::size_t i = 0; i < table.size(); ++i)
        {
            CHECK(named[i].name() == table[i].first);
            CHECK(to_shape(named[i].value().shape()) == table[i].second);
        }
    }
    // A handle is the parameter itself: writing through it changes the model, gradients included.
    auto params = gpt_parameters<double>::init(tiny_config(), 1);
    auto named = params.named_parameters();
    named[4].value()(0, 0) = 42.0;  // blocks.0.attn.W_Q
    CHECK(params.blocks[0].W_Q.value()(0, 0) == 42.0);
    CHECK(named.back().name() == "ln_f.bias");
    CHECK(&named.back().value() == &params.ln_f_bias.value());
}

TEST_CASE("parameter count: the formula, the sum of the sizes and docs/spec.md's formula agree")
{
    // Worked by hand: V d = 56, block d = 40, per layer 128 + 128 + 512 + 72 = 840, twice, and 2 d = 16.
    CHECK(gpt_parameter_count(tiny_config()) == 1792);
    // dh = 3, G dh = 6: 132 + 96 + 3 (288 + 144 + 1152 + 108) + 24.
    CHECK(gpt_parameter_count(gqa_config()) == 5328);
    // G = 1 (multi-query): per layer 2 d^2 + 2 d dh = 128 + 64, + 512 + 72.
    CHECK(gpt_parameter_count(tiny_mqa_config()) == 56 + 40 + 2 * (128 + 64 + 512 + 72) + 16);

    for (const gpt_config& c : {tiny_config(), tiny_mqa_config(), gqa_config(), gpt_config{65, 64, 2, 64, 4, 0},
                                gpt_config{256, 32, 3, 48, 6, 2}, gpt_config{3, 1, 1, 1, 1, 0}})
    {
        const auto params = gpt_parameters<float>::init(c, 3);
        std::uint64_t sizes = 0;
        for (const auto& p : params.named_parameters())
        {
            sizes += p.value().size();
        }
        CHECK(gpt_parameter_count(c) == sizes);
        CHECK(gpt_parameter_count(c) == spec_parameter_count(c));
    }
}

TEST_CASE("gpt_config::validate: zero sizes, d % H and H % G")
{
    CHECK_NOTHROW(tiny_config().validate("here"));
    CHECK_THROWS_WITH_AS(gpt_config({0, 5, 2, 8, 2, 0}).validate("here"), doctest::Contains("here: every size"),
                         std::invalid_argument);
    CHECK_THROWS_AS(gpt_config({7, 0, 2, 8, 2, 0}).validate("here"), std::invalid_argument);
    CHECK_THROWS_AS(gpt_config({7, 5, 0, 8, 2, 0}).validate("here"), std::invalid_argument);
    CHECK_THROWS_AS(gpt_config({7, 5, 2, 0, 2, 0}).validate("here"), std::invalid_argument);
    CHECK_THROWS_AS(gpt_config({7, 5, 2, 8, 0, 0}).validate("here"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(gpt_config({7, 5, 2, 8, 3, 0}).validate("here"),
                         doctest::Contains("d_model 8 is not divisible by heads 3"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(gpt_config({7, 5, 2, 12, 4, 3}).validate("here"),
                         doctest::Contains("heads 4 is not divisible by kv_heads 3"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(gpt_parameters<double>::init({7, 5, 2, 8, 3, 0}, 1),
                         doctest::Contains("gpt_parameters::init"), std::invalid_argument);
    CHECK_THROWS_AS(gpt_parameter_count({7, 5, 2, 8, 3, 0}), std::invalid_argument);
}

// ---- initialisation --------------------------------------------------------------------------------

TEST_CASE("init: GPT-2 statistics, residual projections scaled by 1/sqrt(2L), seeded and deterministic")
{
    const gpt_config c{512, 128, 4, 64, 4, 2};
    const auto params = gpt_parameters<double>::init(c, 2024);
    std::map<std::string, std::vector<double>> pools;  // values pooled by kind over layers
    for (const auto& p : params.named_parameters())
    {
        const std::string& n = p.name();
        const std::string kind = n.rfind("blocks.", 0) == 0 ? n.substr(n.find('.', 7) + 1) : n;
        pools[kind].insert(pools[kind].end(), p.value().begin(), p.value().end());
    }
    auto check_normal = [&](const std::string& kind, double std_dev) {
        const auto& v = pools.at(kind);
        const double n = static_cast<double>(v.size());
        const double mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
        double sq = 0;
        for (double x : v)
        {
            sq += (x - mean) * (x - mean);
        }
        CAPTURE(kind);
        CHECK(std::abs(mean) < 5 * std_dev / std::sqrt(n));
        CHECK(std::abs(std::sqrt(sq / n) / std_dev - 1) < 0.03);  // n >= 8192: a standard error under 1%
    };
    for (const char* kind : {"wte", "wpe", "attn.W_Q", "attn.W_K", "attn.W_V", "mlp.W_fc"})
    {
        check_normal(kind, 0.02);
    }
    check_normal("attn.W_O", 0.02 / std::sqrt(8.0));  // 2 L = 8
    check_normal("mlp.W_proj", 0.02 / std::sqrt(8.0));
    for (const char* kind : {"ln_1.weight", "ln_2.weight", "ln_f.weight"})
    {
        CHECK(std::all_of(pools.at(kind).begin(), pools.at(kind).end(), [](double x) { return x == 1.0; }));
    }
    for (const char* kind : {"ln_1.bias", "ln_2.bias", "ln_f.bias", "mlp.b_fc", "mlp.b_proj"})
    {
        CHECK(std::all_of(pools.at(kind).begin(), pools.at(kind).end(), [](double x) { return x == 0.0; }));
    }

    // The same seed gives the same model, in either float type; another seed another model.
    const auto again = gpt_parameters<double>::init(c, 2024).named_parameters();
    const auto as_float = gpt_parameters<float>::init(c, 2024).named_parameters();
    const auto other = gpt_parameters<double>::init(c, 2025).named_parameters();
    const auto first = params.named_parameters();
    bool all_different = true;
    for (std::size_t i = 0; i < first.size(); ++i)
    {
        CHECK(first[i].value() == again[i].value());
        bool rounds_to_float = true;
        for (std::size_t e = 0; e < first[i].value().size(); ++e)
        {
            rounds_to_float = rounds_to_float && static_cast<float>(first[i].value().flat(e)) == as_float[i].value().flat(e);
        }
        CHECK(rounds_to_float);
        if (first[i].name() == "wte" || first[i].name().find("W_") != std::string::npos)
        {
            all_different = all_different && first[i].value()(0, 0) != other[i].value()(0, 0);
        }
    }
    CHECK(all_different);
    // Gradients start at zero, of each parameter's shape.
    for (const auto& p : first)
    {
        CHECK(to_shape(p.grad().shape()) == to_shape(p.value().shape()));
        CHECK(test::max_abs(p.grad()) == 0.0);
    }
}

// ---- forward ---------------------------------------------------------------------------------------

TEST_CASE("gpt_forward: logits match a loop-written reference; activations named in forward order")
{
    for (const gpt_config& c : {tiny_config(), tiny_mqa_config(), gqa_config()})
    {
        CAPTURE(c.kv_heads);
        auto params = gpt_parameters<double>::init(c, 5);
        randomise(params, 9);
        const std::size_t B = 3, T = c.block_size - 1;
        const ids_t tokens = random_ids(B, T, c.vocab_size, 11);
        const ids_t targets = random_ids(B, T, c.vocab_size, 12);
        for (bool fused : {true, false})
        {
            tape<double> t;
            const gpt_result<double> r = forward(t, params, tokens, &targets, fused);
            CHECK(to_shape(r.logits.value().shape()) == shape_t{B, T, c.vocab_size});
            XGRAD_CHECK_CLOSE(r.logits.value(), ref_logits(params, tokens), 1e-12, 1e-12);
            CHECK(r.loss.value().flat(0) == doctest::Approx(ref_loss(ref_logits(params, tokens), targets)).epsilon(1e-12));

            std::vector<std::string> expected{"embed"};
            for (std::size_t i = 0; i < c.layers; ++i)
            {
                for (const char* n : {"ln_1", "attn", "res_1", "ln_2", "mlp_hidden", "mlp_gelu", "mlp", "res_2"})
                {
                    expected.push_back("blocks." + std::to_string(i) + "." + n);
                }
            }
            expected.push_back("ln_f");
            expected.push_back("logits");
            REQUIRE(r.activations.size() == expected.size());
            for (std::size_t k = 0; k < expected.size(); ++k)
            {
                const auto& [name, v] = r.activations[k];
                CHECK(name == expected[k]);
                CHECK(t.nodes()[v.index()].label == name);  // labelled on the tape too
                const bool wide = name.find("mlp_") != std::string::npos;
                const std::size_t last = name == "logits" ? c.vocab_size : wide ? 4 * c.d_model : c.d_model;
                CHECK(v.shape() == shape_t{B, T, last});
                if (k > 0)
                {
                    CHECK(v.index() > r.activations[k - 1].second.index());  // forward order
                }
            }
            CHECK(r.activations.back().second.index() == r.logits.index());
        }
        // Without targets there is no loss.
        tape<double> t;
        CHECK_FALSE(forward(t, params, tokens, nullptr).loss.valid());
    }
}

TEST_CASE("gpt_forward is causal: tokens after position t do not change the logits up to t")
{
    for (const gpt_config& c : {tiny_config(), tiny_mqa_config(), gqa_config()})
    {
        auto params = gpt_parameters<double>::init(c, 21);
        randomise(params, 22);
        const std::size_t B = 2, T = c.block_size;
        const ids_t tokens = random_ids(B, T, c.vocab_size, 23);
        tape<double> t;
        const array<double> base = forward(t, params, tokens, nullptr).logits.value();
        for (std::size_t pos = 0; pos + 1 < T; ++pos)
        {
            ids_t changed = tokens;
            for (std::size_t b = 0; b < B; ++b)
            {
                for (std::size_t later = pos + 1; later < T; ++later)
                {
                    changed(b, later) = (tokens(b, later) + 1 + later) % static_cast<std::int64_t>(c.vocab_size);
                }
            }
            tape<double> t2;
            const array<double> logits = forward(t2, params, changed, nullptr).logits.value();
            double before = 0, after = 0;
            for (std::size_t b = 0; b < B; ++b)
            {
                for (std::size_t s = 0; s < T; ++s)
                {
                    for (std::size_t v = 0; v < c.vocab_size; ++v)
                    {
                        double& worst = s <= pos ? before : after;
                        worst = std::max(worst, std::abs(logits(b, s, v) - base(b, s, v)));
                    }
                }
            }
            CAPTURE(pos);
            CHECK(before <= 1e-13);
            CHECK(after > 1e-3);  // the change is visible where it may be
        }
    }
}

TEST_CASE("gpt_forward at T = 1 and T = block_size")
{
    const gpt_config c = gqa_config();
    auto params = gpt_parameters<double>::init(c, 31);
    randomise(params, 32);
    const ids_t full = random_ids(2, c.block_size, c.vocab_size, 33);
    tape<double> t;
    const array<double> logits = forward(t, params, full, nullptr).logits.value();
    XGRAD_CHECK_CLOSE(logits, ref_logits(params, full), 1e-12, 1e-12);

    // One token: attention over itself only, so its logits are the first row of any longer sequence.
    ids_t first = ids_t::from_shape({2, 1});
    first(0, 0) = full(0, 0);
    first(1, 0) = full(1, 0);
    const ids_t target = ids_t(first);
    tape<double> t1;
    const gpt_result<double> one = forward(t1, params, first, &target);
    REQUIRE(one.logits.shape() == shape_t{2, 1, c.vocab_size});
    for (std::size_t b = 0; b < 2; ++b)
    {
        for (std::size_t v = 0; v < c.vocab_size; ++v)
        {
            CHECK(one.logits.value()(b, 0, v) == doctest::Approx(logits(b, 0, v)).epsilon(1e-12));
        }
    }
    t1.backward(one.loss);
    for (const auto& p : params.named_parameters())
    {
        CHECK(test::all_finite(p.grad()));
    }
}

// ---- counting --------------------------------------------------------------------------------------

TEST_CASE("tape multiply-adds equal gpt_forward_multiply_adds, term by term")
{
    // Worked by hand for V = 11, L = 3, d = 12, H = 4, G = 2 (dh = 3, G dh = 6), B = 2, T = 5:
    //   projections L B T (2 d^2 + 2 d G dh) = 30 (288 + 144)  = 12960
    //   mlp         L B T 8 d^2              = 30 * 1152        = 34560
    //   attention   L 2 B T^2 d              = 3 * 2 * 2 * 25 * 12 = 3600
    //   head        B T V d                  = 2 * 5 * 11 * 12  = 1320
    const gpt_multiply_adds m = gpt_forward_multiply_adds(gqa_config(), 2, 5);
    CHECK(m.projections == 12960);
    CHECK(m.mlp == 34560);
    CHECK(m.attention == 3600);
    CHECK(m.head == 1320);
    CHECK(m.total() == 52440);

    const auto params = gpt_parameters<double>::init(gqa_config(), 41);
    const ids_t tokens = random_ids(2, 5, 11, 42), targets = random_ids(2, 5, 11, 43);
    for (bool fused : {true, false})
    {
        tape<double> t;
        forward(t, params, tokens, &targets, fused);
        CHECK(t.multiply_adds() == 52440);
        std::map<std::string, std::uint64_t> counted;
        const auto nodes = t.nodes();
        for (const auto& n : nodes)
        {
            if (n.multiply_adds)
            {
                counted[term_of(nodes, n)] += n.multiply_adds;
            }
        }
        CHECK(counted["projections"] == 12960);
        CHECK(counted["mlp"] == 34560);
        CHECK(counted["attention"] == 3600);
        CHECK(counted["head"] == 1320);
    }

    // Other shapes: the formula's total against the tape, up to 16 positions: beyond, the fused attention
    // counts the work it does, which skips most masked entries (its 16-row strips of the causal diagonal).
    for (const gpt_config& c : {tiny_config(), tiny_mqa_config(), gpt_config{65, 64, 2, 64, 4, 0}})
    {
        const auto p = gpt_parameters<float>::init(c, 44);
        for (std::size_t T : {std::size_t(1), std::size_t(3), std::min<std::size_t>(c.block_size, 16)})
        {
            tape<float> t;
            gpt_forward(t, p, random_ids(3, T, c.vocab_size, 45), nullptr);
            CHECK(t.multiply_adds() == gpt_forward_multiply_adds(c, 3, T).total());
        }
    }
}

// ---- gradients -------------------------------------------------------------------------------------

TEST_CASE("fused and composed layers give the same loss, logits and gradients")
{
    for (const gpt_config& c : {tiny_config(), tiny_mqa_config(), gqa_config()})
    {
        auto params = gpt_parameters<double>::init(c, 51);
        randomise(params, 52);
        const ids_t tokens = random_ids(2, c.block_size, c.vocab_size, 53);
        ids_t targets = random_ids(2, c.block_size, c.vocab_size, 54);
        targets(1, 2) = -1;
        CHECK(loss_of(params, tokens, targets, true) ==
              doctest::Approx(loss_of(params, tokens, targets, false)).epsilon(1e-12));
        const auto fused = gradients_of(params, tokens, targets, true);
        const auto composed = gradients_of(params, tokens, targets, false);
        const auto named = params.named_parameters();
        for (std::size_t i = 0; i < fused.size(); ++i)
        {
            CAPTURE(named[i].name());
            CHECK(test::max_abs(fused[i]) > 0);
            XGRAD_CHECK_CLOSE(fused[i], composed[i], 1e-12, 1e-12 * test::max_abs(composed[i]));
        }
    }
}

TEST_CASE("gradcheck: every parameter of a tiny GPT against central differences (float64)")
{
    for (const gpt_config& c : {tiny_config(), tiny_mqa_config()})
    {
        for (bool fused : {true, false})
        {
            CAPTURE(c.kv_heads);
            CAPTURE(fused);
            auto params = gpt_parameters<double>::init(c, 61);
            randomise(params, 62);
            ids_t tokens = random_ids(2, 4, c.vocab_size, 63);
            tokens(0, 3) = tokens(0, 1);  // a repeated id: its embedding row gathers twice
            ids_t targets = random_ids(2, 4, c.vocab_size, 64);
            targets(1, 0) = -1;  // an ignored position
            const auto grads = gradients_of(params, tokens, targets, fused);
            auto named = params.named_parameters();
            for (std::size_t i = 0; i < named.size(); ++i)
            {
                CAPTURE(named[i].name());
                const array<double> numeric =
                    numeric_gradient([&] { return loss_of(params, tokens, targets, fused); }, named[i].value());
                CHECK(test::max_abs(numeric) > 0);
                XGRAD_CHECK_CLOSE(grads[i], numeric, 1e-5, 1e-8);
            }
        }
    }
}

TEST_CASE("ignored targets: -1 positions drop out of the mean; all ignored gives loss 0, zero gradients")
{
    auto params = gpt_parameters<double>::init(tiny_config(), 71);
    randomise(params, 72);
    const ids_t tokens = random_ids(2, 5, 7, 73);
    ids_t targets = random_ids(2, 5, 7, 74);
    targets(0, 0) = targets(0, 4) = targets(1, 2) = -1;
    tape<double> t;
    const gpt_result<double> r = forward(t, params, tokens, &targets);
    CHECK(r.loss.value().flat(0) == doctest::Approx(ref_loss(ref_logits(params, tokens), targets)).epsilon(1e-12));
    // Ignoring one more position changes the mean (it is over kept positions, not over all ten).
    ids_t fewer = targets;
    fewer(1, 4) = -1;
    CHECK(loss_of(params, tokens, fewer) ==
          doctest::Approx(ref_loss(ref_logits(params, tokens), fewer)).epsilon(1e-12));
    CHECK(loss_of(params, tokens, fewer) != doctest::Approx(r.loss.value().flat(0)).epsilon(1e-6));

    ids_t none = ids_t::from_shape({2, 5});
    none.fill(-1);
    for (bool fused : {true, false})
    {
        CHECK(loss_of(params, tokens, none, fused) == 0.0);
        for (const auto& g : gradients_of(params, tokens, none, fused))
        {
            CHECK(test::all_finite(g));
            CHECK(test::max_abs(g) == 0.0);
        }
    }
}

// ---- errors ----------------------------------------------------------------------------------------

TEST_CASE("gpt_forward rejects bad tokens and targets, naming gpt_forward and the shapes")
{
    const auto params = gpt_parameters<double>::init(tiny_config(), 81);  // V = 7, block_size = 5
    tape<double> t;
    auto run = [&](const ids_t& tokens, const ids_t* targets = nullptr) { gpt_forward(t, params, tokens, targets); };
    const ids_t good = random_ids(2, 3, 7, 82);

    CHECK_THROWS_WITH_AS(run(ids_t::from_shape({3})), doctest::Contains("gpt_forward: tokens must be (B, T)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(run(ids_t::from_shape({3})), doctest::Contains("got (3)"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(run(ids_t::from_shape({1, 2, 3})), doctest::Contains("got (1, 2, 3)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(run(ids_t::from_shape({2, 0})), doctest::Contains("got (2, 0)"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(run(ids_t::from_shape({0, 2})), doctest::Contains("got (0, 2)"), std::invalid_argument);
    ids_t too_long = random_ids(1, 6, 7, 83);
    CHECK_THROWS_WITH_AS(run(too_long), doctest::Contains("block_size = 5, got (1, 6)"), std::invalid_argument);

    ids_t bad = good;
    bad(1, 2) = 7;
    CHECK_THROWS_WITH_AS(run(bad), doctest::Contains("gpt_forward: token id 7 at (1, 2)"), std::invalid_argument);
    bad(1, 2) = -1;
    CHECK_THROWS_WITH_AS(run(bad), doctest::Contains("outside [0, 7)"), std::invalid_argument);

    const ids_t wrong_shape = random_ids(3, 2, 7, 84);
    CHECK_THROWS_WITH_AS(run(good, &wrong_shape),
                         doctest::Contains("gpt_forward: targets (3, 2) must have the shape of tokens (2, 3)"),
                         std::invalid_argument);
    ids_t bad_target = good;
    bad_target(0, 1) = 7;
    CHECK_THROWS_WITH_AS(run(good, &bad_target), doctest::Contains("gpt_forward: target 7 at (0, 1)"),
                         std::invalid_argument);
    bad_target(0, 1) = -2;
    CHECK_THROWS_WITH_AS(run(good, &bad_target), doctest::Contains("neither -1 nor in [0, 7)"),
                         std::invalid_argument);

    auto missing_block = params;
    missing_block.blocks.pop_back();
    CHECK_THROWS_WITH_AS(gpt_forward(t, missing_block, good), doctest::Contains("gpt_forward: the model has 1 blocks"),
                         std::invalid_argument);
    CHECK_NOTHROW(run(good, &good));
}

// ---- float32 ---------------------------------------------------------------------------------------

TEST_CASE("float32 agrees with float64: logits, loss and gradients")
{
    const gpt_config c = gqa_config();
    auto p64 = gpt_parameters<double>::init(c, 91);
    auto p32 = gpt_parameters<float>::init(c, 91);
    randomise(p64, 92, 0.2);
    auto n64 = p64.named_parameters();
    auto n32 = p32.named_parameters();
    for (std::size_t i = 0; i < n64.size(); ++i)
    {
        n32[i].value() = test::to_float_type<float>(n64[i].value());
    }
    const ids_t tokens = random_ids(2, c.block_size, c.vocab_size, 93);
    const ids_t targets = random_ids(2, c.block_size, c.vocab_size, 94);

    tape<double> t64;
    tape<float> t32;
    const auto r64 = forward(t64, p64, tokens, &targets);
    const auto r32 = forward(t32, p32, tokens, &targets);
    XGRAD_CHECK_CLOSE(widen(r32.logits.value()), r64.logits.value(), 1e-4, 1e-5 * test::max_abs(r64.logits.value()));
    CHECK(r32.loss.value().flat(0) == doctest::Approx(r64.loss.value().flat(0)).epsilon(1e-5));

    const auto g64 = gradients_of(p64, tokens, targets);
    const auto g32 = gradients_of(p32, tokens, targets);
    for (std::size_t i = 0; i < g64.size(); ++i)
    {
        CAPTURE(n64[i].name());
        XGRAD_CHECK_CLOSE(widen(g32[i]), g64[i], 1e-3, 1e-4 * test::max_abs(g64[i]));
    }
}
}  // namespace test_gpt
