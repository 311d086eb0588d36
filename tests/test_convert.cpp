// xgrad-convert's formats at the library level (docs/spec.md, "Converting checkpoints: xgrad-convert"):
// Hugging Face GPT-2 folders and llama2.c folders made by tests/fixtures/make_convert_fixtures.py (NumPy,
// from the formats' descriptions) read field by field, the converted models' logits against PyTorch's
// forward of the source layout, round trips bit-exact, a model.bin written here
// parsed back by hand, variants the targets cannot express, and malformed files refused before any
// allocation they cannot justify.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "io/checkpoint.hpp"
#include "io/hf_gpt2.hpp"
#include "io/model_layout.hpp"
#include "io/npy.hpp"
#include "models/gpt.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"
#include "train/llama2c_tokenizer.hpp"
#include "train/tokenizer.hpp"

namespace test_convert
{
using namespace xgrad;
using xgrad::test::read_bytes;
using xgrad::test::temp_dir;
using xgrad::test::write_bytes;
namespace fs = std::filesystem;

namespace
{
const std::string fixtures = xgrad::test::source_dir() + "/tests/data/convert_fixtures/";

array<double> columns_of(const array<double>& m, std::size_t first, std::size_t count)
{
    return xt::view(m, xt::all(), xt::range(first, first + count));
}

// A model of `layout` with seeded values that float32 holds exactly, and a byte vocabulary.
io::safetensors_file random_model(const io::model_layout& layout, unsigned seed)
{
    io::safetensors_file f;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (const auto& [name, shape] : layout.tensor_shapes())
    {
        io::stored_tensor t{ "F32", array<double>::from_shape(shape) };
        for (double& v : t.values)
        {
            v = normal(rng);
        }
        f.tensors[name] = t;
    }
    layout.to_metadata(f.metadata);
    std::string vocab = "[";
    for (std::size_t i = 0; i < layout.vocab_size; ++i)
    {
        vocab += (i ? ", " : "") + std::to_string(32 + i);
    }
    f.metadata["vocab"] = vocab + "]";
    return f;
}

io::model_layout small_layout()
{
    io::model_layout l;
    l.vocab_size = 7;
    l.block_size = 6;
    l.layers = 2;
    l.d_model = 8;
    l.heads = 2;
    l.kv_heads = 2;
    return l;
}

io::model_layout llama_layout()
{
    io::model_layout l = small_layout();
    l.heads = 4;
    l.kv_heads = 2;
    l.norm = models::norm_kind::rmsnorm;
    l.position = models::position_kind::rope;
    l.mlp = models::mlp_kind::swiglu;
    l.mlp_hidden = 12;
    l.bias = models::bias_kind::none;
    return l;
}

void check_same(const io::safetensors_file& a, const io::safetensors_file& b)
{
    REQUIRE(a.tensors.size() == b.tensors.size());
    for (const auto& [name, t] : a.tensors)
    {
        CAPTURE(name);
        REQUIRE(b.tensors.count(name));
        CHECK(b.tensors.at(name).values == t.values);
    }
    CHECK(a.metadata == b.metadata);
}

std::string read_error(const std::function<void()>& f)
{
    try
    {
        f();
    }
    catch (const std::exception& e)
    {
        return e.what();
    }
    return "no error";
}

// Copies a fixture folder into `dir` so a test can damage it.
std::string copy_fixture(const temp_dir& dir, const std::string& name)
{
    const std::string to = dir / name;
    fs::copy(fixtures + name, to, fs::copy_options::recursive);
    return to;
}
} // namespace

TEST_CASE("a Hugging Face GPT-2 folder reads as the bias = all model, c_attn split into W_Q | W_K | W_V")
{
    for (const char* folder : { "hf_f32", "hf_f16", "hf_bf16" })
    {
        CAPTURE(folder);
        io::model_layout layout;
        const io::safetensors_file m = io::read_hf_gpt2(fixtures + folder, layout);
        const io::safetensors_file ref = io::read_safetensors(fixtures + folder + "/reference.safetensors");
        CHECK(layout.bias == models::bias_kind::all);
        CHECK(layout.mlp == models::mlp_kind::gelu_tanh);
        CHECK(layout.tied_head);
        CHECK(m.metadata.at("bias") == "all");
        CHECK(m.metadata.at("vocab_size") == "11");
        CHECK(m.metadata.at("block_size") == "8");
        CHECK(m.metadata.at("heads") == "2");
        CHECK(m.metadata.at("kv_heads") == "2");
        CHECK(m.tensors.size() == 2 + 2 * 16 + 2); // no buffers, no lm_head (tied)
        CHECK(m.tensors.at("wte").values == ref.tensors.at("wte.weight").values);
        CHECK(m.tensors.at("wpe").values == ref.tensors.at("wpe.weight").values);
        for (int i = 0; i < 2; ++i)
        {
            const std::string b = "blocks." + std::to_string(i) + ".", h = "h." + std::to_string(i) + ".";
            const array<double>& qkv = ref.tensors.at(h + "attn.c_attn.weight").values;
            const array<double>& qkv_bias = ref.tensors.at(h + "attn.c_attn.bias").values;
            CHECK(m.tensors.at(b + "attn.W_Q").values == columns_of(qkv, 0, 8));
            CHECK(m.tensors.at(b + "attn.W_K").values == columns_of(qkv, 8, 8));
            CHECK(m.tensors.at(b + "attn.W_V").values == columns_of(qkv, 16, 8));
            CHECK(m.tensors.at(b + "attn.b_V").values ==
                  array<double>(xt::view(qkv_bias, xt::range(16, 24))));
            CHECK(m.tensors.at(b + "attn.W_O").values == ref.tensors.at(h + "attn.c_proj.weight").values);
            CHECK(m.tensors.at(b + "mlp.W_fc").values == ref.tensors.at(h + "mlp.c_fc.weight").values);
            CHECK(m.tensors.at(b + "mlp.b_proj").values == ref.tensors.at(h + "mlp.c_proj.bias").values);
            CHECK(m.tensors.at(b + "ln_2.bias").values == ref.tensors.at(h + "ln_2.bias").values);
        }
        CHECK(m.tensors.at("ln_f.weight").values == ref.tensors.at("ln_f.weight").values);
    }
}

TEST_CASE("hf-gpt2 -> xgrad -> hf-gpt2 and xgrad -> hf-gpt2 -> xgrad are bit-exact")
{
    temp_dir dir;
    io::model_layout layout;
    io::safetensors_file m = io::read_hf_gpt2(fixtures + "hf_f32", layout);
    io::write_safetensors(dir / "a.safetensors", m);
    io::write_hf_gpt2(dir / "hf", m, layout);
    const auto original =
      io::read_safetensors(fixtures + "hf_f32/model.safetensors", io::accepted_dtypes::any_float);
    const auto again = io::read_safetensors(dir / "hf/model.safetensors", io::accepted_dtypes::any_float);
    for (const auto& [name, t] : original.tensors)
    {
        CAPTURE(name);
        if (name.find(".attn.bias") == std::string::npos && name.find("masked_bias") == std::string::npos)
        {
            REQUIRE(again.tensors.count(name));
            CHECK(again.tensors.at(name).dtype == "F32");
            CHECK(again.tensors.at(name).values == t.values);
        }
    }
    io::model_layout back_layout;
    io::write_safetensors(dir / "b.safetensors", io::read_hf_gpt2(dir / "hf", back_layout));
    CHECK(read_bytes(dir / "a.safetensors") == read_bytes(dir / "b.safetensors"));
    const std::string config = read_bytes(dir / "hf/config.json");
    for (const char* field : { "\"n_embd\": 8",
                               "\"n_head\": 2",
                               "\"n_layer\": 2",
                               "\"n_positions\": 8",
                               "\"vocab_size\": 11",
                               "\"layer_norm_epsilon\": 1e-05",
                               "\"activation_function\": \"gelu_new\"" })
    {
        CAPTURE(field);
        CHECK(config.find(field) != std::string::npos);
    }
}

TEST_CASE("the default model and bias = none go to GPT-2 with zero biases and come back as they were")
{
    for (const char* bias : { "mlp", "none" })
    {
        CAPTURE(bias);
        temp_dir dir;
        io::model_layout layout = small_layout();
        models::read_field("bias", bias, layout.bias);
        layout.tied_head = false;
        const io::safetensors_file m = random_model(layout, 3);
        io::write_hf_gpt2(dir / "hf", m, layout);
        const auto hf = io::read_safetensors(dir / "hf/model.safetensors", io::accepted_dtypes::any_float);
        CHECK(xt::all(xt::equal(hf.tensors.at("h.1.attn.c_attn.bias").values, 0.0)));
        CHECK(hf.tensors.at("lm_head.weight").values == xt::transpose(m.tensors.at("lm_head").values));
        io::model_layout back;
        check_same(m, io::read_hf_gpt2(dir / "hf", back));
        CHECK(models::field_text(back.bias) == bias);
        CHECK_FALSE(back.tied_head);
    }
}

TEST_CASE("a llama2.c folder reads field by field: nn.Linear weights transposed, the classifier untied")
{
    const train::llama2c_model m = train::read_llama2c(fixtures + "llama2c");
    const io::safetensors_file ref = io::read_safetensors(fixtures + "llama2c/reference.safetensors");
    const auto& t = m.model.tensors;
    const auto& r = ref.tensors;
    CHECK(m.note.empty());
    CHECK(m.model.metadata.at("norm") == "rmsnorm");
    CHECK(m.model.metadata.at("position") == "rope");
    CHECK(m.model.metadata.count("rope_base") == 0); // 10000, the default
    CHECK(m.model.metadata.at("mlp") == "swiglu");
    CHECK(m.model.metadata.at("mlp_hidden") == "24");
    CHECK(m.model.metadata.at("bias") == "none");
    CHECK(m.model.metadata.at("tied_head") == "false");
    CHECK(m.model.metadata.at("heads") == "4");
    CHECK(m.model.metadata.at("kv_heads") == "2");
    CHECK(m.model.metadata.at("vocab") == "[10, 32, 97, 98, 99, 100, 101, 102, 103, 104, 105]");
    CHECK(t.at("wte").values == r.at("tok_embeddings").values);
    CHECK(t.at("lm_head").values == xt::transpose(r.at("output").values));
    CHECK(t.at("ln_f.weight").values == r.at("norm").values);
    for (int i = 0; i < 2; ++i)
    {
        const std::string b = "blocks." + std::to_string(i) + ".", n = "." + std::to_string(i);
        CHECK(t.at(b + "ln_1.weight").values == r.at("attention_norm" + n).values);
        CHECK(t.at(b + "ln_2.weight").values == r.at("ffn_norm" + n).values);
        const std::pair<const char*, const char*> matrices[] = {
            { "attn.W_Q", "wq" },   { "attn.W_K", "wk" },   { "attn.W_V", "wv" }, { "attn.W_O", "wo" },
            { "mlp.W_gate", "w1" }, { "mlp.W_down", "w2" }, { "mlp.W_up", "w3" }
        };
        for (const auto& [ours, theirs] : matrices)
        {
            CAPTURE(ours);
            CHECK(t.at(b + ours).values == xt::transpose(r.at(theirs + n).values));
        }
    }
}

TEST_CASE("a model.bin and tokenizer.bin written by xgrad follow llama2.c's legacy layout, field by field")
{
    temp_dir dir;
    io::model_layout layout = llama_layout();
    const io::safetensors_file m = random_model(layout, 5);
    train::write_llama2c(dir / "out", m, layout);
    const std::string bin = read_bytes(dir / "out/model.bin");
    std::size_t at = 0;
    const auto next_int = [&]
    {
        std::int32_t v;
        std::memcpy(&v, bin.data() + at, 4);
        at += 4;
        return v;
    };
    const auto next_float = [&]
    {
        float v;
        std::memcpy(&v, bin.data() + at, 4);
        at += 4;
        return double(v);
    };
    REQUIRE(bin.size() >= 28);
    CHECK(next_int() == 8);  // dim
    CHECK(next_int() == 12); // hidden_dim
    CHECK(next_int() == 2);  // n_layers
    CHECK(next_int() == 4);  // n_heads
    CHECK(next_int() == 2);  // n_kv_heads
    CHECK(next_int() == 7);  // vocab_size, positive: the classifier is the embedding
    CHECK(next_int() == 6);  // max_seq_len
    const std::size_t floats = 7 * 8 + 2 * (8 + 64 + 32 + 32 + 64 + 8 + 3 * 96) + 8 + 2 * 6 * 1;
    REQUIRE(bin.size() == 28 + 4 * floats);
    // Each (out, in) matrix row by row: element (o, i) of nn.Linear's weight is xgrad's (i, o).
    const auto expect_linear = [&](const std::string& name)
    {
        const array<double>& w = m.tensors.at(name).values;
        bool same = true;
        for (std::size_t o = 0; o < w.shape()[1]; ++o)
        {
            for (std::size_t i = 0; i < w.shape()[0]; ++i)
            {
                same = same && next_float() == w(i, o);
            }
        }
        CHECK_MESSAGE(same, name);
    };
    const auto expect_plain = [&](const std::string& name)
    {
        bool same = true;
        for (double v : m.tensors.at(name).values)
        {
            same = same && next_float() == v;
        }
        CHECK_MESSAGE(same, name);
    };
    expect_plain("wte");
    for (const char* kind : { "ln_1.weight",
                              "attn.W_Q",
                              "attn.W_K",
                              "attn.W_V",
                              "attn.W_O",
                              "ln_2.weight",
                              "mlp.W_gate",
                              "mlp.W_down",
                              "mlp.W_up" })
    {
        for (int i = 0; i < 2; ++i)
        {
            const std::string name = "blocks." + std::to_string(i) + "." + kind;
            std::string(kind).find("ln_") == 0 ? expect_plain(name) : expect_linear(name);
        }
    }
    expect_plain("ln_f.weight");
    // freqs_cos then freqs_sin, (max_seq_len, head_dim / 2) with head_dim 2: angle t * 10000^0 = t.
    for (int t = 0; t < 6; ++t)
    {
        CHECK(next_float() == doctest::Approx(std::cos(double(t))).epsilon(1e-7));
    }
    for (int t = 0; t < 6; ++t)
    {
        CHECK(next_float() == doctest::Approx(std::sin(double(t))).epsilon(1e-7));
    }
    CHECK(at == bin.size());

    const std::string tok = read_bytes(dir / "out/tokenizer.bin");
    REQUIRE(tok.size() == 4 + 7 * 9); // max_token_length, then (score, length, one byte) per token
    std::int32_t max_length, length;
    float score;
    std::memcpy(&max_length, tok.data(), 4);
    CHECK(max_length == 1);
    for (std::size_t i = 0; i < 7; ++i)
    {
        std::memcpy(&score, tok.data() + 4 + 9 * i, 4);
        std::memcpy(&length, tok.data() + 8 + 9 * i, 4);
        CHECK(score == 0.0f);
        CHECK(length == 1);
        CHECK(tok[12 + 9 * i] == char(32 + i));
    }
    CHECK_FALSE(fs::exists(dir / "out/tokenizer.model"));
}

TEST_CASE("llama2c round trips are bit-exact, untied and tied, with a byte or a SentencePiece vocabulary")
{
    temp_dir dir;
    const std::string fixture = fixtures + "llama2c";
    io::write_safetensors(dir / "a.safetensors", train::read_llama2c(fixture).model);
    io::model_layout layout;
    io::safetensors_file a = io::read_model_checkpoint(dir / "a.safetensors", layout);
    train::write_llama2c(dir / "again", a, layout);
    CHECK(read_bytes(dir / "again/model.bin") == read_bytes(fixture + "/model.bin"));
    CHECK(read_bytes(dir / "again/tokenizer.bin") == read_bytes(fixture + "/tokenizer.bin"));

    io::model_layout tied = llama_layout();
    std::string text;
    for (int i = 0; i < 200; ++i)
    {
        text += "the cat sat on the mat and the dog ran off\nat night, far away\n";
    }
    const auto sp = train::sentencepiece_tokenizer::train(train::tokenizer_spec::parse("bpe:40"), text);
    tied.vocab_size = sp->size();
    io::safetensors_file m = random_model(tied, 9);
    sp->to_metadata(m.metadata);
    train::write_llama2c(dir / "sp", m, tied);
    CHECK(read_bytes(dir / "sp/tokenizer.model") == sp->serialized());
    const train::llama2c_model back = train::read_llama2c(dir / "sp");
    check_same(m, back.model);
    const std::string tok = read_bytes(dir / "sp/tokenizer.bin");
    CHECK(tok.find(" the") !=
          std::string::npos); // U+2581 written as a space, as llama2.c's tokenizer.py does
}

TEST_CASE("variants a format cannot express are refused, naming the metadata key")
{
    temp_dir dir;
    const auto refused = [&](io::model_layout layout, const char* to, const char* key)
    {
        CAPTURE(key);
        const io::safetensors_file m = random_model(layout, 1);
        const std::string e = read_error(
          [&]
          {
              std::string(to) == "llama2c" ? train::write_llama2c(dir / "x", m, layout)
                                           : io::write_hf_gpt2(dir / "x", m, layout);
          });
        CHECK(e.find(std::string("\"") + key + "\"") != std::string::npos);
        CHECK_FALSE(fs::exists(dir / "x"));
    };
    io::model_layout l = small_layout();
    refused(l, "llama2c", "norm");
    io::model_layout rope = llama_layout();
    rope.rope_base = 500000;
    refused(rope, "llama2c", "rope_base");
    io::model_layout gelu = llama_layout();
    gelu.mlp = models::mlp_kind::gelu;
    refused(gelu, "llama2c", "mlp");
    io::model_layout biased = llama_layout();
    biased.bias = models::bias_kind::mlp;
    refused(biased, "llama2c", "bias");
    refused(llama_layout(), "hf-gpt2", "norm");
    io::model_layout gqa = small_layout();
    gqa.kv_heads = 1;
    refused(gqa, "hf-gpt2", "kv_heads");
    io::model_layout learned = small_layout();
    learned.norm = models::norm_kind::rmsnorm;
    learned.bias = models::bias_kind::none;
    refused(learned, "hf-gpt2", "norm");
    io::model_layout none = small_layout();
    none.position = models::position_kind::none;
    refused(none, "hf-gpt2", "position");
    // The later variants (docs/spec.md, "More architecture variants"): no converter's format has them.
    for (const char* to : { "hf-gpt2", "llama2c" })
    {
        const io::model_layout base = std::string(to) == "llama2c" ? llama_layout() : small_layout();
        io::model_layout qk = base;
        qk.qk_norm = models::qk_norm_kind::rms;
        refused(qk, to, "qk_norm");
        io::model_layout capped = base;
        capped.logit_softcap = 30.0;
        refused(capped, to, "logit_softcap");
    }
    io::model_layout relu2 = small_layout();
    relu2.mlp = models::mlp_kind::relu2;
    refused(relu2, "hf-gpt2", "mlp");
    io::model_layout llama_relu2 = llama_layout();
    llama_relu2.mlp = models::mlp_kind::relu2;
    refused(llama_relu2, "llama2c", "mlp");
    for (const char* dir_left : { ".x.partial" })
    {
        for (const auto& e : fs::directory_iterator(dir.path))
        {
            CHECK(e.path().filename().string().find(dir_left) == std::string::npos);
        }
    }
}

TEST_CASE("malformed llama2.c files are refused before reading more than they hold")
{
    temp_dir dir;
    const std::string folder = copy_fixture(dir, "llama2c");
    const std::string bin = read_bytes(folder + "/model.bin");
    const auto with_model = [&](const std::string& bytes, const std::string& expected)
    {
        CAPTURE(expected);
        write_bytes(folder + "/model.bin", bytes);
        const std::string e = read_error([&] { train::read_llama2c(folder); });
        CAPTURE(e);
        CHECK(e.find(expected) != std::string::npos);
        CHECK(e.find("model.bin") != std::string::npos);
    };
    const auto header_with = [&](std::size_t field, std::int32_t value)
    {
        std::string b = bin;
        std::memcpy(b.data() + 4 * field, &value, 4);
        return b;
    };
    with_model("", "truncated at byte 0");
    with_model(bin.substr(0, 27), "truncated at byte 24");
    with_model(bin.substr(0, bin.size() - 4), "implies " + std::to_string(bin.size()));
    with_model(bin + "x", "implies");
    with_model(header_with(0, 0x616b3432), "version 1 or later");
    with_model(header_with(0, -8), "dim is -8");
    with_model(header_with(3, 3), "dim % n_heads");
    with_model(header_with(4, 3), "n_heads % n_kv_heads");
    // Sizes near the limits: the header promises far more than the file holds; refused before allocating.
    with_model(header_with(0, (1 << 24) + 1), "dim is 16777217");
    for (std::size_t field : { 1, 2, 5, 6 })
    {
        with_model(header_with(field, (1 << 24) - 8), "implies");
    }
    with_model(header_with(2, 1 << 25), "n_layers is 33554432");
    write_bytes(folder + "/model.bin", bin);

    const std::string tok = read_bytes(folder + "/tokenizer.bin");
    const auto with_tokenizer = [&](const std::string& bytes, const char* expected)
    {
        CAPTURE(expected);
        write_bytes(folder + "/tokenizer.bin", bytes);
        const std::string e = read_error([&] { train::read_llama2c(folder); });
        CAPTURE(e);
        CHECK(e.find(expected) != std::string::npos);
        CHECK(e.find("tokenizer.bin") != std::string::npos);
    };
    with_tokenizer(tok.substr(0, tok.size() - 9), "holds 10 tokens; model.bin's vocab_size is 11");
    with_tokenizer(tok.substr(0, tok.size() - 1), "has length 1");
    with_tokenizer(tok + tok.substr(4, 9), "holds more than");
    with_tokenizer(tok.substr(0, 2), "truncated");
    std::string huge = tok;
    const std::int32_t big = 1 << 30;
    std::memcpy(huge.data() + 8, &big, 4);
    with_tokenizer(huge, "has length 1073741824");
    write_bytes(folder + "/tokenizer.bin", tok);

    write_bytes(folder + "/tokenizer.model", "this is not a SentencePiece model");
    const std::string e = read_error([&] { train::read_llama2c(folder); });
    CHECK(e.find("tokenizer.model") != std::string::npos);
    CHECK(e.find("not a SentencePiece model") != std::string::npos);
}

TEST_CASE(
  "a GPT-2 config.json that disagrees with the tensors, or asks for what xgrad does not compute, is refused")
{
    temp_dir dir;
    const std::string folder = copy_fixture(dir, "hf_f32");
    const std::string config = read_bytes(folder + "/config.json");
    const auto with_config = [&](const std::string& from, const std::string& to, const char* expected)
    {
        CAPTURE(expected);
        std::string c = config;
        const std::size_t at = c.find(from);
        REQUIRE(at != std::string::npos);
        c.replace(at, from.size(), to);
        write_bytes(folder + "/config.json", c);
        io::model_layout layout;
        const std::string e = read_error([&] { io::read_hf_gpt2(folder, layout); });
        CAPTURE(e);
        CHECK(e.find(expected) != std::string::npos);
    };
    with_config("\"n_embd\": 8", "\"n_embd\": 16", "n_embd 16 needs");
    with_config("\"n_layer\": 2", "\"n_layer\": 3", "h.2.ln_1.weight is missing");
    with_config("\"n_layer\": 2", "\"n_layer\": 1", "not part of the GPT-2 layout with 1 layers");
    with_config("\"vocab_size\": 11",
                "\"vocab_size\": 12",
                "tensor wte has shape (11, 8), the metadata implies (12, 8)");
    with_config("\"n_positions\": 8", "\"n_positions\": 0", "\"n_positions\" must be a positive integer");
    with_config("\"n_head\": 2", "\"n_head\": 3", "not a multiple of \"n_head\"");
    with_config("\"gelu_new\"", "\"relu\"", "\"activation_function\"");
    with_config("1e-05", "1e-06", "\"layer_norm_epsilon\"");
    with_config(
      "\"n_inner\": null", "\"n_inner\": 16", "mlp.W_fc has shape (8, 32), the metadata implies (8, 16)");
    with_config(config, "[1, 2]", "not a JSON object");
    with_config("\"n_embd\": 8,", "\"n_embd\": 8,,", "not valid JSON");
}

TEST_CASE("a damaged GPT-2 safetensors file is refused, naming the tensor")
{
    temp_dir dir;
    const std::string folder = copy_fixture(dir, "hf_f16");
    const std::string file = read_bytes(folder + "/model.safetensors");
    const auto with_file = [&](const std::string& bytes, const char* expected)
    {
        CAPTURE(expected);
        write_bytes(folder + "/model.safetensors", bytes);
        io::model_layout layout;
        const std::string e = read_error([&] { io::read_hf_gpt2(folder, layout); });
        CAPTURE(e);
        CHECK(e.find(expected) != std::string::npos);
    };
    with_file(file.substr(0, 5), "5 bytes, too short for the 8-byte header length");
    std::string long_header = file;
    const std::uint64_t n = file.size();
    std::memcpy(long_header.data(), &n, 8);
    with_file(long_header, "runs past the end of the file");
    with_file(file.substr(0, file.size() - 2), "outside the data buffer");
    with_file(file + "XY", "(trailing bytes; the format allows none)");
    std::string dtype = file;
    dtype.replace(dtype.find("\"F16\""), 5, "\"I16\"");
    with_file(dtype, "has dtype 'I16'; only F16, BF16, F32 and F64 are supported");
}

TEST_CASE("converted models compute the logits PyTorch computes from the source layout")
{
    temp_dir dir;
    for (const char* folder : { "hf_f32", "hf_f16", "hf_bf16", "llama2c" })
    {
        CAPTURE(folder);
        const std::string source = fixtures + folder;
        io::model_layout layout;
        const io::safetensors_file m = std::string(folder) == "llama2c" ? train::read_llama2c(source).model
                                                                        : io::read_hf_gpt2(source, layout);
        const std::string path = dir / (std::string(folder) + ".safetensors");
        io::write_safetensors(path, m);
        const io::checkpoint<double> ck = io::load_checkpoint<double>(path);
        const ids_t tokens = npy::load_ids(source + "/tokens.npy");
        tape<double> t;
        const auto r = models::gpt_forward(t, ck.params, tokens);
        const array<double> expected = npy::load_float<double>(source + "/logits.npy");
        CHECK(xgrad::test::max_relative_difference(r.logits.value(), expected) < 1e-12); // measured: ~2.5e-15
    }
}
}  // namespace test_convert
