// GPT-2's tokenizer (train/gpt2_tokenizer.hpp) against the reference written after OpenAI's encoder.py
// (tests/fixtures/gpt2/make_gpt2_fixtures.py, run with Python's regex module): encoding id for id, decoding
// with errors="replace", the pattern's character classes on every code point, ~1 MiB of text; round trips
// on random valid UTF-8; the readers' refusals; the metadata and --tokenizer hooks.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <random>
#include <sstream>

#include "source_dir.hpp"
#include "test_util.hpp"
#include "train/gpt2_tokenizer.hpp"
#include "train/option_error.hpp"
#include "train/text_data.hpp"

namespace test_gpt2_tokenizer
{
using namespace xgrad::train;
using xgrad::test::read_bytes;
using xgrad::test::temp_dir;
using xgrad::test::write_bytes;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace
{
const std::string fixtures = xgrad::test::source_dir() + "/tests/fixtures/gpt2/";

std::shared_ptr<const gpt2_tokenizer> test_vocabulary()
{
    static const auto t = gpt2_tokenizer::from_folder(fixtures);
    return t;
}

json fixture(const std::string& name)
{
    return json::parse(read_bytes(fixtures + name));
}

std::string utf8_of(std::uint32_t cp)
{
    std::string s;
    if (cp < 0x80)
    {
        s += char(cp);
    }
    else if (cp < 0x800)
    {
        s += { char(0xc0 | cp >> 6), char(0x80 | (cp & 0x3f)) };
    }
    else if (cp < 0x10000)
    {
        s += { char(0xe0 | cp >> 12), char(0x80 | ((cp >> 6) & 0x3f)), char(0x80 | (cp & 0x3f)) };
    }
    else
    {
        s += { char(0xf0 | cp >> 18),
               char(0x80 | ((cp >> 12) & 0x3f)),
               char(0x80 | ((cp >> 6) & 0x3f)),
               char(0x80 | (cp & 0x3f)) };
    }
    return s;
}

std::uint64_t fnv1a(const char* data, std::size_t n)
{
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (std::size_t i = 0; i < n; ++i)
    {
        h = (h ^ static_cast<unsigned char>(data[i])) * 0x100000001b3ull;
    }
    return h;
}

std::string hex64(std::uint64_t h)
{
    char text[20];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
    return text;
}

// The fortunes text as the fixture script reads it: the files without a dot in their name, sorted.
std::string fortunes_text()
{
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes"))
    {
        if (e.is_regular_file() && e.path().filename().string().find('.') == std::string::npos)
        {
            files.push_back(e.path());
        }
    }
    std::sort(files.begin(), files.end());
    std::string text;
    for (const auto& f : files)
    {
        text += read_bytes(f);
    }
    return text;
}

std::string refusal(const std::string& vocab, const std::string& merges)
{
    try
    {
        gpt2_tokenizer::from_files(vocab, merges);
    }
    catch (const std::invalid_argument& e)
    {
        return e.what();
    }
    return "(accepted)";
}

const std::string tiny_merges = "#version: 0.2\na b\nab c\n";

// A small valid vocabulary: the 256 byte pieces (in byte order), then "ab", "abc" and <|endoftext|>.
json tiny_vocabulary()
{
    json v = json::object();
    std::uint32_t extra = 256;
    for (std::uint32_t b = 0; b < 256; ++b)
    {
        const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        v[utf8_of(printable ? b : extra++)] = b;
    }
    v["ab"] = 256;
    v["abc"] = 257;
    v["<|endoftext|>"] = 258;
    return v;
}
} // namespace

TEST_CASE("encoding equals the reference id for id")
{
    const auto tok = test_vocabulary();
    CHECK(tok->size() == 3257);
    for (const json& c : fixture("encode.json"))
    {
        const std::string text = c["text"];
        CAPTURE(c["name"].get<std::string>());
        CHECK(tok->encode(text) == c["ids"].get<std::vector<std::int32_t>>());
        CHECK(tok->decode(c["ids"].get<std::vector<std::int32_t>>()) == text);
    }
}

TEST_CASE("decoding replaces ill-formed UTF-8 as Python's errors=\"replace\" does")
{
    const auto tok = test_vocabulary();
    for (const json& c : fixture("decode.json"))
    {
        CAPTURE(c["name"].get<std::string>());
        CHECK(tok->decode(c["ids"].get<std::vector<std::int32_t>>()) == c["text"].get<std::string>());
    }
    CHECK(replace_invalid_utf8("a\xe2\x82"
                               "b") == "a\xef\xbf\xbd"
                                       "b");
    CHECK(replace_invalid_utf8("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    CHECK_THROWS_WITH_AS(tok->decode({ 3257 }),
                         doctest::Contains("token 3257 is outside the vocabulary of 3257"),
                         std::invalid_argument);
    CHECK_THROWS_AS(tok->decode({ -1 }), std::invalid_argument);
}

TEST_CASE("the pattern sees every code point as Python's regex module does")
{
    // classes.txt: "first last class unassigned" with hexadecimal code points. A code point Unicode 14
    // (PCRE2's tables) leaves unassigned may have a class in the newer tables of the regex module.
    const auto tok = test_vocabulary();
    std::istringstream lines(read_bytes(fixtures + "classes.txt"));
    std::string first, last, expected;
    int unassigned = 0;
    std::size_t checked = 0, newer = 0;
    while (lines >> first >> last >> expected >> unassigned)
    {
        for (std::uint32_t cp = std::stoul(first, nullptr, 16); cp <= std::stoul(last, nullptr, 16); ++cp)
        {
            // A letter joins "a", a number joins "1", another character joins "!"; white space joins none.
            const std::string c = utf8_of(cp);
            const std::string seen = tok->pretokenize("a" + c).size() == 1   ? "L"
                                     : tok->pretokenize("1" + c).size() == 1 ? "N"
                                     : tok->pretokenize("!" + c).size() == 1 ? "O"
                                                                             : "S";
            ++checked;
            if (seen != expected && unassigned)
            {
                ++newer;
                continue;
            }
            if (seen != expected)
            {
                FAIL_CHECK("U+" << first << ".." << last << " at " << cp << ": " << seen << " against "
                                << expected);
            }
        }
    }
    CHECK(checked == 0x110000 - 0x800);
    MESSAGE(newer << " code points unassigned in Unicode 14 have a class in the regex module's newer tables");
    CHECK(newer < 6000);
}

TEST_CASE("~1 MiB of the fortunes text encodes as the reference does")
{
    const json expected = fixture("large.json");
    const std::string text = fortunes_text().substr(0, expected["bytes"].get<std::size_t>());
    REQUIRE(hex64(fnv1a(text.data(), text.size())) == expected["text_fnv1a"].get<std::string>());
    const std::vector<std::int32_t> ids = test_vocabulary()->encode(text);
    REQUIRE(ids.size() == expected["ids"].get<std::size_t>());
    CHECK(std::vector<std::int32_t>(ids.begin(), ids.begin() + 64) ==
          expected["first_ids"].get<std::vector<int>>());
    CHECK(std::vector<std::int32_t>(ids.end() - 64, ids.end()) ==
          expected["last_ids"].get<std::vector<int>>());
    std::string bytes;
    for (std::int32_t id : ids)
    {
        bytes.append(reinterpret_cast<const char*>(&id), 4); // little-endian, as the fixture hashes them
    }
    CHECK(hex64(fnv1a(bytes.data(), bytes.size())) == expected["ids_fnv1a"].get<std::string>());
    CHECK(test_vocabulary()->decode(ids) == text);
}

TEST_CASE("decode(encode(x)) == x for random valid UTF-8")
{
    const auto tok = test_vocabulary();
    std::mt19937 rng(36);
    const std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges = {
        { 0x0, 0x7f },         { 0x20, 0x7e },   { 0x80, 0x7ff },      { 0x800, 0xd7ff }, { 0xe000, 0xffff },
        { 0x10000, 0x10ffff }, { 0x300, 0x36f }, { 0x1f300, 0x1faff }, { 0x2000, 0x206f }
    };
    for (int round = 0; round < 300; ++round)
    {
        std::string text;
        const int length = std::uniform_int_distribution<int>(0, 200)(rng);
        for (int i = 0; i < length; ++i)
        {
            const auto& [lo, hi] =
              ranges[std::uniform_int_distribution<std::size_t>(0, ranges.size() - 1)(rng)];
            text += utf8_of(std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng));
        }
        CAPTURE(text);
        CHECK(tok->decode(tok->encode(text)) == text);
    }
}

TEST_CASE("invalid UTF-8 is an error in encode, and its own byte tokens when unknowns are allowed")
{
    const auto tok = test_vocabulary();
    CHECK_THROWS_WITH_AS(tok->encode("ok \xff"),
                         doctest::Contains("byte 0xff at position 3 is not valid UTF-8"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(
      tok->encode("\xe2\x82"), doctest::Contains("byte 0xe2 at position 0"), std::invalid_argument);
    const std::string text = "caf\xe9 ok\xed\xa0\x80!";
    const auto ids = tok->encode_allowing_unknown(text);
    CHECK(tok->decode_bytes(ids) == text);
    CHECK(tok->decode(ids) == "caf\xef\xbf\xbd ok\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd!");
}

TEST_CASE("merges apply lowest rank first, every occurrence left to right, as encoder.py's loop")
{
    // Ranks: (a, a) first, then (aa, a), then (a, b). encoder.py on "aaaab": one pass of (a, a) makes
    // aa aa b; (aa, a) never applies; (a, b) does not either. A merger that took (aa, a) as soon as it
    // appeared would give aaa a b.
    json v = tiny_vocabulary();
    v.erase("ab");
    v.erase("abc");
    v.erase("<|endoftext|>");
    v["aa"] = 256;
    v["aaa"] = 257;
    v["ab"] = 258;
    const auto tok = gpt2_tokenizer::from_files(v.dump(), "#version: 0.2\na a\naa a\na b\n");
    CHECK(tok->encode("aaaab") == std::vector<std::int32_t>{ 256, 256, 'b' });
    CHECK(tok->encode("aaa") == std::vector<std::int32_t>{ 257 });
    CHECK(tok->encode("ab") == std::vector<std::int32_t>{ 258 });
    // A pair listed twice takes its later rank, as dict(zip(merges, ranks)) does: (a, b) now ranks below
    // (a, a), so "aab" is a ab.
    const auto again = gpt2_tokenizer::from_files(v.dump(), "#version: 0.2\na a\naa a\na b\na a\n");
    CHECK(again->encode("aab") == std::vector<std::int32_t>{ 'a', 258 });
    // A word of 20001 letters (merged in n log n): 10000 aa, then the last aa a is aaa.
    const auto long_word = tok->encode(std::string(20001, 'a'));
    CHECK(long_word.size() == 10000);
    CHECK(long_word.back() == 257);
}

TEST_CASE("<|endoftext|> in the text is its token, and decodes to itself")
{
    const auto tok = gpt2_tokenizer::from_files(tiny_vocabulary().dump(), tiny_merges);
    CHECK(tok->size() == 259);
    CHECK(tok->encode("abc<|endoftext|>ab") == std::vector<std::int32_t>{ 257, 258, 256 });
    CHECK(tok->decode({ 258 }) == "<|endoftext|>");
    CHECK(tok->encode("<|endoftext").size() > 1);
}

TEST_CASE("bad vocab.json and merges.txt are refused with one line naming the problem")
{
    const std::string v = tiny_vocabulary().dump();
    CHECK(refusal("[1, 2]", tiny_merges).find("vocab.json: is an array, not a JSON object") == 0);
    CHECK(refusal("{\"a\": 1", tiny_merges).find("vocab.json: is not valid JSON") == 0);
    CHECK(refusal("7", tiny_merges).find("not a JSON object of piece -> id") != std::string::npos);
    CHECK(refusal("{}", tiny_merges).find("has no tokens") != std::string::npos);
    CHECK(refusal("{\"a\": \"x\"}", tiny_merges).find("the id of piece 'a' is a string") !=
          std::string::npos);
    CHECK(refusal("{\"a\": -1}", tiny_merges).find("is a negative number") != std::string::npos);
    for (const std::string id : {"1.5", "258.0", "1e30"})  // 258.0 and 1e30 are whole, yet not written as ids
    {
        CHECK(refusal("{\"a\": " + id + "}", tiny_merges).find("is a number with a fraction or an exponent") !=
              std::string::npos);
    }
    CHECK(refusal("{\"a\": {\"b\": 1}}", tiny_merges).find("holds an object inside the object") !=
          std::string::npos);
    CHECK(refusal(std::string(100000, '['), tiny_merges).find("vocab.json: is an array") == 0);
    CHECK(refusal("{\"a\": 0, \"b\": 0}", tiny_merges).find("pieces 'a' and 'b' share id 0") !=
          std::string::npos);
    CHECK(refusal("{\"a\": 0, \"b\": 2}", tiny_merges).find("piece 'b' has id 2, outside 0..1") !=
          std::string::npos);
    CHECK(refusal("{\"a\": 0, \"a\": 1}", tiny_merges).find("piece 'a' appears twice") != std::string::npos);
    CHECK(refusal("{\"a\": 0}", tiny_merges).find("has no token for byte 0x00") != std::string::npos);
    CHECK(refusal("{\"" + std::string(2000, 'x') + "\": 0}", tiny_merges).find("2000 bytes long") !=
          std::string::npos);

    CHECK(refusal(v, "a b\n").find("merges.txt: does not start with its \"#version\" line") == 0);
    CHECK(refusal(v, "#version: 0.2\na b c\n").find("line 2 is 'a b c', not two pieces") !=
          std::string::npos);
    CHECK(refusal(v, "#version: 0.2\n\na\n").find("line 3 is 'a'") != std::string::npos);
    CHECK(refusal(v, "#version: 0.2\nq \xe4\xb8\xad\n")
            .find("line 2: piece '\\xe4\\xb8\\xad' is not in the vocabulary") != std::string::npos);
    CHECK(refusal(v, "#version: 0.2\nb c\n").find("line 2: the merged piece 'bc' is not in the vocabulary") !=
          std::string::npos);
    CHECK(refusal(std::string(gpt2_limits::max_file_bytes + 1, ' '), tiny_merges).find("more than the") !=
          std::string::npos);
    // Blank lines, \r\n endings and a last line without its newline are fine.
    CHECK(refusal(v, "#version: 0.2\r\n\r\na b\r\nab c") == "(accepted)");
}

TEST_CASE("from_folder names the files, refusing huge or missing ones unread")
{
    temp_dir s;
    CHECK_THROWS_WITH_AS(gpt2_tokenizer::from_folder(s.path.string()),
                         doctest::Contains("vocab.json: does not exist"),
                         std::invalid_argument);
    write_bytes(s / "vocab.json", tiny_vocabulary().dump());
    fs::create_directory(s / "merges.txt");
    CHECK_THROWS_WITH_AS(gpt2_tokenizer::from_folder(s.path.string()),
                         doctest::Contains("merges.txt: is not a regular file"),
                         std::invalid_argument);
    fs::remove(s / "merges.txt");
    write_bytes(s / "merges.txt", "");
    fs::resize_file(s / "merges.txt", std::uintmax_t(1) << 40); // sparse: a terabyte that is never read
    CHECK_THROWS_WITH_AS(gpt2_tokenizer::from_folder(s.path.string()),
                         doctest::Contains("1099511627776 bytes"),
                         std::invalid_argument);
}

TEST_CASE("the tokenizer stores itself in metadata and comes back from it")
{
    const auto tok = test_vocabulary();
    metadata_map m{ { "vocab", "[1, 2]" }, { "tokenizer_model", "x" } };
    tok->to_metadata(m);
    CHECK(m.at("tokenizer") == "gpt2");
    CHECK(m.count("vocab") == 0);
    CHECK(m.count("tokenizer_model") == 0);
    CHECK(from_base64(m.at("tokenizer_vocab")) == read_bytes(fixtures + "vocab.json"));
    CHECK(from_base64(m.at("tokenizer_merges")) == read_bytes(fixtures + "merges.txt"));
    const auto back = tokenizer_from_metadata(m, "ck.safetensors");
    CHECK(back->size() == 3257);
    CHECK(back->encode("Hello there") == tok->encode("Hello there"));
    byte_vocabulary::of_text("ab").to_metadata(m);
    CHECK(m.count("tokenizer_vocab") == 0);
    CHECK(m.count("tokenizer_merges") == 0);

    const auto bad = [](metadata_map m, const std::string& expected)
    {
        CHECK_THROWS_WITH_AS(tokenizer_from_metadata(m, "ck.safetensors"),
                             doctest::Contains(expected.c_str()),
                             std::invalid_argument);
    };
    metadata_map g{ { "tokenizer", "gpt2" } };
    bad(g, "ck.safetensors: metadata \"tokenizer\" is gpt2 but \"tokenizer_vocab\" is missing");
    g["tokenizer_vocab"] = "@@@@";
    g["tokenizer_merges"] = to_base64(tiny_merges);
    bad(g, "ck.safetensors: metadata \"tokenizer_vocab\" is not base64");
    g["tokenizer_vocab"] = to_base64("{\"a\": 3}");
    bad(g, "ck.safetensors: metadata \"tokenizer_vocab\" (vocab.json): piece 'a' has id 3");
}

TEST_CASE("--tokenizer gpt2:DIR trains on the folder's two files")
{
    const auto spec = tokenizer_spec::parse("gpt2:" + fixtures);
    CHECK(spec.type == tokenizer_spec::kind::gpt2);
    CHECK(spec.to_string() == "gpt2:" + fixtures);
    CHECK_THROWS_AS(tokenizer_spec::parse("gpt2:"), std::invalid_argument);
    const std::string text = fortunes_text().substr(0, 20000);
    const auto corpus = text_corpus::of_text(text, 16, "fortunes", spec);
    CHECK(corpus.tokens->size() == 3257);
    CHECK(corpus.tokens->decode(corpus.train.ids()) + corpus.tokens->decode(corpus.validation.ids()) == text);
    CHECK(corpus.validation_bits_per_byte(std::log(2.0)) ==
          doctest::Approx(double(corpus.validation.size()) / corpus.validation_bytes));
    try
    {
        tokenizer_spec::parse("gpt2:/nonexistent");
        text_corpus::of_text(text, 16, "fortunes", tokenizer_spec::parse("gpt2:/nonexistent"));
        FAIL("a missing folder was accepted");
    }
    catch (const option_error& e)
    {
        CHECK(e.problem == option_problem::bad_value);
        CHECK(std::string(e.what()).find(
                "tokenizer gpt2:/nonexistent: /nonexistent/vocab.json: does not exist") == 0);
    }
}
}  // namespace test_gpt2_tokenizer
