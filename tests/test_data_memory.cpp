// The training data's memory (train/data_memory.hpp): text_corpus::load's peak resident memory for a file
// of n bytes stays within text_data_bytes (the text and a one-byte token per byte for the byte
// vocabulary; reading through a stream iterator, copying the splits and an int32 a token once took 6 n),
// the tokens are stored in the fewest bytes their vocabulary allows, and a file whose loading would not
// fit --max-memory is refused before it is read.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "train/data_memory.hpp"
#include "train/memory_estimate.hpp"
#include "train/option_error.hpp"
#include "train/text_data.hpp"
#include "test_util.hpp"

namespace test_data_memory
{
using namespace xgrad::train;
namespace fs = std::filesystem;

namespace
{
std::uint64_t peak_resident_bytes()
{
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux: kibibytes
}

// A text file of `bytes` bytes: lines of a few words.
std::string write_text(const std::string& name, std::size_t bytes)
{
    const std::string path = (fs::temp_directory_path() / name).string();
    std::ofstream out(path, std::ios::binary);
    const std::string line = "the quick brown fox jumps over the lazy dog, and the dog sleeps on\n";
    for (std::size_t written = 0; written < bytes; written += line.size())
    {
        out << line.substr(0, std::min(line.size(), bytes - written));
    }
    return path;
}
}  // namespace

TEST_CASE("loading a text holds at most the text and a token per byte")
{
    if (xgrad::test::under_address_sanitizer)
    {
        MESSAGE("skipped under AddressSanitizer");
        return;
    }
    // First in this process (doctest runs test cases in file order), so the peak so far is small.
    const std::size_t n = std::size_t(64) << 20;
    const std::string path = write_text("xgrad_data_memory_64m.txt", n);
    const std::uint64_t before = peak_resident_bytes();
    {
        const text_corpus c = text_corpus::load(path, 16);
        CHECK(c.train.size() + c.validation.size() == n);
    }
    const std::uint64_t growth = peak_resident_bytes() - before;
    fs::remove(path);
    CAPTURE(growth);
    CHECK(growth >= 2 * n - n / 10);                      // the text and the tokens are really there ...
    CHECK(growth <= text_data_bytes(n, {}) + (n / 10));  // ... and little else (pages, the 1 MiB pieces)
}

TEST_CASE("text_data_bytes: the text and a token of 1, 2 or 4 bytes per byte, saturating")
{
    CHECK(text_data_bytes(400000000, {}) == 800000000);  // bytes: V <= 256
    CHECK(text_data_bytes(400000000, tokenizer_spec::parse("bpe:256")) == 800000000);
    CHECK(text_data_bytes(400000000, tokenizer_spec::parse("bpe:4096")) == 1200000000);
    CHECK(text_data_bytes(400000000, tokenizer_spec::parse("unigram:65536")) == 1200000000);
    CHECK(text_data_bytes(UINT64_MAX / 2 + 1, {}) == UINT64_MAX);
}

TEST_CASE("a split keeps every id in the fewest bytes its vocabulary needs")
{
    for (const std::size_t V : {std::size_t(5), std::size_t(256), std::size_t(257), std::size_t(65536),
                                std::size_t(65537), std::size_t(1) << 31})
    {
        CAPTURE(V);
        const std::vector<std::int32_t> ids{0, 1, static_cast<std::int32_t>(V - 1), 2,
                                            static_cast<std::int32_t>(V / 2)};
        token_split split(V);
        split.append(ids);
        split.append({3});
        CHECK(split.bytes_per_token() == (V <= 256 ? 1u : V <= 65536 ? 2u : 4u));
        CHECK(split.size() == 6);
        CHECK(split[2] == V - 1);
        CHECK(split[5] == 3);
        CHECK(split.front() == 0);
        std::vector<std::int32_t> all = ids;
        all.push_back(3);
        CHECK(split.ids() == all);
    }
}

TEST_CASE("a data file whose loading exceeds --max-memory is refused before it is read")
{
    const std::string path = write_text("xgrad_data_memory_1m.txt", std::size_t(1) << 20);
    const std::string expected = "data " + path + ": loading its 1048576 bytes needs about 2.0 MiB (the text "
                                 "and a token per byte), more than the 1.0 MiB available (max_memory); use a "
                                 "smaller file, or max_memory BYTES to insist";
    CHECK_THROWS_WITH_AS(require_data_memory(path, "1M", {}), expected.c_str(), option_error);
    // 3 n with two-byte tokens
    CHECK_THROWS_AS(require_data_memory(path, "3000000", tokenizer_spec::parse("bpe:4096")), option_error);
    CHECK_NOTHROW(require_data_memory(path, "3M", {}));
    CHECK_NOTHROW(require_data_memory(path + ".missing", "1M", {}));  // the loader names a missing file
    CHECK_NOTHROW(require_data_memory(path, "lots", {}));             // the run's own check names the flag
    fs::remove(path);
}

TEST_CASE("the refusal of a small file against a small --max-memory gives sizes in KiB, not 0.0 MiB")
{
    const std::string path = write_text("xgrad_data_memory_4800.txt", 4800);
    const std::string expected = "data " + path + ": loading its 4800 bytes needs about 9.4 KiB (the text "
                                 "and a token per byte), more than the 1.0 KiB available (max_memory); use a "
                                 "smaller file, or max_memory BYTES to insist";
    CHECK_THROWS_WITH_AS(require_data_memory(path, "1K", {}), expected.c_str(), option_error);
    CHECK(bytes_text(812) == "812 bytes");
    CHECK(bytes_text(1023) == "1023 bytes");
    CHECK(bytes_text(1024) == "1.0 KiB");
    CHECK(bytes_text(std::uint64_t(3) << 40) == "3.0 TiB");
    CHECK(bytes_text(std::numeric_limits<std::uint64_t>::max()) == "more than 16 EiB");
    fs::remove(path);
}

TEST_CASE("the run's estimate counts the loaded tokens")
{
    std::string text;
    for (int i = 0; i < 100; ++i)
    {
        text += "abcdefgh\n";
    }
    const text_corpus c = text_corpus::of_text(text, 4);  // 900 one-byte tokens
    memory_estimate need;
    need.parameters = 1000;
    need.workspace = 24;
    const memory_estimate with = with_training_data(need, c);
    CHECK(with.workspace == 24 + 900);
    CHECK(with.total() == need.total() + 900);
    need.workspace = UINT64_MAX - 5;
    CHECK(with_training_data(need, c).workspace == UINT64_MAX);
}
}  // namespace test_data_memory
