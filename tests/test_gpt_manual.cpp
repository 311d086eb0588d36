// The hand-derived GPT (models/gpt_manual.hpp): each layer's backward and the whole model's against
// central differences, against the tape (models/gpt.hpp) to 1e-12, float32 against float64, the
// deliberate mistakes found by the first-divergence report (models/divergence.hpp), and bad input.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "models/divergence.hpp"
#include "models/gpt_manual.hpp"
#include "models/manual_faults.hpp"
#include "test_util.hpp"

namespace test_gpt_manual
{
using namespace xgrad;
using namespace xgrad::models;
using xgrad::test::f64;
using xgrad::test::random_ids;
using xgrad::test::weighted_sum;

namespace
{
// The order docs/spec.md and models/gpt_manual.hpp (gpt_backward_order) state, written out here to pin the
// one the twin's backward produces.
std::string block_name(std::size_t i, const std::string& rest) { return block_prefix(i) + rest; }

std::vector<std::string> expected_activation_names(const gpt_config& config)
{
    const char* activated = config.mlp == mlp_kind::relu2 ? "mlp_relu2" : "mlp_gelu";
    const std::vector<const char*> mlp = config.mlp == mlp_kind::swiglu
                                             ? std::vector<const char*>{"mlp_gate", "mlp_up", "mlp_swiglu"}
                                             : std::vector<const char*>{"mlp_hidden", activated};
    std::vector<std::string> names = {"embed"};
    for (std::size_t i = 0; i < config.layers; ++i)
    {
        for (const char* rest : {"ln_1", "attn", "res_1", "ln_2"})
        {
            names.push_back(block_name(i, rest));
        }
        for (const char* rest : mlp)
        {
            names.push_back(block_name(i, rest));
        }
        names.push_back(block_name(i, "mlp"));
        names.push_back(block_name(i, "res_2"));
    }
    names.push_back("ln_f");
    names.push_back("logits");
    return names;
}

std::vector<std::string> expected_backward_order(const gpt_config& config)
{
    const std::size_t last = config.layers - 1;
    const bool norm_bias = config.norm_has_bias(), mlp_bias = config.mlp_has_bias();
    const bool attn_bias = config.attention_has_bias();
    std::vector<std::string> names = {"logits"};
    const auto add = [&names](std::string name, bool present = true) {
        if (present)
        {
            names.push_back(std::move(name));
        }
    };
    add("lm_head", !config.tied_head);
    add("ln_f");
    add(block_name(last, "res_2"));
    add("ln_f.weight");
    add("ln_f.bias", norm_bias);
    for (std::size_t i = config.layers; i-- > 0;)
    {
        const auto in_block = [&](const std::string& rest, bool present = true) { add(block_name(i, rest), present); };
        in_block("mlp");
        if (config.mlp == mlp_kind::swiglu)
        {
            for (const char* rest : {"mlp_swiglu", "mlp.W_down"})
            {
                in_block(rest);
            }
            in_block("mlp.b_down", mlp_bias);
            for (const char* rest : {"mlp_gate", "mlp_up", "ln_2", "mlp.W_gate"})
            {
                in_block(rest);
            }
            in_block("mlp.b_gate", mlp_bias);
            in_block("mlp.W_up");
            in_block("mlp.b_up", mlp_bias);
        }
        else
        {
            in_block(config.mlp == mlp_kind::relu2 ? "mlp_relu2" : "mlp_gelu");
            in_block("mlp.W_proj");
            in_block("mlp.b_proj", mlp_bias);
            for (const char* rest : {"mlp_hidden", "ln_2", "mlp.W_fc"})
            {
                in_block(rest);
            }
            in_block("mlp.b_fc", mlp_bias);
        }
        in_block("res_1");
        in_block("ln_2.weight");
        in_block("ln_2.bias", norm_bias);
        in_block("attn");
        in_block("ln_1");
        for (const char* m : {"Q", "K", "V", "O"})
        {
            in_block(std::string("attn.W_") + m);
            in_block(std::string("attn.b_") + m, attn_bias);
        }
        add(i > 0 ? block_name(i - 1, "res_2") : "embed");
        in_block("ln_1.weight");
        in_block("ln_1.bias", norm_bias);
    }
    add("wte");
    add("wpe", config.position == position_kind::learned);
    return names;
}

// ---- a seeded model with every entry random ------------------------------------------------------
// Biases and LayerNorm parameters random too (not GPT-2's zeros and ones), so that no term of a rule
// hides behind a zero.

template <class T>
parameter<T> random_parameter(const shape_t& shape, std::mt19937& rng, double mean, double scale, std::string name)
{
    std::normal_distribution<double> normal(mean, scale);
    array<T> a = array<T>::from_shape(shape);
    for (auto& v : a)
    {
        v = static_cast<T>(normal(rng));
    }
    return parameter<T>(std::move(a), std::move(name));
}

template <class T>
gpt_parameters<T> random_gpt(const gpt_config& c, unsigned seed)
{
    std::mt19937 rng(seed);
    const std::size_t d = c.d_model, kv = c.attention().kv_width();
    gpt_parameters<T> p;
    p.config = c;
    p.wte = random_parameter<T>({c.vocab_size, d}, rng, 0, 0.5, "wte");
    p.wpe = random_parameter<T>({c.block_size, d}, rng, 0, 0.5, "wpe");
    for (std::size_t i = 0; i < c.layers; ++i)
    {
        const std::string b = "blocks." + std::to_string(i) + ".";
        gpt_block_parameters<T> w;
        w.ln_1_weight = random_parameter<T>({d}, rng, 1, 0.2, b + "ln_1.weight");
        w.ln_1_bias = random_parameter<T>({d}, rng, 0, 0.2, b + "ln_1.bias");
        w.W_Q = random_parameter<T>({d, d}, rng, 0, 0.4, b + "attn.W_Q");
        w.W_K = random_parameter<T>({d, kv}, rng, 0, 0.4, b + "attn.W_K");
        w.W_V = random_parameter<T>({d, kv}, rng, 0, 0.4, b + "attn.W_V");
        w.W_O = random_parameter<T>({d, d}, rng, 0, 0.4, b + "attn.W_O");
        w.ln_2_weight = random_parameter<T>({d}, rng, 1, 0.2, b + "ln_2.weight");
        w.ln_2_bias = random_parameter<T>({d}, rng, 0, 0.2, b + "ln_2.bias");
        w.W_fc = random_parameter<T>({d, 4 * d}, rng, 0, 0.4, b + "mlp.W_fc");
        w.b_fc = random_parameter<T>({4 * d}, rng, 0, 0.2, b + "mlp.b_fc");
        w.W_proj = random_parameter<T>({4 * d, d}, rng, 0, 0.2, b + "mlp.W_proj");
        w.b_proj = random_parameter<T>({d}, rng, 0, 0.2, b + "mlp.b_proj");
        p.blocks.push_back(w);
    }
    p.ln_f_weight = random_parameter<T>({d}, rng, 1, 0.2, "ln_f.weight");
    p.ln_f_bias = random_parameter<T>({d}, rng, 0, 0.2, "ln_f.bias");
    return p;
}

// The same model in float32.
gpt_parameters<float> to_float(const gpt_parameters<double>& p)
{
    gpt_parameters<float> f = random_gpt<float>(p.config, 0);
    const auto from = manual::named_parameters(p);
    auto to = manual::named_parameters(f);
    for (std::size_t k = 0; k < from.size(); ++k)
    {
        to[k].second.value() = test::to_float_type<float>(from[k].second.value());
    }
    return f;
}

// (B, T) ids from rows written out ({{1, 2}} is ambiguous for an xarray of integers).
ids_t ids(const std::vector<std::vector<std::int64_t>>& rows)
{
    ids_t out = ids_t::from_shape({rows.size(), rows.empty() ? 0 : rows[0].size()});
    for (std::size_t b = 0; b < rows.size(); ++b)
    {
        std::copy(rows[b].begin(), rows[b].end(), &out(b, 0));
    }
    return out;
}

// Targets with every `ignore_every`-th position set to -1 (0: none ignored).
ids_t random_targets(std::size_t batch, std::size_t length, std::size_t vocab, unsigned seed, std::size_t ignore_every)
{
    ids_t t = random_ids(batch, length, vocab, seed);
    for (std::size_t k = 0; ignore_every && k < t.size(); k += ignore_every)
    {
        t.data()[k] = -1;
    }
    return t;
}

// Normwise relative difference: max |a - b| / largest |entry| of either (0 when both are zero).
template <class A, class B>
double relative_difference(const A& a, const B& b)
{
    REQUIRE(test::shapes_equal(a, b));
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
    {
        const double x = static_cast<double>(a.data()[i]), y = static_cast<double>(b.data()[i]);
        worst = std::max(worst, std::abs(x - y));
        scale = std::max({scale, std::abs(x), std::abs(y)});
    }
    return worst == 0 ? 0 : worst / scale;
}

double manual_loss(const gpt_parameters<double>& p, const ids_t& tokens, const ids_t& targets)
{
    return manual::gpt_forward(p, tokens, &targets).loss;
}

// Central differences of the manual loss for every entry of every parameter, checked against the
// manual backward.
void check_against_finite_differences(const gpt_config& c, std::size_t batch, std::size_t length, unsigned seed,
                                      std::size_t ignore_every)
{
    gpt_parameters<double> p = random_gpt<double>(c, seed);
    const ids_t tokens = random_ids(batch, length, c.vocab_size, seed + 1);
    const ids_t targets = random_targets(batch, length, c.vocab_size, seed + 2, ignore_every);
    const auto g = manual::gpt_backward(manual::gpt_forward(p, tokens, &targets).cache);
    for (auto& [name, handle] : manual::named_parameters(p))
    {
        CAPTURE(name);
        const f64 numeric = numeric_gradient([&] { return manual_loss(p, tokens, targets); }, handle.value());
        XGRAD_CHECK_CLOSE(g.of(name), numeric, 1e-6, 1e-8);
    }
}
}  // namespace

// ---- one layer at a time, against central differences --------------------------------------------

TEST_CASE("gpt_manual: every layer's backward matches central differences")
{
    const std::size_t B = 2, T = 3, d = 5, V = 4;
    SUBCASE("encoder (tokens repeat, so the scatter must add)")
    {
        f64 wte = test::normal_array<double>({V, d}, 1), wpe = test::normal_array<double>({4, d}, 2);
        ids_t tokens = ids({{1, 3, 1}, {1, 0, 2}});
        const f64 G = test::normal_array<double>({B, T, d}, 3);
        f64 d_wte = xt::zeros<double>({V, d}), d_wpe = xt::zeros<double>(shape_t{4, d});
        manual::encoder_backward(d_wte, &d_wpe, G, tokens);
        auto f = [&] { return weighted_sum(manual::encoder_forward(wte, &wpe, tokens), G); };
        XGRAD_CHECK_CLOSE(d_wte, numeric_gradient(f, wte), 1e-7, 1e-9);
        XGRAD_CHECK_CLOSE(d_wpe, numeric_gradient(f, wpe), 1e-7, 1e-9);
    }
    SUBCASE("layer norm")
    {
        f64 x = test::normal_array<double>({B, T, d}, 4, 2.0), w = test::normal_array<double>({d}, 5),
            b = test::normal_array<double>({d}, 6);
        const f64 G = test::normal_array<double>({B, T, d}, 7);
        manual::layernorm_cache<double> cache;
        manual::layernorm_forward(x, w, &b, cache);
        const auto g = manual::layernorm_backward(G, cache, w);
        auto f = [&] {
            manual::layernorm_cache<double> c;
            return weighted_sum(manual::layernorm_forward(x, w, &b, c), G);
        };
        XGRAD_CHECK_CLOSE(g.x, numeric_gradient(f, x), 1e-6, 1e-8);
        XGRAD_CHECK_CLOSE(g.weight, numeric_gradient(f, w), 1e-6, 1e-8);
        XGRAD_CHECK_CLOSE(g.bias, numeric_gradient(f, b), 1e-6, 1e-8);
    }
    SUBCASE("matmul + bias, both ways round (C < OC and C > OC)")
    {
        for (auto [c, oc] : {std::pair<std::size_t, std::size_t>{d, 4 * d}, {4 * d, d}})
        {
            f64 x = test::normal_array<double>({B, T, c}, 8), w = test::normal_array<double>({c, oc}, 9),
                b = test::normal_array<double>({oc}, 10);
            const f64 G = test::normal_array<double>({B, T, oc}, 11);
            const auto g = manual::linear_backward(G, x, w, true);
            auto f = [&] { return weighted_sum(manual::linear_forward(x, w, &b), G); };
            XGRAD_CHECK_CLOSE(g.x, numeric_gradient(f, x), 1e-6, 1e-8);
            XGRAD_CHECK_CLOSE(g.w, numeric_gradient(f, w), 1e-6, 1e-8);
            XGRAD_CHECK_CLOSE(g.b, numeric_gradient(f, b), 1e-6, 1e-8);
        }
    }
    SUBCASE("GELU, over [-6, 6]")
    {
        f64 x = xt::linspace<double>(-6, 6, 61);
        const f64 G = test::normal_array<double>({61}, 12);
        auto f = [&] { return weighted_sum(manual::gelu_forward(x), G); };
        XGRAD_CHECK_CLOSE(manual::gelu_backward(G, x), numeric_gradient(f, x), 1e-6, 1e-8);
    }
    SUBCASE("residual: d x = d out + d x through the branch")
    {
        const f64 d_out = test::normal_array<double>({B, T, d}, 13), through = test::normal_array<double>({B, T, d}, 14);
        XGRAD_CHECK_CLOSE(manual::residual_backward(d_out, through), f64(d_out + through), 0.0, 0.0);
    }
    SUBCASE("tied head: d wte adds to what it held")
    {
        f64 x = test::normal_array<double>({B, T, d}, 15), wte = test::normal_array<double>({V, d}, 16);
        const f64 G = test::normal_array<double>({B, T, V}, 17);
        const f64 before = test::normal_array<double>({V, d}, 18);
        f64 d_wte = before;
        const f64 d_x = manual::tied_head_backward(G, x, wte, d_wte);
        auto f = [&] { return weighted_sum(manual::tied_head_forward(x, wte), G); };
        XGRAD_CHECK_CLOSE(d_x, numeric_gradient(f, x), 1e-7, 1e-9);
        XGRAD_CHECK_CLOSE(f64(d_wte - before), numeric_gradient(f, wte), 1e-7, 1e-9);
    }
    SUBCASE("softmax cross-entropy, some targets ignored, large logits")
    {
        f64 logits = test::normal_array<double>({B, T, V}, 19, 3.0);
        logits(0, 0, 1) = 800;  // exp would overflow without the max shift
        const ids_t targets = ids({{1, -1, 3}, {0, 2, -1}});
        manual::cross_entropy_cache<double> cache;
        const double loss = manual::softmax_cross_entropy_forward(logits, targets, cache);
        CHECK(std::isfinite(loss));
        CHECK(cache.kept == 4);
        const f64 d_logits = manual::softmax_cross_entropy_backward(cache);
        auto f = [&] {
            manual::cross_entropy_cache<double> c;
            return manual::softmax_cross_entropy_forward(logits, targets, c);
        };
        XGRAD_CHECK_CLOSE(d_logits, numeric_gradient(f, logits), 1e-6, 1e-8);
        CHECK(test::max_abs(f64(xt::view(d_logits, 0, 1, xt::all()))) == 0.0);  // ignored rows: no gradient
    }
    SUBCASE("huge tied logits: the loss is ln 2 exactly, as ops::cross_entropy's")
    {
        const f64 logits = {{{1e17, 1e17, 0.0}}};
        manual::cross_entropy_cache<double> cache;
        CHECK(manual::softmax_cross_entropy_forward(logits, ids({{0}}), cache) ==
              doctest::Approx(std::log(2.0)).epsilon(1e-14));
        const f64 d_logits = manual::softmax_cross_entropy_backward(cache);
        CHECK(d_logits(0, 0, 0) == doctest::Approx(-0.5).epsilon(1e-14));
        CHECK(d_logits(0, 0, 1) == doctest::Approx(0.5).epsilon(1e-14));
    }
}

TEST_CASE("gpt_manual: loss and logits from a loop-written reference")
{
    // A 1-token, 1-layer model whose attention is the identity on its only position: softmax over one key.
    const gpt_config c{5, 4, 1, 4, 2, 0};
    const gpt_parameters<double> p = random_gpt<double>(c, 3);
    const ids_t tokens = ids({{2}});
    const ids_t targets = ids({{4}});
    const auto f = manual::gpt_forward(p, tokens, &targets);
    // By hand: LN, then attention's output is V's row (one key) times W_O, MLP, LN, head, cross-entropy.
    auto ln = [](const std::vector<double>& x, const f64& w, const f64& b) {
        double mean = 0, var = 0;
        for (double v : x) mean += v / x.size();
        for (double v : x) var += (v - mean) * (v - mean) / x.size();
        std::vector<double> y(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + 1e-5) * w(i) + b(i);
        return y;
    };
    auto times = [](const std::vector<double>& x, const f64& w) {
        std::vector<double> y(w.shape()[1], 0.0);
        for (std::size_t j = 0; j < y.size(); ++j)
            for (std::size_t i = 0; i < x.size(); ++i) y[j] += x[i] * w(i, j);
        return y;
    };
    const auto& w = p.blocks[0];
    std::vector<double> x(4);
    for (std::size_t i = 0; i < 4; ++i) x[i] = p.wte.value()(2, i) + p.wpe.value()(0, i);
    const auto attn = times(times(ln(x, w.ln_1_weight.value(), w.ln_1_bias.value()), w.W_V.value()), w.W_O.value());
    for (std::size_t i = 0; i < 4; ++i) x[i] += attn[i];
    auto hidden = times(ln(x, w.ln_2_weight.value(), w.ln_2_bias.value()), w.W_fc.value());
    for (std::size_t j = 0; j < hidden.size(); ++j)
    {
        const double h = hidden[j] + w.b_fc.value()(j);
        hidden[j] = 0.5 * h * (1 + std::tanh(std::sqrt(2 / M_PI) * (h + 0.044715 * h * h * h)));
    }
    const auto mlp = times(hidden, w.W_proj.value());
    for (std::size_t i = 0; i < 4; ++i) x[i] += mlp[i] + w.b_proj.value()(i);
    const auto final_row = ln(x, p.ln_f_weight.value(), p.ln_f_bias.value());
    double total = 0;
    for (std::size_t v = 0; v < 5; ++v)
    {
        double logit = 0;
        for (std::size_t i = 0; i < 4; ++i) logit += final_row[i] * p.wte.value()(v, i);
        CHECK(f.logits(0, 0, v) == doctest::Approx(logit).epsilon(1e-12));
        total += std::exp(logit);
    }
    CHECK(f.loss == doctest::Approx(std::log(total) - f.logits(0, 0, 4)).epsilon(1e-12));
}

// ---- the whole model, against central differences ---------------------------------------------------

TEST_CASE("gpt_manual: every parameter's gradient matches central differences")
{
    SUBCASE("2 layers, H = 2, some targets ignored") { check_against_finite_differences({7, 5, 2, 8, 2, 0}, 2, 4, 11, 3); }
    SUBCASE("grouped queries: H = 4, G = 2") { check_against_finite_differences({6, 4, 1, 8, 4, 2}, 2, 4, 12, 0); }
    SUBCASE("multi-query: H = 2, G = 1, T = block_size, B = 1")
    {
        check_against_finite_differences({5, 4, 1, 4, 2, 1}, 1, 4, 13, 2);
    }
    SUBCASE("T = 1") { check_against_finite_differences({5, 4, 2, 4, 2, 0}, 2, 1, 14, 0); }
}

TEST_CASE("gpt_manual: every target ignored gives loss 0 and zero gradients, never NaN")
{
    const gpt_config c{6, 4, 2, 8, 2, 0};
    const auto p = random_gpt<double>(c, 5);
    const ids_t tokens = random_ids(2, 3, 6, 1);
    const ids_t targets = xt::full_like(tokens, -1);
    const auto f = manual::gpt_forward(p, tokens, &targets);
    CHECK(f.loss == 0.0);
    for (const auto& [name, grad] : manual::gpt_backward(f.cache).in_backward_order)
    {
        CAPTURE(name);
        CHECK(test::max_abs(grad) == 0.0);
    }
}

TEST_CASE("gpt_manual: float32 agrees with float64")
{
    const gpt_config c{9, 6, 2, 8, 4, 2};
    const auto p64 = random_gpt<double>(c, 21);
    const auto p32 = to_float(p64);
    const ids_t tokens = random_ids(2, 6, 9, 2);
    const ids_t targets = random_targets(2, 6, 9, 3, 4);
    const auto f64_result = manual::gpt_forward(p64, tokens, &targets);
    const auto f32_result = manual::gpt_forward(p32, tokens, &targets);
    CHECK(relative_difference(f32_result.logits, f64_result.logits) < 1e-5);
    CHECK(double(f32_result.loss) == doctest::Approx(f64_result.loss).epsilon(1e-5));
    const auto g64 = manual::gpt_backward(f64_result.cache);
    const auto g32 = manual::gpt_backward(f32_result.cache);
    REQUIRE(g64.in_backward_order.size() == g32.in_backward_order.size());
    for (std::size_t k = 0; k < g64.in_backward_order.size(); ++k)
    {
        CAPTURE(g64.in_backward_order[k].first);
        CHECK(g32.in_backward_order[k].first == g64.in_backward_order[k].first);
        CHECK(relative_difference(g32.in_backward_order[k].second, g64.in_backward_order[k].second) < 1e-4);
    }
}

// ---- names and order ----------------------------------------------------------------------------------

TEST_CASE("gpt_manual: gradients come in backward order, under every parameter and activation name")
{
    const gpt_config c{7, 5, 3, 8, 2, 0};
    const auto p = random_gpt<double>(c, 7);
    const ids_t tokens = random_ids(2, 4, 7, 1), targets = random_targets(2, 4, 7, 2, 0);
    const auto f = manual::gpt_forward(p, tokens, &targets);
    const auto g = manual::gpt_backward(f.cache);
    std::vector<std::string> names;
    for (const auto& entry : g.in_backward_order)
    {
        names.push_back(entry.first);
    }
    CHECK(names == manual::gpt_backward_order(c));
    CHECK(names == expected_backward_order(c));
    CHECK(manual::gpt_activation_names(c) == expected_activation_names(c));

    // Every activation and every parameter exactly once, with the shape of its value.
    const auto activations = manual::gpt_activation_names(c);
    const auto parameters = manual::gpt_parameter_names(c);
    CHECK(activations.size() == 3 + 8 * 3);
    CHECK(parameters.size() == 4 + 12 * 3);
    CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
    CHECK(names.size() == activations.size() + parameters.size());
    REQUIRE(f.activations.size() == activations.size());
    for (std::size_t k = 0; k < activations.size(); ++k)
    {
        CHECK(f.activations[k].first == activations[k]);
        CHECK(test::shapes_equal(g.of(activations[k]), f.activations[k].second));
    }
    for (const auto& [name, handle] : manual::named_parameters(p))
    {
        CHECK(test::shapes_equal(g.of(name), handle.value()));
        CHECK(handle.name() == name);  // random_gpt names them as docs/spec.md does
    }
    CHECK(g.parameters().size() == parameters.size());
    CHECK(g.parameters().front().first == "wte");
    CHECK_THROWS_AS(g.of("blocks.3.ln_1"), std::out_of_range);

    // The activations alone, in backward order, are the reverse of their forward order.
    std::vector<std::string> backward_activations;
    for (const auto& name : names)
    {
        if (std::find(activations.begin(), activations.end(), name) != activations.end())
        {
            backward_activations.push_back(name);
        }
    }
    CHECK(std::equal(backward_activations.begin(), backward_activations.end(), activations.rbegin()));
}

TEST_CASE("gpt_manual: the gradients of consecutive activations obey their rules")
{
    // Reading the list as a chain: the identities each backward step promises.
    const gpt_config c{7, 5, 2, 8, 2, 0};
    const auto p = random_gpt<double>(c, 9);
    const ids_t tokens = random_ids(2, 4, 7, 1), targets = random_targets(2, 4, 7, 2, 3);
    const auto g = manual::gpt_backward(manual::gpt_forward(p, tokens, &targets).cache);
    for (std::size_t i = 0; i < 2; ++i)
    {
        const std::string b = "blocks." + std::to_string(i) + ".";
        CHECK(relative_difference(g.of(b + "mlp"), g.of(b + "res_2")) == 0.0);   // res_2 = res_1 + mlp
        CHECK(relative_difference(g.of(b + "attn"), g.of(b + "res_1")) == 0.0);  // res_1 = x + attn
        // mlp = mlp_gelu W_proj + b_proj  ->  d b_proj = sum over rows of d mlp
        const f64 summed = xt::sum(g.of(b + "mlp"), {0, 1});
        CHECK(relative_difference(g.of(b + "mlp.b_proj"), summed) < 1e-14);
    }
    // embed = wte[tokens] + wpe  ->  d wpe = sum over the batch of d embed
    const f64 d_wpe_used = xt::view(g.of("wpe"), xt::range(0, 4), xt::all());
    const f64 summed = xt::sum(g.of("embed"), {0});
    CHECK(relative_difference(d_wpe_used, summed) < 1e-14);
    CHECK(test::max_abs(f64(xt::view(g.of("wpe"), xt::range(4, 5), xt::all()))) == 0.0);  // position 4 unused
}

// ---- deliberate mistakes and the first-divergence report ---------------------------------------------

namespace
{
// The activation each mistake corrupts first, in backward order, for a 2-layer model.
const std::map<manual::broken_rule, std::string> first_wrong_in_two_layers = {
    {manual::broken_rule::cross_entropy, "logits"},    {manual::broken_rule::gelu, "blocks.1.mlp_hidden"},
    {manual::broken_rule::matmul_bias, "blocks.1.ln_2"}, {manual::broken_rule::layer_norm, "blocks.1.res_1"},
    {manual::broken_rule::attention, "blocks.1.ln_1"}, {manual::broken_rule::residual, "blocks.0.res_2"},
    {manual::broken_rule::encoder, "wte"}};
}  // namespace

TEST_CASE("gpt_manual: each broken rule is found where it is, against the unbroken backward")
{
    const gpt_config c{7, 6, 2, 8, 2, 0};
    const auto p = random_gpt<double>(c, 31);
    const ids_t tokens = random_ids(2, 6, 7, 1), targets = random_targets(2, 6, 7, 2, 4);
    const auto f = manual::gpt_forward(p, tokens, &targets);
    const auto right = manual::gpt_backward(f.cache);
    CHECK_FALSE(first_divergence(right.in_backward_order, manual::gpt_backward(f.cache).in_backward_order).diverged());
    REQUIRE(manual::breakable_rules(c).size() == first_wrong_in_two_layers.size());
    for (manual::broken_rule rule : manual::breakable_rules(c))
    {
        CAPTURE(manual::to_string(rule));
        const auto wrong = manual::gpt_backward(f.cache, rule);
        const auto report = first_divergence(right.in_backward_order, wrong.in_backward_order);
        REQUIRE(report.diverged());
        CHECK(report.first_divergence()->name == first_wrong_in_two_layers.at(rule));
        CHECK(report.first_divergence()->max_rel > 1e-3);  // a real error, not rounding
    }
}

TEST_CASE("gpt_manual: broken rule names")
{
    for (manual::broken_rule rule : manual::breakable_rules())
    {
        CHECK(manual::broken_rule_from_string(manual::to_string(rule)) == rule);
        CHECK(manual::describe(rule, 2).size() > 20);
    }
    CHECK(manual::broken_rule_from_string("none") == manual::broken_rule::none);
    CHECK_FALSE(manual::broken_rule_from_string("layernorm").has_value());
    CHECK(manual::describe(manual::broken_rule::layer_norm, 3).find("blocks.2.ln_2") != std::string::npos);
}

TEST_CASE("first_divergence: the report on plain lists")
{
    using list = named_gradients<double>;
    const f64 a = {{1.0, -2.0}, {0.5, 4.0}};
    f64 slightly = a, wrong = a;
    slightly(1, 1) += 1e-13;  // rounding: agrees
    wrong(0, 1) = -2.1;       // max abs 0.1, rel 0.1 / 4 = 0.025
    const list reference = {{"c", a}, {"b", a}, {"a", a}};

    SUBCASE("agreement within tolerance")
    {
        const auto r = first_divergence(reference, list{{"a", a}, {"b", slightly}, {"c", a}});
        CHECK_FALSE(r.diverged());
        CHECK(r.first_divergence() == nullptr);
        CHECK(r.rows.size() == 3);
        CHECK(r.summary().rfind("no divergence: all 3 gradients agree", 0) == 0);
    }
    SUBCASE("the first in the reference's order, not the candidate's")
    {
        const auto r = first_divergence(reference, list{{"a", wrong}, {"b", wrong}, {"c", a}});
        REQUIRE(r.diverged());
        CHECK(r.first_divergence()->name == "b");
        CHECK(r.first_divergence()->max_abs == doctest::Approx(0.1));
        CHECK(r.first_divergence()->max_rel == doctest::Approx(0.025));
        CHECK(r.rows[2].diverges);
        const std::string text = r.to_string();
        CHECK(text.rfind("first divergence: d b (2, 2): max abs 1.0e-01, max rel 2.5e-02", 0) == 0);
        CHECK(text.find("everything after it in backward order is downstream") != std::string::npos);
        CHECK(text.find("<- first divergence") != std::string::npos);
    }
    SUBCASE("a loose tolerance lets it pass")
    {
        CHECK_FALSE(first_divergence(reference, list{{"a", a}, {"b", wrong}, {"c", a}}, {0.05, 0.0}).diverged());
    }
    SUBCASE("shapes that differ, names missing on either side")
    {
        const f64 flat = xt::flatten(a);
        auto r = first_divergence(reference, list{{"c", a}, {"b", flat}, {"a", a}});
        CHECK(r.first_divergence()->name == "b");
        CHECK(r.summary().find("has shape (4) in manual but (2, 2) in tape") != std::string::npos);
        r = first_divergence(reference, list{{"c", a}, {"a", a}});
        CHECK(r.first_divergence()->name == "b");
        CHECK_FALSE(r.first_divergence()->in_candidate);
        r = first_divergence(reference, list{{"c", a}, {"b", a}, {"a", a}, {"z", a}});
        CHECK(r.first_divergence()->name == "z");
        CHECK_FALSE(r.first_divergence()->in_reference);
    }
    SUBCASE("NaN: agrees with NaN, diverges from a number")
    {
        f64 with_nan = a;
        with_nan(0, 0) = NAN;
        CHECK_FALSE(first_divergence(list{{"x", with_nan}}, list{{"x", with_nan}}).diverged());
        CHECK(first_divergence(list{{"x", with_nan}}, list{{"x", a}}).diverged());
        CHECK(first_divergence(list{{"x", a}}, list{{"x", with_nan}}).diverged());
    }
    SUBCASE("zeros against tiny rounding noise agree through atol")
    {
        const f64 zeros = xt::zeros<double>({2, 2});
        f64 noise = zeros;
        noise(1, 0) = 1e-17;
        CHECK_FALSE(first_divergence(list{{"x", zeros}}, list{{"x", noise}}).diverged());
        CHECK(first_divergence(list{{"x", zeros}}, list{{"x", noise}}).rows[0].max_rel == doctest::Approx(1.0));
    }
}

// ---- against the tape ----------------------------------------------------------------------------

namespace
{
// The tape's forward and backward (keeping every node's gradient) beside the manual forward.
template <class T>
struct tape_and_manual
{
    tape<T> t;
    gpt_result<T> taped;
    manual::gpt_forward_result<T> by_hand;
};

template <class T>
void run_both(tape_and_manual<T>& r, gpt_parameters<T>& p, const ids_t& tokens, const ids_t& targets,
              const gpt_options& options = {})
{
    r.taped = gpt_forward(r.t, p, tokens, &targets, options);
    p.zero_grad();
    r.t.backward(r.taped.loss, /*retain_graph=*/true);
    r.by_hand = manual::gpt_forward(p, tokens, &targets);
}

struct model_case
{
    const char* name;
    gpt_config config;
    std::size_t batch, length, ignore_every;
};

void check_tape_equals_manual(const model_case& m, const ids_t* all_targets = nullptr,
                              const gpt_options& options = {})
{
    CAPTURE(m.name);
    auto p = random_gpt<double>(m.config, 41);
    const ids_t tokens = random_ids(m.batch, m.length, m.config.vocab_size, 42);
    const ids_t targets =
        all_targets ? *all_targets : random_targets(m.batch, m.length, m.config.vocab_size, 43, m.ignore_every);
    tape_and_manual<double> r;
    run_both(r, p, tokens, targets, options);
    CHECK(r.by_hand.loss == doctest::Approx(r.taped.loss.value()()).epsilon(1e-12));
    CHECK(relative_difference(r.by_hand.logits, r.taped.logits.value()) < 1e-12);
    REQUIRE(r.by_hand.activations.size() == r.taped.activations.size());
    for (std::size_t k = 0; k < r.taped.activations.size(); ++k)
    {
        CHECK(r.by_hand.activations[k].first == r.taped.activations[k].first);
        CHECK(relative_difference(r.by_hand.activations[k].second, r.taped.activations[k].second.value()) < 1e-12);
    }
    // Every activation's and every parameter's gradient, to 1e-12 of the tensor's largest entry.
    const auto report = first_divergence(r.taped, p, manual::gpt_backward(r.by_hand.cache), {1e-12, 1e-15});
    CHECK_MESSAGE(!report.diverged(), report.to_string());
    CHECK(report.rows.size() == manual::gpt_backward_order(m.config).size());
}
}  // namespace

TEST_CASE("gpt_manual: equals the tape to 1e-12 in float64")
{
    SUBCASE("shapes and targets")
    {
        for (const model_case& m : {model_case{"1 layer", {11, 8, 1, 16, 4, 0}, 2, 6, 4},
                                model_case{"3 layers", {11, 8, 3, 16, 4, 0}, 2, 5, 3},
                                model_case{"grouped queries G = 2", {11, 8, 2, 16, 4, 2}, 2, 6, 5},
                                model_case{"multi-query G = 1", {11, 8, 2, 16, 4, 1}, 2, 6, 5},
                                model_case{"T = 1", {11, 8, 2, 16, 4, 0}, 2, 1, 0},
                                model_case{"T = block_size", {11, 8, 2, 16, 4, 0}, 2, 8, 3},
                                model_case{"B = 1", {11, 8, 2, 16, 4, 0}, 1, 5, 2},
                                model_case{"no target ignored", {11, 8, 2, 16, 4, 0}, 3, 4, 0}})
        {
            check_tape_equals_manual(m);
        }
    }
    SUBCASE("every target ignored")
    {
        const ids_t none = xt::full_like(random_ids(2, 4, 11, 1), -1);
        check_tape_equals_manual({"all ignored", {11, 8, 2, 16, 4, 0}, 2, 4, 0}, &none);
    }
    SUBCASE("the tape composed from primitives (fused = false)")
    {
        gpt_options composed;
        composed.fused = false;
        check_tape_equals_manual({"composed", {11, 8, 2, 16, 4, 2}, 2, 6, 4}, nullptr, composed);
    }
}

TEST_CASE("gpt_manual: equals the tape in float32")
{
    const gpt_config c{11, 8, 2, 16, 4, 2};
    auto p = to_float(random_gpt<double>(c, 51));
    const ids_t tokens = random_ids(2, 6, 11, 52), targets = random_targets(2, 6, 11, 53, 4);
    tape_and_manual<float> r;
    run_both(r, p, tokens, targets);
    CHECK(double(r.by_hand.loss) == doctest::Approx(double(r.taped.loss.value()())).epsilon(1e-5));
    const auto report = first_divergence(r.taped, p, manual::gpt_backward(r.by_hand.cache));
    CHECK_MESSAGE(!report.diverged(), report.to_string());
    CHECK(report.tolerance.rtol == 1e-4);
    double worst = 0;
    for (const auto& row : report.rows)
    {
        worst = std::max(worst, row.max_rel);
    }
    CHECK(worst < 1e-5);  // rounding: about 1e-6 of the largest entry
}

TEST_CASE("first_divergence against the tape names the first node downstream of each broken rule")
{
    struct layout
    {
        gpt_config config;
        std::map<manual::broken_rule, std::string> first_wrong;
    };
    const std::vector<layout> layouts = {
        {{11, 8, 2, 16, 4, 0}, first_wrong_in_two_layers},
        {{11, 8, 3, 16, 4, 2},
         {{manual::broken_rule::cross_entropy, "logits"}, {manual::broken_rule::gelu, "blocks.2.mlp_hidden"},
          {manual::broken_rule::matmul_bias, "blocks.2.ln_2"}, {manual::broken_rule::layer_norm, "blocks.2.res_1"},
          {manual::broken_rule::attention, "blocks.2.ln_1"}, {manual::broken_rule::residual, "blocks.1.res_2"},
          {manual::broken_rule::encoder, "wte"}}},
        {{11, 8, 1, 16, 4, 1},
         {{manual::broken_rule::cross_entropy, "logits"}, {manual::broken_rule::gelu, "blocks.0.mlp_hidden"},
          {manual::broken_rule::matmul_bias, "blocks.0.ln_2"}, {manual::broken_rule::layer_norm, "blocks.0.res_1"},
          {manual::broken_rule::attention, "blocks.0.ln_1"}, {manual::broken_rule::residual, "embed"},
          {manual::broken_rule::encoder, "wte"}}}};
    for (const layout& l : layouts)
    {
        CAPTURE(l.config.layers);
        auto p = random_gpt<double>(l.config, 61);
        const ids_t tokens = random_ids(2, 6, 11, 62), targets = random_targets(2, 6, 11, 63, 4);
        tape_and_manual<double> r;
        run_both(r, p, tokens, targets);
        CHECK_FALSE(first_divergence(r.taped, p, manual::gpt_backward(r.by_hand.cache)).diverged());
        for (manual::broken_rule rule : manual::breakable_rules(l.config))
        {
            CAPTURE(manual::to_string(rule));
            const auto report = first_divergence(r.taped, p, manual::gpt_backward(r.by_hand.cache, rule));
            REQUIRE(report.diverged());
            CHECK(report.first_divergence()->name == l.first_wrong.at(rule));
            CHECK(report.summary().rfind("first divergence: d " + l.first_wrong.at(rule) + " (", 0) == 0);
        }
    }
}

TEST_CASE("first_divergence: a tape that did not retain its graph is called out")
{
    const gpt_config c{11, 8, 1, 16, 4, 0};
    auto p = random_gpt<double>(c, 81);
    const ids_t tokens = random_ids(2, 3, 11, 1), targets = random_targets(2, 3, 11, 2, 0);
    tape<double> t;
    const auto taped = gpt_forward(t, p, tokens, &targets);
    p.zero_grad();
    t.backward(taped.loss);  // frees the intermediate gradients
    const auto report = first_divergence(taped, p, manual::gpt_backward(manual::gpt_forward(p, tokens, &targets).cache));
    REQUIRE(report.diverged());
    CHECK(report.first_divergence()->name == "logits");
    CHECK(report.first_divergence()->reference_all_zero);
    CHECK(report.summary().find("was its backward run with retain_graph = true?") != std::string::npos);
}

TEST_CASE("tape_gradients lists the tape's gradients in backward order")
{
    const gpt_config c{11, 8, 2, 16, 4, 0};
    auto p = random_gpt<double>(c, 71);
    tape_and_manual<double> r;
    run_both(r, p, random_ids(2, 3, 11, 1), random_targets(2, 3, 11, 2, 0));
    const auto list = tape_gradients(r.taped, p);
    const auto order = manual::gpt_backward_order(c);
    REQUIRE(list.size() == order.size());
    for (std::size_t k = 0; k < order.size(); ++k)
    {
        CHECK(list[k].first == order[k]);
    }
    CHECK(relative_difference(list.back().second, p.wpe.grad()) == 0.0);
}

// ---- bad input ----------------------------------------------------------------------------------

TEST_CASE("gpt_manual: bad input throws naming the function and the problem")
{
    const gpt_config c{5, 4, 1, 4, 2, 0};
    auto p = random_gpt<double>(c, 1);
    const ids_t tokens = ids({{1, 2}});
    auto message = [](const std::function<void()>& f) {
        try
        {
            f();
        }
        catch (const std::invalid_argument& e)
        {
            return std::string(e.what());
        }
        return std::string("no exception");
    };
    auto forward = [&](const ids_t& t, const ids_t* targets = nullptr) { manual::gpt_forward(p, t, targets); };
    CHECK(message([&] { forward(ids({{1, 5}})); }).find("gpt_forward: token 5 at (0, 1) is outside [0, 5)") == 0);
    CHECK(message([&] { forward(ids({{-1}})); }).find("token -1") != std::string::npos);
    CHECK(message([&] { forward(ids({{1, 2, 3, 4, 0}})); }).find("1 <= T <= block_size = 4, got (1, 5)") !=
          std::string::npos);
    CHECK(message([&] { forward(ids_t{1, 2}); }).find("tokens must be (B, T)") != std::string::npos);
    const ids_t bad_shape = ids({{1}, {2}});
    CHECK(message([&] { forward(tokens, &bad_shape); }).find("targets must have the tokens' shape (1, 2)") !=
          std::string::npos);
    const ids_t bad_target = ids({{1, -2}});
    CHECK(message([&] { forward(tokens, &bad_target); }).find("target -2 at (0, 1) is neither -1 nor in [0, 5)") !=
          std::string::npos);
    CHECK(message([&] { manual::gpt_backward(manual::gpt_forward(p, tokens).cache); })
              .find("gpt_backward: the forward pass was given no targets") == 0);

    auto wrong = p;
    wrong.blocks[0].W_K = parameter<double>(xt::zeros<double>({4, 3}));
    CHECK(message([&] { manual::gpt_forward(wrong, tokens); })
              .find("gpt_forward: blocks.0.attn.W_K must be (4, 4), got (4, 3)") == 0);
    wrong = p;
    wrong.blocks.clear();
    CHECK(message([&] { manual::gpt_forward(wrong, tokens); }).find("0 blocks for 1 layers") != std::string::npos);
    wrong = p;
    wrong.config.heads = 3;
    CHECK(message([&] { manual::gpt_forward(wrong, tokens); }).find("not divisible") != std::string::npos);
    wrong.config = c;
    wrong.config.vocab_size = 0;
    CHECK(message([&] { manual::gpt_forward(wrong, tokens); }).find("must be positive") != std::string::npos);

    // The layer functions check what they read.
    const f64 x = xt::zeros<double>({1, 2, 4});
    const f64 w32 = xt::zeros<double>({3, 2}), b2 = xt::zeros<double>({2});
    CHECK(message([&] { manual::linear_forward(x, w32, &b2); }).find("linear_forward: x (B, T, C), W (C, OC)") == 0);
    manual::layernorm_cache<double> cache;
    const f64 b4 = xt::zeros<double>({4});
    CHECK(message([&] { manual::layernorm_forward(x, f64(xt::ones<double>({3})), &b4, cache); })
              .find("layernorm_forward: weight must be (4), got (3)") == 0);
    f64 d_wte = xt::zeros<double>({3, 4}), d_wpe = xt::zeros<double>({4, 4});
    CHECK(message([&] { manual::encoder_backward(d_wte, &d_wpe, x, ids({{0, 3}})); }).find("encoder_backward") == 0);
}

// ---- the architecture variants -----------------------------------------------------------------------

namespace
{
// A variant of the test model: every parameter the variant declares, random (matrices N(0, 0.4), norm
// weights 1 + N(0, 0.2), every other vector N(0, 0.2)).
gpt_parameters<double> random_variant(const gpt_config& c, unsigned seed)
{
    gpt_parameters<double> p = gpt_parameters<double>::init(c, seed);
    std::mt19937 rng(seed);
    for (auto& [name, handle] : manual::named_parameters(p))
    {
        const bool weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
        std::normal_distribution<double> normal(weight ? 1.0 : 0.0, handle.value().dimension() == 2 ? 0.4 : 0.2);
        for (double& v : handle.value())
        {
            v = normal(rng);
        }
    }
    return p;
}

gpt_config variant(std::size_t layers, std::size_t heads, std::size_t kv_heads, norm_kind norm,
                   position_kind position, mlp_kind mlp, bias_kind bias, bool tied_head)
{
    gpt_config c{11, 8, layers, 16, heads, kv_heads};
    c.norm = norm, c.position = position, c.mlp = mlp, c.bias = bias, c.tied_head = tied_head;
    c.rope_base = 500;
    return c;
}

// c with the later variants of docs/spec.md's "More architecture variants".
gpt_config with_speedrun(gpt_config c, qk_norm_kind qk_norm, double softcap)
{
    c.qk_norm = qk_norm;
    c.logit_softcap = softcap;
    return c;
}

gpt_config with_window(gpt_config c, std::size_t window)
{
    c.attention_window = window;
    return c;
}

const std::vector<std::pair<const char*, gpt_config>> variants = {
    {"llama", variant(2, 4, 4, norm_kind::rmsnorm, position_kind::rope, mlp_kind::swiglu, bias_kind::none, false)},
    {"llama gqa", variant(2, 4, 2, norm_kind::rmsnorm, position_kind::rope, mlp_kind::swiglu, bias_kind::none, true)},
    {"gpt2 bias all", variant(2, 4, 4, norm_kind::layernorm, position_kind::learned, mlp_kind::gelu_tanh,
                              bias_kind::all, true)},
    {"nanogpt bias none", variant(2, 2, 2, norm_kind::layernorm, position_kind::learned, mlp_kind::gelu,
                                  bias_kind::none, true)},
    {"position none, untied", variant(2, 4, 1, norm_kind::layernorm, position_kind::none, mlp_kind::gelu_tanh,
                                      bias_kind::mlp, false)},
    {"mqa rope bias all swiglu", variant(3, 4, 1, norm_kind::rmsnorm, position_kind::rope, mlp_kind::swiglu,
                                         bias_kind::all, true)},
    {"one layer, rope, gelu", variant(1, 2, 1, norm_kind::layernorm, position_kind::rope, mlp_kind::gelu,
                                      bias_kind::all, false)},
    {"relu2", variant(2, 4, 2, norm_kind::layernorm, position_kind::learned, mlp_kind::relu2, bias_kind::mlp, true)},
    {"llama + qk_norm", with_speedrun(variant(2, 4, 2, norm_kind::rmsnorm, position_kind::rope, mlp_kind::swiglu,
                                              bias_kind::none, false), qk_norm_kind::rms, 0)},
    {"gpt2 + softcap", with_speedrun(variant(2, 4, 4, norm_kind::layernorm, position_kind::learned,
                                             mlp_kind::gelu_tanh, bias_kind::all, true), qk_norm_kind::none, 1.5)},
    {"llama + qk_norm + window 2", with_window(with_speedrun(variant(2, 4, 2, norm_kind::rmsnorm, position_kind::rope,
                                                                   mlp_kind::swiglu, bias_kind::none, false),
                                                           qk_norm_kind::rms, 0), 2)},
    {"gelu_tanh + relu2 + softcap + window 4", with_window(with_speedrun(variant(1, 2, 2, norm_kind::layernorm,
                                                                                position_kind::learned,
                                                                                mlp_kind::relu2, bias_kind::mlp, true),
                                                                        qk_norm_kind::none, 2.0), 4)},
    {"relu2 + qk_norm + softcap, untied", with_speedrun(variant(2, 4, 1, norm_kind::layernorm, position_kind::none,
                                                                mlp_kind::relu2, bias_kind::all, false),
                                                        qk_norm_kind::rms, 2.0)},
};

// The gradient each deliberate mistake corrupts first, in backward order.
std::string first_wrong(manual::broken_rule rule, const gpt_config& c)
{
    const std::size_t layers = c.layers;
    const std::string last = "blocks." + std::to_string(layers - 1) + ".";
    switch (rule)
    {
    case manual::broken_rule::encoder: return "wte";
    case manual::broken_rule::cross_entropy: return "logits";
    case manual::broken_rule::untied_head: return "lm_head";
    case manual::broken_rule::layer_norm:
    case manual::broken_rule::rms_norm: return last + "res_1";
    case manual::broken_rule::attention:
    case manual::broken_rule::rope: return last + "ln_1";
    case manual::broken_rule::residual: return layers > 1 ? "blocks." + std::to_string(layers - 2) + ".res_2" : "embed";
    case manual::broken_rule::matmul_bias: return last + "ln_2";
    case manual::broken_rule::gelu:
    case manual::broken_rule::gelu_exact: return last + "mlp_hidden";
    case manual::broken_rule::swiglu: return last + "mlp_gate";
    case manual::broken_rule::attention_bias: return last + "attn.b_Q";
    case manual::broken_rule::head_rms: return last + "ln_1";
    case manual::broken_rule::relu2: return last + "mlp_hidden";
    case manual::broken_rule::softcap: return c.tied_head ? "ln_f" : "lm_head";
    case manual::broken_rule::none: break;
    }
    return "";
}
}  // namespace

TEST_CASE("gpt_manual: every variant equals the tape to 1e-12 in float64, fused and composed, T = 1 too")
{
    for (const auto& [name, c] : variants)
    {
        for (std::size_t length : {1, 6})
        {
            for (bool fused : {true, false})
            {
                CAPTURE(std::string(name));
                CAPTURE(length);
                CAPTURE(fused);
                auto p = random_variant(c, 91);
                tape_and_manual<double> r;
                gpt_options options;
                options.fused = fused;
                run_both(r, p, random_ids(2, length, 11, 92), random_targets(2, length, 11, 93, 4), options);
                CHECK(std::abs(r.by_hand.loss - r.taped.loss.value()()) <= 1e-12 * std::abs(r.by_hand.loss));
                // an absolute 1e-14 for the gradients that are 0 but for rounding (W_Q, W_K at T = 1)
                const auto report = first_divergence(r.taped, p, manual::gpt_backward(r.by_hand.cache), {1e-12, 1e-14});
                CHECK_MESSAGE(!report.diverged(), report.to_string());
                CHECK(report.rows.size() == manual::gpt_backward_order(c).size());
            }
        }
    }
}

TEST_CASE("gpt_manual: every variant's gradients list exactly its parameters and activations")
{
    for (const auto& [name, c] : variants)
    {
        CAPTURE(std::string(name));
        auto p = random_variant(c, 95);
        const auto f = manual::gpt_forward(p, random_ids(2, 5, 11, 96), nullptr);
        const auto targets = random_targets(2, 5, 11, 97, 0);
        const auto g = manual::gpt_backward(manual::gpt_forward(p, random_ids(2, 5, 11, 96), &targets).cache);
        std::vector<std::string> names;
        for (const auto& entry : g.in_backward_order)
        {
            names.push_back(entry.first);
        }
        CHECK(names == manual::gpt_backward_order(c));
        CHECK(names == expected_backward_order(c));
        std::vector<std::string> activations;
        for (const auto& entry : f.activations)
        {
            activations.push_back(entry.first);
        }
        CHECK(activations == manual::gpt_activation_names(c));
        CHECK(activations == expected_activation_names(c));
        std::vector<std::string> parameter_names;
        for (const auto& entry : g.parameters())
        {
            parameter_names.push_back(entry.first);
        }
        std::vector<std::string> declared;
        for (const parameter<double>& handle : p.named_parameters())
        {
            declared.push_back(handle.name());
        }
        CHECK(parameter_names == declared);
    }
}

TEST_CASE("first_divergence finds each deliberate mistake of every variant at the node it corrupts first")
{
    for (const auto& [name, c] : variants)
    {
        CAPTURE(std::string(name));
        auto p = random_variant(c, 101);
        tape_and_manual<double> r;
        run_both(r, p, random_ids(2, 6, 11, 102), random_targets(2, 6, 11, 103, 4));
        const auto rules = manual::breakable_rules(c);
        CHECK(rules.size() >= 7);
        for (manual::broken_rule rule : rules)
        {
            CAPTURE(manual::to_string(rule));
            CHECK_FALSE(manual::not_used_by(rule, c).has_value());
            const auto report = first_divergence(r.taped, p, manual::gpt_backward(r.by_hand.cache, rule));
            REQUIRE(report.diverged());
            CHECK(report.first_divergence()->name == first_wrong(rule, c));
            CHECK(report.first_divergence()->max_rel > 1e-3);  // a real error, not rounding
        }
    }
}

TEST_CASE("the variants' rules are used only by their variants, and each says which flag it needs")
{
    const gpt_config plain{11, 8, 2, 16, 4, 0};
    for (auto rule : {manual::broken_rule::rms_norm, manual::broken_rule::rope, manual::broken_rule::gelu_exact,
                      manual::broken_rule::swiglu, manual::broken_rule::attention_bias, manual::broken_rule::untied_head,
                      manual::broken_rule::head_rms, manual::broken_rule::relu2, manual::broken_rule::softcap})
    {
        CAPTURE(manual::to_string(rule));
        const auto why = manual::not_used_by(rule, plain);
        REQUIRE(why.has_value());
        CHECK(why->rfind("needs --", 0) == 0);
        CHECK(manual::describe(rule, 2).size() > 20);
        CHECK(manual::broken_rule_from_string(manual::to_string(rule)) == rule);
    }
    CHECK(manual::breakable_rules(plain).size() == 7);
    CHECK(manual::breakable_rules().size() == 16);
}
}  // namespace test_gpt_manual
