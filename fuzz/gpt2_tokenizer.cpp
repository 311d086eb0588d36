// Fuzz target: GPT-2's tokenizer (train/gpt2_tokenizer.hpp). The input is vocab.json, merges.txt and a
// text, separated by NUL bytes. Reading the two files gives a tokenizer or std::invalid_argument with a
// one-line message; the text, encoded by that tokenizer and by a small fixed one, comes back byte for
// byte from decode_bytes, decodes to valid UTF-8, and round-trips through encode when it is valid UTF-8.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.hpp"
#include "train/gpt2_tokenizer.hpp"

using namespace xgrad::train;
namespace fuzz = xgrad::fuzz;

namespace
{
std::string utf8_of(std::uint32_t cp)
{
    return cp < 0x80 ? std::string(1, char(cp))
                     : std::string{ char(0xc0 | cp >> 6), char(0x80 | (cp & 0x3f)) }; // below U+0800 here
}

// The 256 byte pieces (GPT-2's table), a few merges and <|endoftext|>.
std::shared_ptr<const gpt2_tokenizer> fixed_tokenizer()
{
    std::string vocab = "{";
    std::uint32_t extra = 256;
    for (std::uint32_t b = 0; b < 256; ++b)
    {
        const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        const std::string piece = utf8_of(printable ? b : extra++);
        vocab +=
          "\"" + (piece == "\"" || piece == "\\" ? "\\" + piece : piece) + "\": " + std::to_string(b) + ", ";
    }
    vocab += "\"\xc4\xa0t\": 256, \"he\": 257, \"\xc4\xa0the\": 258, \"\xc4\xa0\xc4\xa0\": 259, "
             "\"<|endoftext|>\": 260}";
    return gpt2_tokenizer::from_files(vocab,
                                      "#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\n\xc4\xa0 \xc4\xa0\n");
}

void check_text(const gpt2_tokenizer& tok, const std::string& text)
{
    const std::vector<std::int32_t> ids = tok.encode_allowing_unknown(text);
    fuzz::require(tok.decode_bytes(ids) == text, "decode_bytes(encode_allowing_unknown(text)) != text");
    const std::string decoded = tok.decode(ids);
    fuzz::require(replace_invalid_utf8(decoded) == decoded, "decode gave invalid UTF-8");
    bool valid = true;
    for (std::size_t i = 0; i < text.size() && valid;
         i += std::max<std::size_t>(1, utf8_character_length(text, i)))
    {
        valid = utf8_character_length(text, i) > 0;
    }
    try
    {
        fuzz::require(tok.encode(text) == ids, "encode and encode_allowing_unknown differ on valid UTF-8");
        fuzz::require(valid, "encode accepted invalid UTF-8");
        fuzz::require(decoded == text, "decode(encode(text)) != text for valid UTF-8");
    }
    catch (const std::invalid_argument& e)
    {
        fuzz::require(!valid, "encode refused valid UTF-8", e.what());
    }
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static const std::shared_ptr<const gpt2_tokenizer> fixed = fixed_tokenizer();
    std::vector<std::string> parts = fuzz::split_at_nul(data, size);
    parts.resize(3);
    check_text(*fixed, parts[2]);
    std::shared_ptr<const gpt2_tokenizer> tok;
    try
    {
        tok = gpt2_tokenizer::from_files(parts[0], parts[1]);
    }
    catch (const std::invalid_argument& e)
    {
        const std::string what = e.what();
        fuzz::require(!what.empty() && what.find('\n') == std::string::npos, "not a one-line message", what);
        fuzz::require(what.size() < 4096, "a message longer than 4096 bytes", what.substr(0, 200));
        return 0;
    }
    fuzz::require(tok->size() >= 256, "a vocabulary without its 256 byte pieces was accepted");
    check_text(*tok, parts[2]);
    return 0;
}
