// Tokenizers for training on text (docs/spec.md, "Training on text"): --tokenizer's forms, base64,
// SentencePiece models trained deterministically on the training split only, exact round trips, the
// newline token, unencodable text, checkpoint metadata, and bits per byte.
#include <doctest/doctest.h>

#include <cmath>

#include "test_util.hpp"
#include "train/option_error.hpp"
#include "train/text_data.hpp"
#include "train/tokenizer.hpp"

namespace test_tokenizer
{
using namespace xgrad;
using namespace xgrad::train;

namespace
{
// A few kilobytes of word salad from a fixed generator: lines of words, some with two spaces, a leading
// space or a tab, and empty lines, so the round trips see every kind of whitespace.
std::string word_salad(std::size_t lines, std::uint32_t seed = 7)
{
    const char* words[] = { "the",   "cat",    "sat",  "on",    "a",        "mat",    "and",
                            "then",  "ran",    "far",  "away,", "quickly.", "Slowly", "over",
                            "hills", "rivers", "into", "town",  "at",       "night" };
    std::uint32_t state = seed;
    auto next = [&](std::uint32_t n)
    {
        state = state * 1664525u + 1013904223u;
        return (state >> 8) % n;
    };
    std::string text;
    for (std::size_t l = 0; l < lines; ++l)
    {
        const std::uint32_t kind = next(10);
        text += kind == 0 ? " " : kind == 1 ? "\t" : "";
        const std::uint32_t count = kind == 2 ? 0 : 3 + next(8);
        for (std::uint32_t w = 0; w < count; ++w)
        {
            text += (w ? (next(12) == 0 ? "  " : " ") : "") + std::string(words[next(20)]);
        }
        text += "\n";
    }
    return text;
}

std::shared_ptr<const sentencepiece_tokenizer> trained(const std::string& spec, const std::string& text)
{
    return sentencepiece_tokenizer::train(tokenizer_spec::parse(spec), text);
}
} // namespace

TEST_CASE("the tokenizer option takes bytes, bpe:N and unigram:N")
{
    CHECK(tokenizer_spec::parse("bytes").type == tokenizer_spec::kind::bytes);
    const auto bpe = tokenizer_spec::parse("bpe:512");
    CHECK(bpe.type == tokenizer_spec::kind::bpe);
    CHECK(bpe.vocab_size == 512);
    CHECK(tokenizer_spec::parse("unigram:8").type == tokenizer_spec::kind::unigram);
    CHECK(bpe.to_string() == "bpe:512");
    for (const char* bad : { "",
                             "byte",
                             "bpe",
                             "bpe:",
                             "bpe:x",
                             "bpe:-4",
                             "bpe:7",
                             "bpe:65537",
                             "bpe:1000000",
                             "wordpiece:100",
                             "bpe:512 ",
                             "BPE:512" })
    {
        CAPTURE(bad);
        CHECK_THROWS_WITH_AS(
          tokenizer_spec::parse(bad), doctest::Contains("tokenizer: '"), std::invalid_argument);
    }
}

TEST_CASE("base64 follows RFC 4648 and is read strictly")
{
    // RFC 4648, section 10.
    const std::pair<const char*, const char*> vectors[] = { { "", "" },
                                                            { "f", "Zg==" },
                                                            { "fo", "Zm8=" },
                                                            { "foo", "Zm9v" },
                                                            { "foob", "Zm9vYg==" },
                                                            { "fooba", "Zm9vYmE=" },
                                                            { "foobar", "Zm9vYmFy" } };
    for (const auto& [plain, encoded] : vectors)
    {
        CHECK(to_base64(plain) == encoded);
        CHECK(from_base64(encoded) == plain);
    }
    std::string all;
    for (int b = 0; b < 256; ++b)
    {
        all += static_cast<char>(b);
    }
    CHECK(from_base64(to_base64(all)) == all);
    for (const char* bad : { "Zg=", "Zg", "Z===", "Zm9v!A==", "Zm=v", "=Zm9" })
    {
        CAPTURE(bad);
        CHECK_THROWS_AS(from_base64(bad), std::invalid_argument);
    }
}

TEST_CASE("the same flags give the same SentencePiece model, byte for byte")
{
    const std::string text = word_salad(400);
    for (const char* spec : { "bpe:64", "unigram:64" })
    {
        CAPTURE(spec);
        const auto a = trained(spec, text);
        const auto b = trained(spec, text);
        CHECK(a->serialized() == b->serialized());
        CHECK(a->size() == 64);
        CHECK(trained(spec, word_salad(400, 8))->serialized() != a->serialized());
    }
    CHECK(trained("bpe:64", text)->serialized() != trained("bpe:80", text)->serialized());
    CHECK(trained("bpe:64", text)->serialized() != trained("unigram:64", text)->serialized());
}

TEST_CASE("SentencePiece tokens decode to exactly the text; a newline is token 3, a tab token 4")
{
    const std::string text = word_salad(300);
    for (const char* spec : { "bpe:96", "unigram:96" })
    {
        CAPTURE(spec);
        const auto tok = trained(spec, text);
        const auto ids = tok->encode(text);
        CHECK(tok->decode(ids) == text);
        CHECK(ids.size() < text.size() / 2); // merges happened
        CHECK(tok->piece(3) == "\n");
        CHECK(tok->piece(4) == "\t");
        CHECK(tok->encode("\n\n") == std::vector<std::int32_t>{ 3, 3 });
        CHECK(tok->piece(0) == "<unk>");
        CHECK(tok->piece(1) == "<s>");
        const std::string odd = "  the\t\tcat  \n\n sat ";
        CHECK(tok->decode(tok->encode(odd)) == odd);
        CHECK(tok->encode("").empty());
        CHECK_THROWS_AS(tok->decode({ static_cast<std::int32_t>(tok->size()) }), std::invalid_argument);
        CHECK_THROWS_AS(tok->decode({ -1 }), std::invalid_argument);
    }
}

TEST_CASE("text the tokenizer cannot encode is an error naming the byte and its position")
{
    const auto tok = trained("bpe:64", word_salad(300));
    CHECK_THROWS_WITH_AS(
      tok->encode("the cat~"), doctest::Contains("byte 0x7e at position 7"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(tok->encode("ok\nat \xc3\xa9t\xc3\xa9"),
                         doctest::Contains("byte 0xc3 at position 6"),
                         std::invalid_argument);
    const auto lenient = tok->encode_allowing_unknown("cat~");
    CHECK(lenient.back() == 0); // <unk>
    const auto bytes = byte_vocabulary::of_text("abc");
    CHECK_THROWS_WITH_AS(
      bytes.encode("abd"), doctest::Contains("byte 0x64 at position 2"), std::invalid_argument);
}

TEST_CASE("a tokenizer restores itself from checkpoint metadata")
{
    const auto tok = trained("unigram:64", word_salad(300));
    metadata_map m{ { "vocab", "[1, 2]" }, { "step", "5" } };
    tok->to_metadata(m);
    CHECK(m.count("vocab") == 0);
    CHECK(m.at("tokenizer") == "sentencepiece");
    CHECK(m.at("step") == "5");
    const auto back = tokenizer_from_metadata(m, "model.safetensors");
    const std::string text = "the cat sat on a mat\nand ran";
    CHECK(back->encode(text) == tok->encode(text));

    const auto bytes = byte_vocabulary::of_text("hello");
    bytes.to_metadata(m);
    CHECK(m.count("tokenizer") == 0);
    CHECK(m.count("tokenizer_model") == 0);
    CHECK(tokenizer_from_metadata(m, "f")->decode({ 0, 1 }) == "eh");
    CHECK(tokenizer_from_metadata({ { "vocab", "[104]" }, { "tokenizer", "bytes" } }, "f")->size() == 1);
}

TEST_CASE("tokenizer metadata that does not describe a tokenizer is refused, naming the key")
{
    const auto bad = [](const metadata_map& m, const char* expected)
    {
        CAPTURE(expected);
        CHECK_THROWS_WITH_AS(
          tokenizer_from_metadata(m, "ck.safetensors"), doctest::Contains(expected), std::invalid_argument);
    };
    bad({}, "no \"vocab\"");
    bad({ { "vocab", "[300]" } }, "above 255");
    bad({ { "tokenizer", "wordpiece" } }, "allowed: bytes, sentencepiece");
    bad({ { "tokenizer", "sentencepiece" } }, "\"tokenizer_model\" is missing");
    bad({ { "tokenizer", "sentencepiece" }, { "tokenizer_model", "@@@@" } }, "not base64");
    bad({ { "tokenizer", "sentencepiece" }, { "tokenizer_model", to_base64("not a model at all") } },
        "not a SentencePiece model");
    CHECK_THROWS_WITH_AS(sentencepiece_tokenizer::from_serialized(""),
                         doctest::Contains("tokenizer_model"),
                         std::invalid_argument);
}

TEST_CASE("with bpe:N the model is trained on the training split only; the split stays at byte floor(0.9 n)")
{
    std::string text = word_salad(300);
    const std::size_t split = text.size() * 9 / 10;
    text[split + 3] = '~'; // a character only the validation split has
    const auto c = text_corpus::of_text(text, 8, "salad", tokenizer_spec::parse("bpe:64"));
    CHECK(c.train_bytes == split);
    CHECK(c.validation_bytes == text.size() - split);
    CHECK(c.tokens->decode(c.train.ids()) == text.substr(0, split));
    CHECK(c.tokens->size() == 64);
    const std::vector<std::int32_t> validation = c.validation.ids();
    CHECK(std::count(validation.begin(), validation.end(), 0) == 1); // '~' is <unk>
    CHECK_THROWS_AS(c.tokens->encode("~"), std::invalid_argument);
}

TEST_CASE("val_bpb is nats per token x tokens / bytes / ln 2")
{
    const std::string text = word_salad(300);
    const std::size_t split = text.size() * 9 / 10;
    const auto bytes = text_corpus::of_text(text, 8);
    CHECK(bytes.validation_bits_per_byte(std::log(2.0)) == doctest::Approx(1.0).epsilon(1e-15));
    const auto bpe = text_corpus::of_text(text, 8, "salad", tokenizer_spec::parse("bpe:96"));
    const std::size_t tokens = bpe.tokens->encode(text.substr(split)).size();
    CHECK(tokens < (text.size() - split) / 2);
    CHECK(bpe.validation_bits_per_byte(2.0) ==
          doctest::Approx(2.0 * double(tokens) / double(text.size() - split) / std::log(2.0)).epsilon(1e-15));
}

TEST_CASE("a tokenizer that cannot be trained is one clear error")
{
    CHECK_THROWS_WITH_AS(
      text_corpus::of_text("\n\n\n\n\n\n\n\n\n\n\n\n", 2, "blank", tokenizer_spec::parse("bpe:64")),
      doctest::Contains("no text to train on"),
      train::option_error);
}

TEST_CASE("a text without newlines trains: lines longer than SentencePiece's sentence limit are cut before a space")
{
    std::string text;
    for (const char c : word_salad(600))
    {
        text += c == '\n' ? ' ' : c;
    }
    REQUIRE(text.size() > 3 * 4192);
    const auto tok = trained("bpe:64", text);
    CHECK(tok->size() == 64);
    CHECK(tok->decode(tok->encode(text)) == text);
    CHECK(tok->encode(text).size() < text.size() * 3 / 5);  // merges were learned from every chunk
    std::string one_word(10000, 'a');
    CHECK(trained("bpe:16", one_word)->decode(trained("bpe:16", one_word)->encode(one_word)) == one_word);
}
}  // namespace test_tokenizer
