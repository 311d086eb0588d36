// Byte vocabulary, the 90/10 split and the training windows of docs/spec.md, "Training on text".
#include <doctest/doctest.h>

#include <fstream>
#include <set>

#include "test_util.hpp"
#include "train/text_data.hpp"

namespace test_text_data
{
using namespace xgrad;
using namespace xgrad::train;

TEST_CASE("the vocabulary is the distinct bytes, ascending; ids are positions in that list")
{
    const std::string text = "banana\n\xff";
    const auto v = byte_vocabulary::of_text(text);
    REQUIRE(v.size() == 5);  // '\n' 'a' 'b' 'n' 0xff
    CHECK(v.byte(0) == '\n');
    CHECK(v.byte(1) == 'a');
    CHECK(v.byte(2) == 'b');
    CHECK(v.byte(3) == 'n');
    CHECK(v.byte(4) == 0xff);
    CHECK(v.id('z') == -1);
    CHECK(v.encode("nab") == std::vector<std::int32_t>{3, 1, 2});
    CHECK(v.decode({2, 1, 3, 1}) == "bana");
    CHECK(v.to_json() == "[10, 97, 98, 110, 255]");
    CHECK_THROWS_WITH_AS(v.encode("bz"), doctest::Contains("byte 0x7a at position 1"), std::invalid_argument);
}

TEST_CASE("the vocab metadata round-trips and is read strictly")
{
    const auto v = byte_vocabulary::of_text("hello, world");
    const auto back = byte_vocabulary::from_json(v.to_json());
    CHECK(back.to_json() == v.to_json());
    CHECK(byte_vocabulary::from_json(" [ 0,1 ,255 ] ").size() == 3);
    for (const char* bad : {"", "10, 32", "[", "[10, 10]", "[32, 10]", "[256]", "[-1]", "[1.5]", "[]", "[1] x", "[1 2]"})
    {
        CAPTURE(bad);
        CHECK_THROWS_AS(byte_vocabulary::from_json(bad), std::invalid_argument);
    }
}

TEST_CASE("the first floor(0.9 n) bytes train, the rest validate")
{
    std::string text;
    for (int i = 0; i < 95; ++i)
    {
        text.push_back(static_cast<char>('a' + i % 26));
    }
    const auto c = text_corpus::of_text(text, 4);
    CHECK(c.train.size() == 85);  // floor(0.9 * 95) = 85
    CHECK(c.validation.size() == 10);
    CHECK(c.vocabulary.decode(c.train.ids()) + c.vocabulary.decode(c.validation.ids()) == text);
}

TEST_CASE("a file that is missing, empty or too short for a window per split is refused clearly")
{
    test::temp_dir dir;
    CHECK_THROWS_WITH_AS(text_corpus::load(dir / "missing.txt", 4), doctest::Contains("cannot read"), std::runtime_error);
    std::ofstream(dir / "empty.txt").close();
    CHECK_THROWS_WITH_AS(text_corpus::load(dir / "empty.txt", 4), doctest::Contains("is empty"), std::runtime_error);
    std::ofstream(dir / "short.txt") << std::string(40, 'x');  // validation split: 4 tokens < T + 1 = 5
    CHECK_THROWS_WITH_AS(text_corpus::load(dir / "short.txt", 4), doctest::Contains("validation split has 4 tokens"),
                         std::runtime_error);
    CHECK_NOTHROW(text_corpus::load(dir / "short.txt", 3));
}

TEST_CASE("training windows depend on (seed, step) only and stay inside the split")
{
    const auto a = training_offsets(1000, 16, 64, 7, 3);
    CHECK(a == training_offsets(1000, 16, 64, 7, 3));
    CHECK(a != training_offsets(1000, 16, 64, 7, 4));
    CHECK(a != training_offsets(1000, 16, 64, 8, 3));
    std::set<std::size_t> seen;
    for (std::size_t step = 1; step <= 200; ++step)
    {
        for (std::size_t o : training_offsets(1000, 16, 8, 1, step))
        {
            CHECK(o + 17 <= 1000);
            seen.insert(o);
        }
    }
    CHECK(seen.count(0) == 1);    // both ends of the 984 possible offsets are reachable
    CHECK(seen.count(983) == 1);
    CHECK(seen.size() > 750);     // 1,600 draws from 984 values cover most of them
    // the smallest split: exactly one window
    CHECK(training_offsets(17, 16, 3, 1, 1) == std::vector<std::size_t>{0, 0, 0});
}

TEST_CASE("a batch holds windows and targets shifted by one; a share of it is a slice of the rows")
{
    std::vector<std::int32_t> ids(50);
    for (int i = 0; i < 50; ++i)
    {
        ids[i] = i;
    }
    token_split split(50);
    split.append(ids);
    const std::vector<std::size_t> offsets{0, 10, 45};
    const auto b = make_batch(split, offsets, 4);
    REQUIRE(b.inputs.shape() == std::vector<std::size_t>{3, 4});
    CHECK(b.inputs(1, 0) == 10);
    CHECK(b.inputs(1, 3) == 13);
    CHECK(b.targets(1, 3) == 14);
    CHECK(b.targets(2, 3) == 49);
    const auto share = make_batch(split, offsets, 4, 1, 2);
    REQUIRE(share.inputs.shape() == std::vector<std::size_t>{2, 4});
    CHECK(share.inputs(0, 0) == 10);
    CHECK_THROWS_AS(make_batch(split, {46}, 4), std::invalid_argument);
}

TEST_CASE("validation windows are evenly spaced, at most the cap, every window when fewer")
{
    const auto v = validation_offsets(1000, 16, 64);
    REQUIRE(v.size() == 64);
    CHECK(v.front() == 0);
    CHECK(v.back() == 1000 - 17);
    CHECK(validation_offsets(20, 16, 64) == std::vector<std::size_t>{0, 1, 2, 3});
    CHECK(validation_offsets(17, 16, 64) == std::vector<std::size_t>{0});
}
}  // namespace test_text_data
