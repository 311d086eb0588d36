// The SentencePiece model check (train/sentencepiece_model_check.hpp): xgrad's own models pass; a model
// with a normaliser's character map or a denormaliser, one past the size or piece bounds, or wire data that
// is not a protobuf message is refused before libsentencepiece sees it, at every entry (the tokenizer's
// constructor, a checkpoint's metadata).
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "train/sentencepiece_model_check.hpp"
#include "train/tokenizer.hpp"

namespace test_sentencepiece_model_check
{
using namespace xgrad::train;

namespace
{
std::string varint(std::uint64_t n)
{
    std::string out;
    for (; n >= 0x80; n >>= 7)
    {
        out += static_cast<char>((n & 0x7f) | 0x80);
    }
    return out + static_cast<char>(n);
}

// A length-delimited field (wire type 2).
std::string message_field(unsigned number, const std::string& bytes)
{
    return varint(number << 3 | 2) + varint(bytes.size()) + bytes;
}

std::string little_endian_u32(std::uint32_t n)
{
    std::string out;
    for (int i = 0; i < 4; ++i)
    {
        out += static_cast<char>((n >> (8 * i)) & 0xff);
    }
    return out;
}

// A precompiled character map as libsentencepiece reads it: the trie's size, the trie (here garbage the
// library would index with) and the normalised strings. The library loads it without complaint.
std::string corrupt_charsmap()
{
    return little_endian_u32(8) + std::string(8, '\xff') + std::string("x\0", 2);
}

std::string trained_model()
{
    std::string text;
    for (int i = 0; i < 200; ++i)
    {
        text += "the cat sat on the mat and the dog ate the hat\n";
    }
    return sentencepiece_tokenizer::train(tokenizer_spec::parse("bpe:40"), text)->serialized();
}

void refused(const std::string& model, const char* expected)
{
    CAPTURE(expected);
    CHECK_THROWS_WITH_AS(
      check_sentencepiece_model(model), doctest::Contains(expected), std::invalid_argument);
    CHECK_THROWS_WITH_AS(
      sentencepiece_tokenizer::from_serialized(model), doctest::Contains(expected), std::invalid_argument);
}
} // namespace

TEST_CASE("a model xgrad trains passes: identity normaliser, no denormaliser")
{
    const std::string model = trained_model();
    CHECK_NOTHROW(check_sentencepiece_model(model));
    CHECK(sentencepiece_tokenizer::from_serialized(model)->size() == 40);
}

TEST_CASE("a normaliser's precompiled_charsmap or any denormaliser is refused before the library loads it")
{
    const std::string model = trained_model();
    // Protobuf merges a repeated optional message: appending normalizer_spec { precompiled_charsmap } sets
    // it.
    refused(model + message_field(3, message_field(2, corrupt_charsmap())),
            "tokenizer_model: the model's normaliser has a precompiled_charsmap of 14 bytes");
    refused(model + message_field(5, message_field(2, corrupt_charsmap())), "has a denormaliser");
    refused(model + message_field(5, ""), "has a denormaliser");
    CHECK_NOTHROW(check_sentencepiece_model(model + message_field(3, message_field(2, ""))));
}

TEST_CASE("a piece that is empty or holds a NUL byte is refused (the library's trie ends the process)")
{
    const std::string model = trained_model();
    refused(model + message_field(1, message_field(1, std::string("\0", 1))),
            "piece 40 is empty or holds a NUL");
    refused(model + message_field(1, message_field(1, std::string("a\0b", 3))),
            "piece 40 is empty or holds a NUL");
    refused(model + message_field(1, message_field(1, "")), "piece 40 is empty or holds a NUL");
}

TEST_CASE("the model's size and its piece count are bounded")
{
    refused(std::string(max_sentencepiece_model_bytes + 1, '\0'), "at most 67108864 are read");
    std::string pieces;
    for (std::uint64_t i = 0; i <= max_sentencepiece_pieces; ++i)
    {
        pieces += message_field(1, "");
    }
    refused(pieces, "more than 1048576 pieces");
}

TEST_CASE("wire data that is not a protobuf message is refused with what is wrong")
{
    refused(std::string("\x0a\x05"
                        "ab",
                        4),
            "not a SentencePiece model: its ModelProto holds a field of 5 bytes");
    refused(std::string("\x0a"), "a number cut short");
    refused(std::string(11, '\x80'), "a number longer than 10 bytes");
    refused(std::string("\x0b"), "wire type 3");
    refused(std::string("\x08\x01"), "field 1 is not a message");
    refused(std::string("\x00", 1), "a field numbered 0");
    refused(message_field(3, "\x12"), "its normalizer_spec holds a number cut short");
}

TEST_CASE("a checkpoint's tokenizer_model with a character map is refused naming the file")
{
    const metadata_map m{ { "tokenizer", "sentencepiece" },
                          { "tokenizer_model",
                            to_base64(trained_model() +
                                      message_field(3, message_field(2, corrupt_charsmap()))) } };
    CHECK_THROWS_WITH_AS(tokenizer_from_metadata(m, "ck.safetensors"),
                         doctest::Contains("ck.safetensors: tokenizer_model: the model's normaliser has a "
                                           "precompiled_charsmap"),
                         std::invalid_argument);
}
}  // namespace test_sentencepiece_model_check
