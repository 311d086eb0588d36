// The training text's reader refuses what it could read without end: a character device such as
// /dev/zero and a FIFO are not regular files, and are refused before a byte is read (never blocking).
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <stdexcept>
#include <string>

#include "test_util.hpp"
#include "train/text_data.hpp"

namespace test_text_limits
{
using namespace xgrad;
using xgrad::test::temp_dir;

TEST_CASE("text_corpus::load refuses /dev/zero and a FIFO at once")
{
    CHECK_THROWS_WITH_AS(train::text_corpus::load("/dev/zero", 4), "/dev/zero is not a regular file",
                         std::runtime_error);
    temp_dir dir;
    const std::string fifo = dir / "text.fifo";
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS(train::text_corpus::load(fifo, 4), doctest::Contains("is not a regular file"),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(train::text_corpus::load(dir / "missing.txt", 4), doctest::Contains("cannot read"),
                         std::runtime_error);
}
}  // namespace test_text_limits
