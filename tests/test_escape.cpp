// Error messages that quote file content: every byte that is not printable ASCII appears as \xNN
// (io/escape.hpp), in every message of the .npy reader that quotes its header, so a control byte in a
// corrupt file can neither split a message into two lines nor reach a terminal raw.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "io/escape.hpp"
#include "io/npy.hpp"
#include "test_util.hpp"

namespace test_escape
{
using namespace xgrad;
using xgrad::test::temp_dir;

namespace
{
bool all_printable(const std::string& s)
{
    for (const char ch : s)
    {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c >= 0x7f)
        {
            return false;
        }
    }
    return true;
}

// A .npy file (format 1.0) whose header dict is `dict`, padded as NumPy pads it, then `data_bytes` zeros.
void write_npy(const std::string& path, const std::string& dict, std::size_t data_bytes)
{
    std::string header = dict;
    header.append((10 + header.size() + 1 + 63) / 64 * 64 - 10 - header.size() - 1, ' ');
    header += '\n';
    std::ofstream f(path, std::ios::binary);
    f << std::string("\x93NUMPY\x01\x00", 8) << static_cast<char>(header.size() % 256)
      << static_cast<char>(header.size() / 256) << header << std::string(data_bytes, '\0');
}

std::string message_of(const std::string& path, bool as_bool)
{
    try
    {
        if (as_bool)
        {
            npy::load_bool(path);
        }
        else
        {
            npy::load_float<double>(path);
        }
    }
    catch (const npy::error& e)
    {
        return e.what();
    }
    FAIL("no npy::error for " << path);
    return "";
}
}  // namespace

TEST_CASE("io::escaped: printable ASCII as is, a backslash doubled, every other byte as \\xNN")
{
    CHECK(io::escaped("shape (2, 3)") == "shape (2, 3)");
    CHECK(io::escaped(std::string("a\x1d" "b", 3)) == "a\\x1db");
    CHECK(io::escaped(std::string("\0\n\r\t\x7f", 5)) == "\\x00\\x0a\\x0d\\x09\\x7f");
    CHECK(io::escaped("caf\xc3\xa9") == "caf\\xc3\\xa9");  // non-ASCII too: a file's bytes, not text
    CHECK(io::escaped("a\\x1d") == "a\\\\x1d");            // a literal backslash cannot pass for an escape
    CHECK(io::escaped("") == "");
    std::string every_byte;
    for (int c = 0; c < 256; ++c)
    {
        every_byte += static_cast<char>(c);
    }
    const std::string e = io::escaped(every_byte);
    CHECK(all_printable(e));
    CHECK(e.size() == 95 + 1 + 4 * (256 - 95));  // 95 printable bytes ('\\' doubled), 161 as \xNN
}

TEST_CASE("io::quoted cuts long text; io::one_line escapes control bytes only")
{
    CHECK(io::quoted("<f8") == "'<f8'");
    CHECK(io::quoted("abcdef", 3) == "'abc...'");
    CHECK(io::quoted(std::string("\x1d\x1d", 2), 1) == "'\\x1d...'");
    CHECK(io::one_line("two\nlines\r\x1b[31m") == "two\\x0alines\\x0d\\x1b[31m");
    CHECK(io::one_line("donn\xc3\xa9" "es/X.npy") == "donn\xc3\xa9" "es/X.npy");  // UTF-8 paths stay readable
    CHECK(io::one_line("a\\b") == "a\\b");
}

TEST_CASE("the .npy reader escapes every byte of the file it quotes, wherever it sits in the header")
{
    temp_dir dir;
    struct quoting_case
    {
        std::string name, dict, needle;
        std::size_t data_bytes = 16;
        bool as_bool = false;
    };
    const std::string gs = "\x1d";  // the byte found raw on stderr
    const std::vector<quoting_case> cases = {
        {"unknown key", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), '" + gs + "': 1}",
         "unexpected key '\\x1d'"},
        {"dtype string", "{'descr': '<f" + gs + "', 'fortran_order': False, 'shape': (2,)}",
         "dtype '<f\\x1d' is not supported"},
        {"big-endian dtype with junk", "{'descr': '>f" + gs + "\xff', 'fortran_order': False, 'shape': (2,)}",
         "a.astype('<f\\x1d\\xff')"},
        {"bool wanted", "{'descr': '<f" + gs + "', 'fortran_order': False, 'shape': (2,)}",
         "dtype '<f\\x1d' is not supported; a bool array", 16, true},
        {"character outside any token", "{'descr': '<f8', " + gs + "}", "unexpected character '\\x1d'"},
        {"key without a colon", "{'a" + gs + "' 1}", "expected ':' after key 'a\\x1d'"},
        {"key given twice", "{'" + gs + "': 1, '" + gs + "': 2}", "key '\\x1d' appears twice"},
        {"value without a comma", "{'" + gs + "': 1 2}", "after the value of '\\x1d'"},
        {"text after the dict", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}" + gs + "\x01",
         "unexpected text after the dict: '\\x1d\\x01 "},
        {"shape of a wrong type", "{'descr': '<f8', 'fortran_order': False, 'shape': '" + gs + "'}",
         "'shape' must be a tuple"},
        {"fortran_order of a wrong type", "{'descr': '<f8', 'fortran_order': '" + gs + "', 'shape': (2,)}",
         "'fortran_order' must be True or False"},
    };
    int index = 0;
    for (const quoting_case& c : cases)
    {
        CAPTURE(c.name);
        const std::string path = dir / ("case" + std::to_string(index++) + ".npy");
        write_npy(path, c.dict, c.data_bytes);
        const std::string message = message_of(path, c.as_bool);
        CAPTURE(message);
        CHECK(all_printable(message));
        CHECK(message.find(c.needle) != std::string::npos);
        CHECK(message.find(gs) == std::string::npos);
    }

    // Bytes in the magic string are escaped too.
    const std::string bad_magic = dir / "magic.npy";
    std::ofstream(bad_magic, std::ios::binary) << std::string("\x93NUMP\x1d\x01\x00\x10\x00", 10)
                                               << std::string(16, ' ');
    const std::string message = message_of(bad_magic, false);
    CHECK(all_printable(message));
    CHECK(message.find("bad magic string '\\x93NUMP\\x1d'") != std::string::npos);
}
}  // namespace test_escape
