// tools/npy: round trips, files written by NumPy (tests/data/npy, made by make_reference.py), and every
// class of corrupt file, each of which must throw npy::error naming the file on one line.
#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>

#include "source_dir.hpp"
#include "test_util.hpp"
#include "io/npy.hpp"

namespace test_npy
{
using namespace xgrad;
using xgrad::test::read_bytes;
using xgrad::test::temp_dir;
using xgrad::test::write_bytes;
namespace fs = std::filesystem;

namespace
{
const std::string data_dir = xgrad::test::source_dir() + "/tests/data/npy/";

// A .npy file with any header text and data, laid out as NumPy lays it out (unless the caller breaks it).
std::string npy_file(const std::string& dict, const std::string& data, int major = 1)
{
    const std::size_t prefix = major == 1 ? 10 : 12;
    std::string header = dict;
    const std::size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
    header.append(total - prefix - header.size() - 1, ' ');
    header += '\n';
    std::string out = "\x93NUMPY";
    out += static_cast<char>(major);
    out += '\0';
    const std::size_t n = header.size();
    for (std::size_t k = 0; k < (major == 1 ? 2u : 4u); ++k)
    {
        out += static_cast<char>((n >> (8 * k)) & 0xff);
    }
    return out + header + data;
}

std::string f8_dict(const std::string& shape)
{
    return "{'descr': '<f8', 'fortran_order': False, 'shape': " + shape + ", }";
}

// Loading `path` as floats (or bools) throws npy::error: one line, "<path>: ...", mentioning `needle`.
void check_rejected(const std::string& path, const std::string& needle, bool as_bool = false)
{
    std::string message;
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
        FAIL("no error for " << path << " (expected '" << needle << "')");
    }
    catch (const npy::error& e)
    {
        message = e.what();
    }
    INFO(message);
    CHECK(message.rfind(path + ": ", 0) == 0);
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.find(needle) != std::string::npos);
}

template <class T>
array<T> seeded(const shape_t& shape, unsigned seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal;
    array<T> a = array<T>::from_shape(shape);
    for (auto& x : a)
    {
        x = static_cast<T>(normal(rng));
    }
    return a;
}
}  // namespace

TEST_CASE_TEMPLATE("npy round trip keeps shape and every bit", T, double, float)
{
    temp_dir dir;
    for (const shape_t& shape :
         {shape_t{2, 3, 4}, shape_t{5}, shape_t{}, shape_t{0, 4}, shape_t{3, 0}, shape_t{1, 1, 1, 7}})
    {
        CAPTURE(shape_str(shape));
        const array<T> a = seeded<T>(shape, 7);
        npy::save(dir / "a.npy", a);
        const array<T> b = npy::load_float<T>(dir / "a.npy");
        CHECK(to_shape(b.shape()) == shape);
        CHECK(b.size() == element_count(shape));
        CHECK(std::equal(a.begin(), a.end(), b.begin()));
        // NumPy's layout: the data starts on a 64-byte boundary right after a '\n'.
        const std::string bytes = read_bytes(dir / "a.npy");
        const std::size_t header_end =
            10 + static_cast<unsigned char>(bytes[8]) + 256u * static_cast<unsigned char>(bytes[9]);
        CHECK(header_end % 64 == 0);
        CHECK(bytes[header_end - 1] == '\n');
        CHECK(bytes.size() == header_end + a.size() * sizeof(T));
    }
}

TEST_CASE("npy scalar round trip")
{
    temp_dir dir;
    array<double> s = xt::zeros<double>(shape_t{});
    s() = -1.75;
    npy::save(dir / "s.npy", s);
    const array<double> t = npy::load_float<double>(dir / "s.npy");
    CHECK(t.dimension() == 0);
    CHECK(t() == -1.75);
}

TEST_CASE("npy bool round trip")
{
    temp_dir dir;
    for (const shape_t& shape : {shape_t{2, 3}, shape_t{}, shape_t{0}, shape_t{2, 1, 3, 5}})
    {
        CAPTURE(shape_str(shape));
        mask_t m = mask_t::from_shape(shape);
        std::size_t k = 0;
        for (auto&& x : m)
        {
            x = (k++ * 7) % 3 == 1;
        }
        npy::save_bool(dir / "m.npy", m);
        const mask_t n = npy::load_bool(dir / "m.npy");
        CHECK(to_shape(n.shape()) == shape);
        CHECK(std::equal(m.begin(), m.end(), n.begin()));
    }
}

TEST_CASE("npy float32 <-> float64 conversion on load, across read chunks")
{
    temp_dir dir;
    const array<float> a = seeded<float>({70001}, 3);
    npy::save(dir / "a.npy", a);
    const array<double> b = npy::load_float<double>(dir / "a.npy");
    REQUIRE(b.size() == a.size());
    CHECK(std::equal(a.begin(), a.end(), b.begin(), [](float x, double y) { return double(x) == y; }));
    const array<double> c = seeded<double>({3, 5}, 4);
    npy::save(dir / "c.npy", c);
    const array<float> d = npy::load_float<float>(dir / "c.npy");
    CHECK(std::equal(c.begin(), c.end(), d.begin(), [](double x, float y) { return float(x) == y; }));
}

TEST_CASE("npy reads files written by NumPy")
{
    const array<double> expected = {{-1.0, -0.5, 0.0}, {0.5, 1.0, 1.5}};
    for (const char* name : {"f8_2x3.npy", "f8_v2.npy", "f8_v3.npy"})
    {
        CAPTURE(name);
        const array<double> a = npy::load_float<double>(data_dir + name);
        CHECK(to_shape(a.shape()) == shape_t{2, 3});
        CHECK(a == expected);
    }
    const array<double> f4 = npy::load_float<double>(data_dir + "f4_3.npy");
    CHECK(f4 == array<double>{1.5, -2.25, 0.125});
    const array<float> f4f = npy::load_float<float>(data_dir + "f4_3.npy");
    CHECK(f4f == array<float>{1.5f, -2.25f, 0.125f});
    const array<double> s = npy::load_float<double>(data_dir + "f8_scalar.npy");
    CHECK(s.dimension() == 0);
    CHECK(s() == 3.25);
    const array<float> e = npy::load_float<float>(data_dir + "f4_0x4.npy");
    CHECK(to_shape(e.shape()) == shape_t{0, 4});
    const array<double> four = npy::load_float<double>(data_dir + "f8_2x1x3x2.npy");
    CHECK(to_shape(four.shape()) == shape_t{2, 1, 3, 2});
    CHECK(four(1, 0, 2, 1) == 11.0 / 8.0);
    const mask_t m = npy::load_bool(data_dir + "b1_2x3.npy");
    CHECK(m == mask_t{{true, false, true}, {false, false, true}});
}

TEST_CASE("npy writes the bytes NumPy writes")
{
    temp_dir dir;
    npy::save(dir / "a.npy", array<double>{{-1.0, -0.5, 0.0}, {0.5, 1.0, 1.5}});
    CHECK(read_bytes(dir / "a.npy") == read_bytes(data_dir + "f8_2x3.npy"));
    npy::save(dir / "b.npy", array<float>{1.5f, -2.25f, 0.125f});
    CHECK(read_bytes(dir / "b.npy") == read_bytes(data_dir + "f4_3.npy"));
    array<double> s = xt::zeros<double>(shape_t{});
    s() = 3.25;
    npy::save(dir / "c.npy", s);
    CHECK(read_bytes(dir / "c.npy") == read_bytes(data_dir + "f8_scalar.npy"));
    npy::save(dir / "d.npy", array<float>(xt::zeros<float>(shape_t{0, 4})));
    CHECK(read_bytes(dir / "d.npy") == read_bytes(data_dir + "f4_0x4.npy"));
    npy::save_bool(dir / "e.npy", mask_t{{true, false, true}, {false, false, true}});
    CHECK(read_bytes(dir / "e.npy") == read_bytes(data_dir + "b1_2x3.npy"));
}

TEST_CASE("npy accepts header variations NumPy's reader accepts")
{
    temp_dir dir;
    const std::string data(6 * 8, '\0');
    const std::string variants[] = {
        "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (2, 3)}",  // double quotes
        "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f8'}",          // any key order
        "{'descr':'<f8','fortran_order':False,'shape':(2,3,)}",               // tight, trailing comma
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 3L), }",      // Python 2 longs
    };
    for (const std::string& dict : variants)
    {
        CAPTURE(dict);
        write_bytes(dir / "v.npy", npy_file(dict, data));
        CHECK(to_shape(npy::load_float<double>(dir / "v.npy").shape()) == shape_t{2, 3});
    }
    write_bytes(dir / "v2.npy", npy_file(f8_dict("(2, 3)"), data, 2));
    CHECK(to_shape(npy::load_float<double>(dir / "v2.npy").shape()) == shape_t{2, 3});
    write_bytes(dir / "one.npy", npy_file(f8_dict("(3,)"), std::string(24, '\0')));
    CHECK(to_shape(npy::load_float<double>(dir / "one.npy").shape()) == shape_t{3});
}

TEST_CASE("npy rejects every class of bad file with an error naming it")
{
    temp_dir dir;
    const std::string good = npy_file(f8_dict("(2, 3)"), std::string(48, '\0'));
    auto bad = [&](const std::string& name, const std::string& bytes, const std::string& needle) {
        write_bytes(dir / name, bytes);
        check_rejected(dir / name, needle);
    };

    SUBCASE("missing, unreadable or not a file")
    {
        check_rejected(dir / "nope.npy", "cannot open (No such file or directory)");
        check_rejected(dir.path.string(), "is a directory");
        bad("empty.npy", "", "too short");
        const std::string fifo = dir / "fifo.npy";
        REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
        check_rejected(fifo, "is not a regular file");  // and does not block waiting for a writer
    }
    SUBCASE("truncated or oversized data")
    {
        bad("short.npy", good.substr(0, good.size() - 1),
            "truncated: shape (2, 3) of <f8 needs 48 data bytes, the file has 47");
        bad("no_data.npy", npy_file(f8_dict("(2, 3)"), ""), "truncated");
        bad("long.npy", good + "x", "oversized: shape (2, 3) of <f8 needs 48 data bytes, the file has 49");
        bad("scalar_empty.npy", npy_file(f8_dict("()"), ""), "truncated");
        bad("overflow.npy", npy_file(f8_dict("(4294967296, 4294967296)"), ""), "too large");
        bad("overflow_bytes.npy", npy_file(f8_dict("(2305843009213693952,)"), ""), "too large");
        std::string dims = "(";
        for (int k = 0; k < 65; ++k)
        {
            dims += "1, ";
        }
        bad("dims.npy", npy_file(f8_dict(dims + ")"), std::string(8, '\0')),
            "shape has 65 dimensions, more than the 64 NumPy allows");
    }
    SUBCASE("bad magic, version, header length")
    {
        std::string m = good;
        m[1] = 'X';
        bad("magic.npy", m, "bad magic string");
        bad("text.npy", "hello world, this is not numpy", "bad magic string");
        std::string v = good;
        v[6] = 4;
        bad("version.npy", v, "unsupported .npy format version 4.0");
        std::string past = good;
        past[8] = '\xff';
        past[9] = '\x7f';
        bad("past_eof.npy", past, "header length 32767 runs past the end of the file");
        bad("cut_in_length.npy", good.substr(0, 9), "header length field");
        bad("cut_in_header.npy", good.substr(0, 40), "runs past the end of the file");
    }
    SUBCASE("malformed header dict")
    {
        const std::string data(48, '\0');
        bad("list.npy", npy_file("['descr', '<f8']", data), "malformed header");
        bad("unterminated.npy", npy_file("{'descr': '<f8, 'fortran_order': False, 'shape': (2, 3)}", data),
            "malformed header");
        bad("no_close.npy", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)", data),
            "malformed header");
        bad("missing_key.npy", npy_file("{'descr': '<f8', 'shape': (2, 3)}", data), "no 'fortran_order' key");
        bad("extra_key.npy",
            npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", data),
            "unexpected key 'x'");
        bad("dup_key.npy",
            npy_file("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)}", data),
            "appears twice");
        bad("shape_list.npy", npy_file(f8_dict("[2, 3]"), data), "'shape' must be a tuple");
        bad("shape_int.npy", npy_file(f8_dict("6"), data), "'shape' must be a tuple");
        bad("shape_neg.npy", npy_file(f8_dict("(-2, -3)"), data), "non-negative");
        bad("shape_float.npy", npy_file(f8_dict("(2.0, 3)"), data), "non-negative integers");
        bad("fortran_str.npy", npy_file("{'descr': '<f8', 'fortran_order': 'no', 'shape': (2, 3)}", data),
            "'fortran_order' must be True or False");
        bad("trailing.npy", npy_file(f8_dict("(2, 3)") + " junk", data), "unexpected text after the dict");
        bad("nul.npy",
            npy_file(std::string("{'descr': '<f8'\0", 16) + ", 'fortran_order': False, 'shape': (2, 3)}",
                     data),
            "NUL");
        bad("deep.npy",
            npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': " + std::string(100, '(') + "}",
                     data),
            "malformed header");
    }
    SUBCASE("Fortran order, byte order and dtype (files written by NumPy)")
    {
        check_rejected(data_dir + "f8_fortran.npy", "Fortran-order arrays are not supported");
        check_rejected(data_dir + "f8_big_endian.npy",
                       "dtype '>f8' is big-endian; a little-endian float array is needed");
        check_rejected(data_dir + "i8_2x3.npy",
                       "dtype '<i8' (int64) is not supported; a float array is needed");
        check_rejected(data_dir + "b1_2x3.npy",
                       "dtype '|b1' (bool) is not supported; a float array is needed");
        check_rejected(data_dir + "f8_2x3.npy",
                       "dtype '<f8' (float64) is not supported; a bool array ('|b1') is needed", true);
        check_rejected(data_dir + "i8_2x3.npy", "a bool array ('|b1') is needed", true);
        const std::string data(48, '\0');
        bad("f2.npy", npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3)}", data),
            "dtype '<f2' (float16) is not supported");
        bad("structured.npy",
            npy_file("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2, 3)}", data),
            "structured dtypes are not supported; a float array is needed");
        bad("descr_int.npy", npy_file("{'descr': 8, 'fortran_order': False, 'shape': (2, 3)}", data),
            "'descr' must be a dtype string");
    }
    SUBCASE("bool data that is not 0 or 1")
    {
        write_bytes(dir / "b.npy", npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (3,)}",
                                            std::string("\1\0\2", 3)));
        check_rejected(dir / "b.npy", "corrupt bool data", true);
    }
}

TEST_CASE("npy save reports a file it cannot write")
{
    temp_dir dir;
    const std::string path = dir / "missing_dir/a.npy";
    try
    {
        npy::save(path, array<double>{1.0});
        FAIL("no error");
    }
    catch (const npy::error& e)
    {
        CHECK(std::string(e.what()) == path + ": cannot write (No such file or directory)");
    }
}

TEST_CASE("npy integer ids: int64 and int32 round trips, NumPy's layout, and the dtypes refused")
{
    temp_dir dir;
    const ids_t ids{{0, 5, -1}, {2147483647, -2147483648LL, 7}};
    for (const auto width : {npy::int_width::int64, npy::int_width::int32})
    {
        const std::string path = dir / "ids.npy";
        npy::save_ids(path, ids, width);
        CHECK(npy::load_ids(path) == ids);
        const std::string bytes = read_bytes(path);
        const bool wide = width == npy::int_width::int64;
        CHECK(bytes.find(wide ? "'descr': '<i8'" : "'descr': '<i4'") != std::string::npos);
        CHECK(bytes.size() == 128 + ids.size() * (wide ? 8 : 4));
        CHECK(bytes.substr(128 + (wide ? 8 : 4), 4) == std::string("\x05\x00\x00\x00", 4));  // ids(0, 1) = 5, LE
    }

    // A file laid out by hand: int32 (2, 2) of 1, -2, 3, 4.
    const std::string i4 = std::string("\x01\x00\x00\x00\xfe\xff\xff\xff\x03\x00\x00\x00\x04\x00\x00\x00", 16);
    const std::string path = dir / "hand.npy";
    write_bytes(path, npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", i4));
    CHECK(npy::load_ids(path) == ids_t{{1, -2}, {3, 4}});

    CHECK_THROWS_AS(npy::save_ids(dir / "big.npy", ids_t{1LL << 40}, npy::int_width::int32), npy::error);

    const auto message_of = [](const std::function<void()>& f) -> std::string {
        try
        {
            f();
        }
        catch (const npy::error& e)
        {
            return e.what();
        }
        return "(no error)";
    };
    npy::save(dir / "f.npy", array<double>{1.0, 2.0});
    CHECK(message_of([&] { npy::load_ids(dir / "f.npy"); }) ==
          dir / "f.npy" + ": dtype '<f8' (float64) is not supported; an integer array is needed (int64 '<i8' or int32 '<i4')");
    CHECK(message_of([&] { npy::load_float<double>(path); }) ==
          path + ": dtype '<i4' (int32) is not supported; a float array is needed (float64 '<f8' or float32 '<f4')");
    write_bytes(path, npy_file("{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0')));
    CHECK(message_of([&] { npy::load_ids(path); }) ==
          path + ": dtype '>i8' is big-endian; a little-endian integer array is needed (in NumPy: a.astype('<i8'))");
    write_bytes(path, npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }", std::string(1, '\0')));
    CHECK(message_of([&] { npy::load_ids(path); }).find("dtype '|u1' (uint8) is not supported; an integer array") !=
          std::string::npos);
    npy::save_bool(dir / "b.npy", mask_t{true});
    CHECK(message_of([&] { npy::load_ids(dir / "b.npy"); }).find("(bool) is not supported; an integer array") !=
          std::string::npos);
}
}  // namespace test_npy
