// The GPT's architecture variants (models/gpt.hpp; docs/spec.md, "Architecture variants"): the tensors
// each variant declares (names, shapes, count), the metadata keys, checkpoint round trips, and for every
// variant: logits, loss and gradients against PyTorch (tests/data/gpt_variant_fixtures), KV-cache decoding
// equal to the full forward, fused equal to composed, the tape against central differences, dropout off in
// evaluation and seeded in training; and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <set>

#include <filesystem>

#include "io/checkpoint.hpp"
#include "io/npy.hpp"
#include "models/gpt_decode.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"

namespace test_gpt_variants
{
using namespace xgrad;
using namespace xgrad::models;
using xgrad::test::max_relative_difference;
using xgrad::test::random_ids;

namespace
{
gpt_config sizes(std::size_t kv_heads = 0)
{
    return {11, 6, 2, 8, 2, kv_heads};
}

// The Llama block (docs/spec.md, "Architecture variants"): RMSNorm, rotary positions, SwiGLU, no biases.
void use_llama_block(gpt_config& c)
{
    c.norm = norm_kind::rmsnorm;
    c.position = position_kind::rope;
    c.mlp = mlp_kind::swiglu;
    c.bias = bias_kind::none;
}

struct named_variant
{
    std::string name;
    gpt_config config;
};

// Every value of every key at least once, and the three layouts the conversions name.
std::vector<named_variant> variants()
{
    std::vector<named_variant> v;
    auto add = [&v](std::string name, auto change, std::size_t kv_heads = 0) {
        gpt_config c = sizes(kv_heads);
        change(c);
        v.push_back({std::move(name), c});
    };
    add("default", [](gpt_config&) {});
    add("rmsnorm", [](gpt_config& c) { c.norm = norm_kind::rmsnorm; });
    add("rope", [](gpt_config& c) { c.position = position_kind::rope; });
    add("rope base 500, G = 1", [](gpt_config& c) { c.position = position_kind::rope; c.rope_base = 500; }, 1);
    add("no position", [](gpt_config& c) { c.position = position_kind::none; });
    add("gelu", [](gpt_config& c) { c.mlp = mlp_kind::gelu; });
    add("swiglu", [](gpt_config& c) { c.mlp = mlp_kind::swiglu; });
    add("mlp_hidden 12", [](gpt_config& c) { c.mlp_hidden = 12; });
    add("bias all (GPT-2)", [](gpt_config& c) { c.bias = bias_kind::all; });
    add("bias none", [](gpt_config& c) { c.bias = bias_kind::none; });
    add("untied head", [](gpt_config& c) { c.tied_head = false; });
    add("llama", [](gpt_config& c) {
        use_llama_block(c);
        c.mlp_hidden = 20;
    }, 1);
    add("nanoGPT, untied", [](gpt_config& c) {
        c.bias = bias_kind::all;
        c.mlp = mlp_kind::gelu;
        c.tied_head = false;
    });
    add("qk_norm", [](gpt_config& c) { c.qk_norm = qk_norm_kind::rms; });
    add("relu2", [](gpt_config& c) { c.mlp = mlp_kind::relu2; });
    add("logit_softcap 2", [](gpt_config& c) { c.logit_softcap = 2.0; });
    add("llama + qk_norm + softcap", [](gpt_config& c) {
        use_llama_block(c);
        c.qk_norm = qk_norm_kind::rms;
        c.logit_softcap = 1.5;
    }, 1);
    add("attention_window 2", [](gpt_config& c) { c.attention_window = 2; });
    add("llama + qk_norm + window 3", [](gpt_config& c) {
        use_llama_block(c);
        c.qk_norm = qk_norm_kind::rms;
        c.attention_window = 3;
    }, 1);
    add("relu2 + softcap + window 1", [](gpt_config& c) {
        c.mlp = mlp_kind::relu2;
        c.logit_softcap = 3.0;
        c.attention_window = 1;
    });
    add("relu2, bias all, untied, qk_norm", [](gpt_config& c) {
        c.mlp = mlp_kind::relu2;
        c.bias = bias_kind::all;
        c.tied_head = false;
        c.qk_norm = qk_norm_kind::rms;
    });
    return v;
}

// docs/spec.md's tables, written out again from their rules: name -> shape.
std::map<std::string, shape_t> expected_tensors(const gpt_config& c)
{
    const std::size_t V = c.vocab_size, d = c.d_model, kv = c.kv_head_count() * (d / c.heads);
    const std::size_t h = c.mlp_hidden ? c.mlp_hidden : 4 * d;
    const bool norm_bias = c.norm == norm_kind::layernorm && c.bias != bias_kind::none;
    const bool mlp_bias = c.bias != bias_kind::none, attn_bias = c.bias == bias_kind::all;
    std::map<std::string, shape_t> t{{"wte", {V, d}}, {"ln_f.weight", {d}}};
    if (c.position == position_kind::learned)
    {
        t["wpe"] = {c.block_size, d};
    }
    if (norm_bias)
    {
        t["ln_f.bias"] = {d};
    }
    if (!c.tied_head)
    {
        t["lm_head"] = {d, V};
    }
    for (std::size_t i = 0; i < c.layers; ++i)
    {
        const std::string b = "blocks." + std::to_string(i) + ".";
        t[b + "ln_1.weight"] = t[b + "ln_2.weight"] = {d};
        if (norm_bias)
        {
            t[b + "ln_1.bias"] = t[b + "ln_2.bias"] = {d};
        }
        t[b + "attn.W_Q"] = t[b + "attn.W_O"] = {d, d};
        t[b + "attn.W_K"] = t[b + "attn.W_V"] = {d, kv};
        if (attn_bias)
        {
            t[b + "attn.b_Q"] = t[b + "attn.b_O"] = {d};
            t[b + "attn.b_K"] = t[b + "attn.b_V"] = {kv};
        }
        if (c.mlp == mlp_kind::swiglu)
        {
            t[b + "mlp.W_gate"] = t[b + "mlp.W_up"] = {d, h};
            t[b + "mlp.W_down"] = {h, d};
            if (mlp_bias)
            {
                t[b + "mlp.b_gate"] = t[b + "mlp.b_up"] = {h};
                t[b + "mlp.b_down"] = {d};
            }
        }
        else
        {
            t[b + "mlp.W_fc"] = {d, h};
            t[b + "mlp.W_proj"] = {h, d};
            if (mlp_bias)
            {
                t[b + "mlp.b_fc"] = {h};
                t[b + "mlp.b_proj"] = {d};
            }
        }
    }
    return t;
}

// Random values everywhere (norm weights around 1), so no parameter is special when gradients are checked.
template <class T>
void randomise(gpt_parameters<T>& params, unsigned seed, double scale = 0.3)
{
    unsigned k = 0;
    for (parameter<T>& p : params.named_parameters())
    {
        array<T> v = test::normal_array<T>(to_shape(p.value().shape()), seed + 100 * k++, scale);
        if (p.name().find("ln_") != std::string::npos && p.name().find(".weight") != std::string::npos)
        {
            v += T(1);
        }
        p.value() = v;
    }
}

double loss_of(const gpt_parameters<double>& p, const ids_t& tokens, const ids_t& targets, const gpt_options& o = {})
{
    tape<double> t;
    return gpt_forward(t, p, tokens, &targets, o).loss.value().flat(0);
}

std::vector<array<double>> gradients_of(gpt_parameters<double>& p, const ids_t& tokens, const ids_t& targets,
                                        bool fused)
{
    p.zero_grad();
    tape<double> t;
    gpt_options o;
    o.fused = fused;
    t.backward(gpt_forward(t, p, tokens, &targets, o).loss);
    std::vector<array<double>> grads;
    for (const auto& q : p.named_parameters())
    {
        grads.push_back(q.grad());
    }
    return grads;
}

ids_t columns(const ids_t& tokens, std::size_t begin, std::size_t end)
{
    return xt::view(tokens, xt::all(), xt::range(begin, end));
}

std::string load_error(const std::string& path)
{
    try
    {
        io::load_checkpoint<double>(path);
    }
    catch (const std::exception& e)
    {
        return e.what();
    }
    return "";
}
}  // namespace

TEST_CASE("every variant declares exactly the tensors of its tables, in visit order, counted by the formula")
{
    for (const auto& [name, c] : variants())
    {
        CAPTURE(name);
        const auto params = gpt_parameters<float>::init(c, 1);
        const auto expected = expected_tensors(c);
        std::map<std::string, shape_t> got;
        std::uint64_t scalars = 0;
        for (const auto& p : params.named_parameters())
        {
            CHECK(got.count(p.name()) == 0);
            got[p.name()] = to_shape(p.value().shape());
            scalars += p.value().size();
        }
        CHECK(got == expected);
        CHECK(gpt_parameter_count(c) == scalars);
        const auto declared = declared_parameters(gpt_parameters<float>::declare(c));
        REQUIRE(declared.size() == got.size());
        CHECK(declared.front().first == "wte");
    }
}

TEST_CASE("the default model's draws do not depend on the variant fields: the same seed, the same numbers")
{
    gpt_config untied = sizes();
    untied.tied_head = false;  // lm_head is declared last, so every earlier draw is the default's
    const auto a = gpt_parameters<double>::init(sizes(), 9).named_parameters();
    const auto b = gpt_parameters<double>::init(untied, 9).named_parameters();
    REQUIRE(b.size() == a.size() + 1);
    for (std::size_t i = 0; i < a.size(); ++i)
    {
        CAPTURE(a[i].name());
        CHECK(a[i].name() == b[i].name());
        CHECK(a[i].value() == b[i].value());
    }
    // Biases draw nothing: bias = all changes no weight of the default model.
    gpt_config all = sizes();
    all.bias = bias_kind::all;
    const auto c = gpt_parameters<double>::init(all, 9);
    CHECK(c.blocks[1].W_O.value() == gpt_parameters<double>::init(sizes(), 9).blocks[1].W_O.value());
    CHECK(c.blocks[1].b_K.value() == xt::zeros<double>({8}));
}

TEST_CASE("config metadata: the sizes always, other fields when not the default, read back as they were")
{
    for (const auto& [name, c] : variants())
    {
        CAPTURE(name);
        const auto metadata = config_metadata(c);
        CHECK(config_metadata(config_from_metadata(metadata)) == metadata);
        CHECK(first_difference(config_from_metadata(metadata), c).empty());
    }
    const auto plain = config_metadata(sizes());
    CHECK(plain.size() == 6);  // a default model's metadata: the sizes alone, as before
    CHECK(plain.at("kv_heads") == "2");
    gpt_config wide = sizes();
    wide.mlp_hidden = 48;
    wide.rope_base = 500000;
    CHECK(config_metadata(wide).at("mlp_hidden") == "48");
    CHECK(config_metadata(wide).at("rope_base") == "5e+05");  // the shortest text that reads back
    CHECK(config_metadata(wide).count("model_keys") == 0);  // the first variant table needs no listing
    gpt_config later = sizes();
    later.mlp = mlp_kind::relu2;  // a later value of an earlier key
    later.qk_norm = qk_norm_kind::rms;
    later.logit_softcap = 30.0;
    CHECK(config_metadata(later).at("model_keys") == "mlp,qk_norm,logit_softcap");
    CHECK(config_metadata(later).at("logit_softcap") == "30");
    later.logit_softcap = 0.0;  // off: the default, not written
    CHECK(config_metadata(later).count("logit_softcap") == 0);
    CHECK(config_metadata(later).at("model_keys") == "mlp,qk_norm");
    // A decimal integer >= 0 in any spelling: zero with leading zeros is off, a size with them is the size.
    CHECK(config_with_values(sizes(), {{"attention_window", "00"}}).attention_window.value == 0);
    CHECK(config_with_values(sizes(), {{"attention_window", "0"}}).attention_window.value == 0);
    CHECK(config_with_values(sizes(), {{"attention_window", "008"}}).attention_window.value == 8);

    const std::map<std::string, std::string> bad[] = {
        {{"norm", "batchnorm"}},   {{"position", "alibi"}},  {{"mlp", "relu"}},       {{"bias", "some"}},
        {{"tied_head", "yes"}},    {{"rope_base", "-3"}},    {{"rope_base", "1e400"}}, {{"mlp_hidden", "0"}},
        {{"mlp_hidden", "12.5"}}, {{"qk_norm", "layer"}}, {{"logit_softcap", "-1"}}, {{"logit_softcap", "big"}},
        {{"logit_softcap", "inf"}},
    };
    const char* allowed[] = {"layernorm, rmsnorm", "learned, rope, none", "gelu_tanh, gelu, swiglu, relu2",
                             "mlp, all, none", "true, false", "positive decimal number",
                             "positive decimal number", "positive decimal integer", "positive decimal integer",
                             "none, rms", "decimal number >= 0", "decimal number >= 0", "decimal number >= 0"};
    for (std::size_t k = 0; k < std::size(bad); ++k)
    {
        const std::string key = bad[k].begin()->first;
        CAPTURE(key);
        try
        {
            config_with_values(sizes(), bad[k]);
            FAIL("accepted " << bad[k].begin()->second);
        }
        catch (const variant_error& e)
        {
            CHECK(e.key == key);
            CHECK(test::contains(e.what(), "'" + key + "'"));
            CHECK(test::contains(e.what(), allowed[k]));
        }
    }
}

TEST_CASE("attention_window: a window at least the block long is plain causal attention; a shorter one "
          "changes only the positions it hides")
{
    gpt_config c = sizes();
    c.block_size = 7;
    auto p = gpt_parameters<double>::init(c, 5);
    randomise(p, 6, 0.5);
    const ids_t tokens = random_ids(2, 7, c.vocab_size, 3);
    auto logits_with = [&](std::size_t window) {
        p.config.attention_window = window;
        tape<double> t;
        return array<double>(gpt_forward(t, p, tokens).logits.value());
    };
    const array<double> full = logits_with(0);
    CHECK(logits_with(7) == full);
    CHECK(logits_with(1000) == full);
    const array<double> three = logits_with(3);
    // positions 0 .. 2 see the same keys either way; position 3 on has lost key 0
    CHECK(max_relative_difference(array<double>(xt::view(three, xt::all(), xt::range(0, 3), xt::all())),
                                  array<double>(xt::view(full, xt::all(), xt::range(0, 3), xt::all()))) < 1e-13);
    CHECK(max_relative_difference(array<double>(xt::view(three, xt::all(), xt::range(3, 7), xt::all())),
                                  array<double>(xt::view(full, xt::all(), xt::range(3, 7), xt::all()))) > 1e-6);
}

TEST_CASE("validate: RoPE needs an even head width")
{
    gpt_config c{11, 6, 1, 6, 2, 0};  // dh = 3
    c.validate("test");
    c.position = position_kind::rope;
    const std::string message = test::invalid_argument_message([&] { c.validate("gpt_parameters::init"); });
    CHECK(test::contains(message, "position = rope needs an even head width"));
    CHECK(test::contains(message, "dh=3"));
}

TEST_CASE("validate: rope_base is a positive number whatever the position, as a checkpoint stores and reads it")
{
    for (const double base : {std::nan(""), std::numeric_limits<double>::infinity(), -5.0, 0.0})
    {
        CAPTURE(base);
        gpt_config c{11, 8, 1, 8, 2, 0};  // learned positions: rope_base unused, yet written when not the default
        c.rope_base = base;
        CHECK(test::contains(test::invalid_argument_message([&] { c.validate("test"); }),
                             "rope_base must be a positive number"));
    }
}

TEST_CASE("checkpoints: every variant round-trips; non-default keys stored, a default model's file as before")
{
    test::temp_dir dir;
    for (const auto& [name, c] : variants())
    {
        CAPTURE(name);
        auto params = gpt_parameters<double>::init(c, 3);
        randomise(params, 4);
        const std::string path = dir / "model.safetensors";
        io::save_checkpoint(path, params);
        const io::checkpoint<double> back = io::load_checkpoint<double>(path);
        CHECK(config_metadata(back.params.config) == config_metadata(c));
        const auto a = params.named_parameters(), b = back.params.named_parameters();
        REQUIRE(a.size() == b.size());
        for (std::size_t i = 0; i < a.size(); ++i)
        {
            CHECK(a[i].name() == b[i].name());
            CHECK(a[i].value() == b[i].value());
        }
        const auto raw = io::read_safetensors(path).metadata;
        for (const auto& [key, value] : raw)
        {
            CAPTURE(key);
            CHECK((!is_config_key(key) || config_metadata(c).at(key) == value));
        }
        for (const auto& [key, value] : config_metadata(c))
        {
            CHECK(raw.at(key) == value);
        }
    }
}

TEST_CASE("checkpoints: a tensor the variant lacks, a missing one, a wrong shape, an unknown value are named")
{
    test::temp_dir dir;
    gpt_config llama = sizes();
    llama.norm = norm_kind::rmsnorm;
    llama.position = position_kind::rope;
    llama.mlp = mlp_kind::swiglu;
    llama.bias = bias_kind::none;
    const auto params = gpt_parameters<double>::init(llama, 3);
    const std::string good = dir / "good.safetensors";
    io::save_checkpoint(good, params);
    const io::safetensors_file file = io::read_safetensors(good);

    auto write = [&](const std::string& name, io::safetensors_file f) {
        const std::string path = dir / name;
        io::write_safetensors(path, f);
        return load_error(path);
    };
    {
        io::safetensors_file f = file;
        f.tensors["wpe"] = {"F64", xt::zeros<double>({6, 8})};
        const std::string e = write("extra.safetensors", f);
        CHECK(test::contains(e, "unknown tensor 'wpe'"));
        CHECK(test::contains(e, "position = rope"));
    }
    {
        io::safetensors_file f = file;
        f.tensors.erase("blocks.1.mlp.W_up");
        CHECK(test::contains(write("missing.safetensors", f), "tensor 'blocks.1.mlp.W_up' is missing"));
    }
    {
        io::safetensors_file f = file;
        f.tensors["blocks.0.mlp.W_down"] = {"F64", xt::zeros<double>({8, 32})};
        CHECK(test::contains(write("shape.safetensors", f),
                             "tensor 'blocks.0.mlp.W_down' has shape (8, 32), expected (4d, d) = (32, 8)"));
    }
    {
        io::safetensors_file f = file;
        f.metadata["mlp"] = "geglu";
        CHECK(test::contains(write("value.safetensors", f),
                             "metadata 'mlp' = 'geglu' is not one of gelu_tanh, gelu, swiglu, relu2"));
    }
    {
        io::safetensors_file f = file;
        f.metadata.erase("bias");  // absent means bias = mlp: the MLP's biases are then expected
        CHECK(test::contains(write("absent.safetensors", f), "tensor 'blocks.0.mlp.b_gate' is missing"));
    }
    {
        io::safetensors_file f = file;
        f.metadata["d_model"] = "6";  // dh = 3 with RoPE
        f.metadata["heads"] = "2";
        CHECK(test::contains(write("odd.safetensors", f), "even head width"));
    }
}

TEST_CASE("KV-cache decoding equals the full forward for every variant, RoPE at absolute positions (float64)")
{
    for (const auto& [name, c0] : variants())
    {
        CAPTURE(name);
        gpt_config c = c0;
        c.block_size = 9;
        auto p = gpt_parameters<double>::init(c, 5);
        randomise(p, 6, 0.5);
        const ids_t tokens = random_ids(2, 9, c.vocab_size, 3);
        tape<double> t;
        const array<double> full = gpt_forward(t, p, tokens).logits.value();

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
        std::vector<array<double>> weights;
        const array<double> rest = gpt_decode(p, columns(tokens, 4, 9), chunks, &weights);
        CHECK(max_relative_difference(first, xt::view(full, xt::all(), xt::range(0, 4), xt::all())) < 1e-12);
        CHECK(max_relative_difference(rest, xt::view(full, xt::all(), xt::range(4, 9), xt::all())) < 1e-12);
        REQUIRE(weights.size() == c.layers);
        CHECK(to_shape(weights[0].shape()) == shape_t{2, c.heads, 5, 9});
    }
}

TEST_CASE("RoPE: a shifted window sees the same relative positions, so without other position signal the "
          "attention pattern is unchanged")
{
    gpt_config c = sizes();
    c.position = position_kind::rope;
    c.block_size = 9;
    auto p = gpt_parameters<double>::init(c, 5);
    randomise(p, 6, 0.5);
    const ids_t tokens = random_ids(1, 4, c.vocab_size, 3);
    // The same four tokens decoded at positions 0..3 and, after a cache of five other tokens, at 5..8:
    // the logits differ (the cached keys take part) but are finite, and position 0 differs from 5.
    kv_cache<double> fresh, shifted;
    const array<double> at0 = gpt_decode(p, tokens, fresh);
    gpt_decode(p, random_ids(1, 5, c.vocab_size, 4), shifted);
    const array<double> at5 = gpt_decode(p, tokens, shifted);
    CHECK(test::all_finite(at5));
    CHECK(max_relative_difference(at0, at5) > 1e-6);
}

TEST_CASE("fused and composed give the same loss and gradients for every variant")
{
    for (const auto& [name, c] : variants())
    {
        CAPTURE(name);
        auto p = gpt_parameters<double>::init(c, 51);
        randomise(p, 52);
        const ids_t tokens = random_ids(2, c.block_size, c.vocab_size, 53);
        ids_t targets = random_ids(2, c.block_size, c.vocab_size, 54);
        targets(1, 2) = -1;
        gpt_options composed;
        composed.fused = false;
        CHECK(loss_of(p, tokens, targets) == doctest::Approx(loss_of(p, tokens, targets, composed)).epsilon(1e-12));
        const auto f = gradients_of(p, tokens, targets, true), g = gradients_of(p, tokens, targets, false);
        for (std::size_t i = 0; i < f.size(); ++i)
        {
            // b_K's gradient is 0 up to rounding: a bias shared by every key shifts a query's scores alike
            XGRAD_CHECK_CLOSE(f[i], g[i], 1e-11, 1e-11 * std::max(test::max_abs(g[i]), 1e-3));
        }
    }
}

TEST_CASE("gradcheck: every parameter of every variant against central differences (float64)")
{
    for (const auto& [name, c] : variants())
    {
        CAPTURE(name);
        auto p = gpt_parameters<double>::init(c, 61);
        randomise(p, 62);
        ids_t tokens = random_ids(2, 4, c.vocab_size, 63);
        tokens(0, 3) = tokens(0, 1);
        ids_t targets = random_ids(2, 4, c.vocab_size, 64);
        targets(1, 0) = -1;
        const auto grads = gradients_of(p, tokens, targets, true);
        auto named = p.named_parameters();
        for (std::size_t i = 0; i < named.size(); ++i)
        {
            CAPTURE(named[i].name());
            const array<double> numeric =
                numeric_gradient([&] { return loss_of(p, tokens, targets); }, named[i].value());
            // b_K shifts every score of a query alike, which the softmax ignores: its gradient is 0 (not
            // once QK-norm rescales each key); a window of 1 leaves each query one key, whose weight is 1
            // whatever the scores: W_Q, W_K, b_Q, b_K get 0.
            const std::string& n = named[i].name();
            const bool key_bias = n.find("attn.b_K") != std::string::npos && c.qk_norm == qk_norm_kind::none;
            const bool one_key = c.attention_window == 1 && (n.find("attn.W_Q") != std::string::npos ||
                                                             n.find("attn.W_K") != std::string::npos ||
                                                             n.find("attn.b_Q") != std::string::npos ||
                                                             n.find("attn.b_K") != std::string::npos);
            CHECK((key_bias || one_key ? test::max_abs(numeric) < 1e-9 : test::max_abs(numeric) > 0));
            XGRAD_CHECK_CLOSE(grads[i], numeric, 1e-5, 1e-8);
        }
    }
}

TEST_CASE("dropout: off without a generator (evaluation), seeded in training, and it changes the loss")
{
    gpt_config c = sizes();
    auto p = gpt_parameters<double>::init(c, 71);
    randomise(p, 72);
    const ids_t tokens = random_ids(2, 6, c.vocab_size, 73), targets = random_ids(2, 6, c.vocab_size, 74);
    gpt_options evaluation;
    evaluation.dropout = 0.5;  // no generator: nothing is dropped
    CHECK(loss_of(p, tokens, targets, evaluation) == loss_of(p, tokens, targets));

    std::mt19937_64 g1(7), g2(7), g3(8);
    gpt_options a, b, other;
    a.dropout = b.dropout = other.dropout = 0.5;
    a.generator = &g1;
    b.generator = &g2;
    other.generator = &g3;
    const double la = loss_of(p, tokens, targets, a);
    CHECK(la == loss_of(p, tokens, targets, b));
    CHECK(la != loss_of(p, tokens, targets, other));
    CHECK(la != loss_of(p, tokens, targets));

    // The embedding sum, each attention output and each MLP output are dropped: 1 + 2 L dropout nodes.
    std::mt19937_64 g4(7);
    gpt_options counted = a;
    counted.generator = &g4;
    tape<double> t;
    gpt_forward(t, p, tokens, &targets, counted);
    std::size_t dropouts = 0;
    for (const auto& n : t.nodes())
    {
        dropouts += n.op == std::string("dropout");
    }
    CHECK(dropouts == 1 + 2 * c.layers);
}

TEST_CASE("multiply-adds follow the variant: SwiGLU's three matrices and the MLP's width")
{
    gpt_config c = sizes();
    const auto base = gpt_forward_multiply_adds(c, 2, 5);
    c.mlp = mlp_kind::swiglu;
    c.mlp_hidden = 12;
    const auto swiglu = gpt_forward_multiply_adds(c, 2, 5);
    CHECK(base.mlp == 2ull * 2 * 5 * 2 * 8 * 32);
    CHECK(swiglu.mlp == 2ull * 2 * 5 * 3 * 8 * 12);
    CHECK(swiglu.projections == base.projections);
    CHECK(swiglu.attention == base.attention);
}

TEST_CASE("the tape counts the multiply-adds gpt_forward_multiply_adds says, for every variant")
{
    for (const auto& [name, c] : variants())
    {
        CAPTURE(name);
        const auto p = gpt_parameters<double>::init(c, 1);
        for (bool fused : {true, false})
        {
            tape<double> t;
            gpt_options o;
            o.fused = fused;
            gpt_forward(t, p, random_ids(2, 5, c.vocab_size, 1), nullptr, o);
            // The composed RoPE turns each pair by a (dh, dh) matmul, for every head of Q and K.
            const std::uint64_t dh = c.d_model / c.heads;
            const std::uint64_t rope_matmuls = c.position == position_kind::rope && !fused
                                                 ? c.layers * 2 * (c.heads + c.kv_head_count()) * 5 * dh * dh
                                                 : 0;
            CHECK(t.multiply_adds() == gpt_forward_multiply_adds(c, 2, 5).total() + rope_matmuls);
        }
    }
}

TEST_CASE("the tape equals PyTorch on every variant fixture: logits, loss and every gradient (float64)")
{
    namespace fs = std::filesystem;
    const fs::path root = fs::path(xgrad::test::source_dir()) / "tests" / "data" / "gpt_variant_fixtures";
    std::size_t cases = 0;
    for (const auto& entry : fs::directory_iterator(root))
    {
        const fs::path dir = entry.path();
        CAPTURE(dir.filename().string());
        const io::checkpoint<double> ck = io::load_checkpoint<double>((dir / "model.safetensors").string());
        const ids_t tokens = npy::load_ids((dir / "in" / "tokens.npy").string());
        const ids_t targets = npy::load_ids((dir / "in" / "targets.npy").string());
        const array<double> logits = npy::load_float<double>((dir / "expected" / "logits.npy").string());
        const double loss = npy::load_float<double>((dir / "expected" / "loss.npy").string()).flat(0);
        const auto grads = io::read_safetensors((dir / "expected" / "grads.safetensors").string()).tensors;
        for (bool fused : {true, false})
        {
            CAPTURE(fused);
            gpt_parameters<double> p = ck.params;
            p.zero_grad();
            tape<double> t;
            gpt_options o;
            o.fused = fused;
            const auto r = gpt_forward(t, p, tokens, &targets, o);
            t.backward(r.loss);
            XGRAD_CHECK_CLOSE(r.logits.value(), logits, 1e-10, 1e-12);
            CHECK(r.loss.item() == doctest::Approx(loss).epsilon(1e-12));
            const auto named = p.named_parameters();
            CHECK(named.size() == grads.size());
            for (const auto& q : named)
            {
                CAPTURE(q.name());
                REQUIRE(grads.count(q.name()) == 1);
                const array<double>& want = grads.at(q.name()).values;
                XGRAD_CHECK_CLOSE(q.grad(), want, 1e-8, 1e-10 * std::max(1.0, test::max_abs(want)));
            }
        }
        ++cases;
    }
    CHECK(cases >= 9);
}
}  // namespace test_gpt_variants
