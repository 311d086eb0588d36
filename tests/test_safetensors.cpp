// io/safetensors and io/checkpoint: round trips, files laid out by hand from the format's description
// (so the reader is not judged by the writer alone), every strict-reading error on hand-crafted bytes,
// the atomic writer under failure, and GPT checkpoints with every validation error.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.hpp"
#include "io/checkpoint_limits.hpp"
#include "io/safetensors.hpp"
#include "test_util.hpp"

namespace test_safetensors
{
using namespace xgrad;
using xgrad::test::read_bytes;
using xgrad::test::temp_dir;
using xgrad::test::write_bytes;
namespace fs = std::filesystem;

namespace
{
std::string u64_le(std::uint64_t n)
{
    std::string s;
    for (int k = 0; k < 8; ++k)
    {
        s += static_cast<char>((n >> (8 * k)) & 0xff);
    }
    return s;
}

// A safetensors file as the format describes it: the header's length, the header, the data.
std::string st_file(const std::string& header, const std::string& data)
{
    return u64_le(header.size()) + header + data;
}

template <class S>
std::string le_bytes(const std::vector<S>& values)
{
    std::string s(values.size() * sizeof(S), '\0');
    std::memcpy(s.data(), values.data(), s.size());  // the test host is little-endian, as the format
    return s;
}

// Reading `path` throws format_error: one line, "<path>: ...", containing `needle`.
void check_rejected(const std::string& path, const std::string& needle,
                    io::accepted_dtypes accepted = io::accepted_dtypes::f32_and_f64)
{
    try
    {
        io::read_safetensors(path, accepted);
        FAIL("no error for " << path << " (expected '" << needle << "')");
    }
    catch (const io::format_error& e)
    {
        const std::string message = e.what();
        INFO(message);
        CHECK(message.rfind(path + ": ", 0) == 0);
        CHECK(message.find(needle) != std::string::npos);
        CHECK(message.find('\n') == std::string::npos);
        CHECK(std::all_of(message.begin(), message.end(),
                          [](char c) {
                              return static_cast<unsigned char>(c) >= 0x20 &&
                                     static_cast<unsigned char>(c) < 0x7f;
                          }));
    }
}

// A valid one-tensor header with `entry` as the tensor's JSON; data of 16 bytes (two F64).
std::string with_entry(const std::string& entry)
{
    return "{\"t\":" + entry + "}";
}

std::vector<std::string> directory_listing(const fs::path& dir)
{
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
    {
        names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
}

// The message of the E that f throws, or "(no exception)".
template <class E, class F>
std::string error_of(F&& f)
{
    try
    {
        f();
    }
    catch (const E& e)
    {
        return e.what();
    }
    return "(no exception)";
}

// The same value: equal with the same sign (so -0.0 is not 0.0), or both NaN.
bool same_value(double a, double b)
{
    return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

bool starts_with(const std::string& s, const std::string& prefix)
{
    return s.rfind(prefix, 0) == 0;
}

io::safetensors_file sample_file()
{
    io::safetensors_file f;
    f.metadata = {{"format", "pt"}, {"note", "two tensors"}};
    f.tensors["b.weight"] = {"F64", test::random_array({2, 3}, 1)};
    f.tensors["a.scale"] = {"F32", test::random_array({4}, 2)};
    return f;
}
}  // namespace

// ---- reading and writing ----------------------------------------------------------------------------

TEST_CASE("safetensors round trip: F64 exact, F32 narrowed, metadata kept, scalars and empty tensors")
{
    temp_dir dir;
    io::safetensors_file f;
    f.metadata = {{"vocab", "[10, 32, 33]"}, {"unicode", "\xc3\xa9t\xc3\xa9"}, {"", "empty key"}};
    f.tensors["f64"] = {"F64", test::random_array({2, 3, 4}, 1)};
    f.tensors["f32"] = {"F32", test::random_array({5, 1}, 2)};
    f.tensors["scalar"] = {"F64", array<double>(xt::xarray<double>(3.25))};
    f.tensors["empty"] = {"F32", array<double>::from_shape({0, 3})};
    f.tensors["inf_nan"] = {"F64", array<double>{std::numeric_limits<double>::infinity(), -0.0,
                                                 std::numeric_limits<double>::quiet_NaN()}};
    const std::string path = dir / "model.safetensors";
    io::write_safetensors(path, f);
    const io::safetensors_file g = io::read_safetensors(path);

    CHECK(g.metadata == f.metadata);
    REQUIRE(g.tensors.size() == f.tensors.size());
    for (const auto& [name, t] : f.tensors)
    {
        CAPTURE(name);
        const io::stored_tensor& u = g.tensors.at(name);
        CHECK(u.dtype == t.dtype);
        REQUIRE(test::shapes_equal(u.values, t.values));
        for (std::size_t k = 0; k < t.values.size(); ++k)
        {
            const double want =
              t.dtype == "F32" ? static_cast<double>(static_cast<float>(t.values.flat(k))) : t.values.flat(k);
            CHECK((u.values.flat(k) == want || (std::isnan(want) && std::isnan(u.values.flat(k)))));
        }
    }
    CHECK(std::signbit(g.tensors.at("inf_nan").values.flat(1)));
    CHECK(g.tensors.at("scalar").values.dimension() == 0);
}

TEST_CASE(
  "safetensors layout: 8-byte little-endian length, JSON padded with spaces to 8 bytes, C-order LE data")
{
    temp_dir dir;
    io::safetensors_file f;
    f.metadata = {{"k", "v"}};
    f.tensors["x"] = {"F32", array<double>{{1.0, -2.0}, {0.5, 3.0}}};
    f.tensors["y"] = {"F64", array<double>{1.0}};
    const std::string path = dir / "f.safetensors";
    io::write_safetensors(path, f);

    const std::string bytes = read_bytes(path);
    REQUIRE(bytes.size() >= 8);
    std::uint64_t n = 0;
    for (int k = 7; k >= 0; --k)
    {
        n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(k)]);
    }
    CHECK(n % 8 == 0);
    REQUIRE(8 + n + 16 + 8 == bytes.size());
    const std::string header = bytes.substr(8, n);
    CHECK(header.front() == '{');
    CHECK(header.find_last_not_of(' ') + 1 > header.size() - 8);  // at most 7 spaces of padding
    const nlohmann::json j = nlohmann::json::parse(header);
    CHECK(j.at("__metadata__") == nlohmann::json({{"k", "v"}}));
    CHECK(j.at("x").at("dtype") == "F32");
    CHECK(j.at("x").at("shape") == nlohmann::json({2, 2}));
    CHECK(j.at("y").at("shape") == nlohmann::json({1}));
    const auto xr = j.at("x").at("data_offsets").get<std::vector<std::uint64_t>>();
    const auto yr = j.at("y").at("data_offsets").get<std::vector<std::uint64_t>>();
    REQUIRE(xr.size() == 2);
    REQUIRE(yr.size() == 2);
    CHECK(xr[1] - xr[0] == 16);
    CHECK(yr[1] - yr[0] == 8);
    const std::string data = bytes.substr(8 + n);
    CHECK(data.substr(xr[0], 16) == le_bytes<float>({1.0f, -2.0f, 0.5f, 3.0f}));
    CHECK(data.substr(yr[0], 8) == std::string("\x00\x00\x00\x00\x00\x00\xf0\x3f", 8));  // 1.0 as <f8
}

TEST_CASE("safetensors reads a file laid out by hand, in any tensor order, with padding and no metadata")
{
    temp_dir dir;
    const std::string path = dir / "hand.safetensors";
    // "b" comes first in the buffer although "a" is first in the header; an empty tensor sits between.
    const std::string header = R"({"a": {"dtype": "F64", "shape": [1, 2], "data_offsets": [8, 24]},
        "e": {"dtype": "F32", "shape": [2, 0], "data_offsets": [8, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}   )";
    write_bytes(path, st_file(header, le_bytes<float>({1.5f, -4.0f}) + le_bytes<double>({0.1, 1e300})));
    const io::safetensors_file f = io::read_safetensors(path);
    CHECK(f.metadata.empty());
    REQUIRE(f.tensors.size() == 3);
    CHECK(f.tensors.at("a").dtype == "F64");
    CHECK(to_shape(f.tensors.at("a").values.shape()) == shape_t{1, 2});
    CHECK(f.tensors.at("a").values(0, 0) == 0.1);
    CHECK(f.tensors.at("a").values(0, 1) == 1e300);
    CHECK(f.tensors.at("b").dtype == "F32");
    CHECK(f.tensors.at("b").values(0) == 1.5);
    CHECK(f.tensors.at("b").values(1) == -4.0);
    CHECK(to_shape(f.tensors.at("e").values.shape()) == shape_t{2, 0});

    // An empty file of tensors: just "{}" padded, no data.
    write_bytes(path, st_file("{}      ", ""));
    CHECK(io::read_safetensors(path).tensors.empty());
}

TEST_CASE("safetensors strict reading: every malformed file names the file and the problem")
{
    temp_dir dir;
    const std::string two_f64 = le_bytes<double>({1.0, 2.0});
    const std::string ok_entry = R"({"dtype":"F64","shape":[2],"data_offsets":[0,16]})";
    std::string sixty_four_ones = "1";
    for (int k = 1; k < 64; ++k)
    {
        sixty_four_ones += ",1";
    }
    struct bad_file
    {
        std::string name, bytes, needle;
    };
    const std::vector<bad_file> cases = {
      {"empty file", "", "0 bytes, too short for the 8-byte header length"},
      {"short file", "abc", "3 bytes, too short"},
      {"header past the end", u64_le(100) + "{}",
       "header length 100 runs past the end of the file (10 bytes)"},
      {"huge header length", u64_le(0xfffffffffffffff0ull) + "{}",
       "header length 18446744073709551600 runs past the end of the file"},
      {"truncated JSON", st_file(R"({"t": {"dtype": "F64")", ""), "header is not valid JSON"},
      {"garbage header", st_file("\x01\xff not json", ""), "header is not valid JSON"},
      {"empty header", st_file("", ""), "header is not valid JSON"},
      {"bad UTF-8 in a name", st_file("{\"\xff\xfe\": 1}", ""), "header is not valid JSON"},
      {"header is a list", st_file("[1, 2]", ""), "header must be a JSON object, it is array"},
      {"header is a number", st_file("42", ""), "header must be a JSON object, it is number"},
      {"duplicate tensor", st_file("{\"t\":" + ok_entry + ",\"t\":" + ok_entry + "}", two_f64),
       "header JSON has the key 't' twice in one object"},
      {"deep nesting", st_file(std::string(40, '[') + std::string(40, ']'), ""), "nested more than"},
      {"entry not an object", st_file(with_entry("[1]"), two_f64), "tensor 't' must be an object"},
      {"no dtype", st_file(with_entry(R"({"shape":[2],"data_offsets":[0,16]})"), two_f64),
       "tensor 't' has no 'dtype'"},
      {"no shape", st_file(with_entry(R"({"dtype":"F64","data_offsets":[0,16]})"), two_f64),
       "tensor 't' has no 'shape'"},
      {"no offsets", st_file(with_entry(R"({"dtype":"F64","shape":[2]})"), two_f64),
       "tensor 't' has no 'data_offsets'"},
      {"unknown field",
       st_file(with_entry(R"({"dtype":"F64","shape":[2],"data_offsets":[0,16],"x":1})"), two_f64),
       "tensor 't' has an unknown field 'x'"},
      {"F16", st_file(with_entry(R"({"dtype":"F16","shape":[8],"data_offsets":[0,16]})"), two_f64),
       "tensor 't' has dtype 'F16'; only F32 and F64 are supported"},
      {"I64", st_file(with_entry(R"({"dtype":"I64","shape":[2],"data_offsets":[0,16]})"), two_f64),
       "dtype 'I64'; only F32 and F64"},
      {"dtype not a string",
       st_file(with_entry(R"({"dtype":64,"shape":[2],"data_offsets":[0,16]})"), two_f64),
       "dtype must be a string, it is number"},
      {"shape not a list", st_file(with_entry(R"({"dtype":"F64","shape":2,"data_offsets":[0,16]})"), two_f64),
       "shape must be a list of non-negative integers, it is number"},
      {"negative shape",
       st_file(with_entry(R"({"dtype":"F64","shape":[-2],"data_offsets":[0,16]})"), two_f64),
       "shape must hold non-negative integers, found a negative integer '-2'"},
      {"float shape", st_file(with_entry(R"({"dtype":"F64","shape":[2.0],"data_offsets":[0,16]})"), two_f64),
       "found a non-integer number '2.0'"},
      {"string shape", st_file(with_entry(R"({"dtype":"F64","shape":["2"],"data_offsets":[0,16]})"), two_f64),
       "found string"},
      {"shape too large for 64 bits",
       st_file(with_entry(R"({"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,16]})"),
               two_f64),
       "has shape (4294967296, 4294967296), too large (its byte size overflows)"},
      {"65 dimensions (a message would list them all)",
       st_file(with_entry(R"({"dtype":"F64","shape":[)" + sixty_four_ones + R"(,2],"data_offsets":[0,16]})"),
               two_f64),
       "tensor 't': shape has 65 dimensions, more than the 64 this reader accepts"},
      {"integer beyond 64 bits",
       st_file(with_entry(R"({"dtype":"F64","shape":[18446744073709551616],"data_offsets":[0,16]})"),
               two_f64),
       "found a non-integer number"},
      {"one offset", st_file(with_entry(R"({"dtype":"F64","shape":[2],"data_offsets":[16]})"), two_f64),
       "data_offsets must be a list [begin, end], it is '[16]'"},
      {"negative offset",
       st_file(with_entry(R"({"dtype":"F64","shape":[2],"data_offsets":[-16,0]})"), two_f64),
       "data_offsets must hold non-negative integers, found a negative integer"},
      {"end before begin",
       st_file(with_entry(R"({"dtype":"F64","shape":[0],"data_offsets":[16,0]})"), two_f64),
       "data_offsets [16, 0] with end before begin"},
      {"offsets outside the buffer",
       st_file(with_entry(R"({"dtype":"F64","shape":[2],"data_offsets":[8,24]})"), two_f64),
       "data_offsets [8, 24] outside the data buffer (16 bytes)"},
      {"wrong length for the shape",
       st_file(with_entry(R"({"dtype":"F64","shape":[3],"data_offsets":[0,16]})"), two_f64),
       "data_offsets [0, 16] (16 bytes) but shape (3) of F64 needs 24 bytes"},
      {"F32 length read as F64",
       st_file(with_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,16]})"), two_f64),
       "shape (2) of F32 needs 8 bytes"},
      {"overlapping tensors",
       st_file(
         R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"b":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}})",
         two_f64),
       "tensor 'b' data_offsets [8, 16] overlap tensor 'a' [0, 16]"},
      {"a hole in the buffer",
       st_file(
         R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"b":{"dtype":"F64","shape":[1],"data_offsets":[16,24]}})",
         two_f64 + two_f64.substr(0, 8)),
       "bytes [8, 16] of the data buffer belong to no tensor"},
      {"trailing bytes", st_file(with_entry(ok_entry), two_f64 + "XY"),
       "the data buffer has 18 bytes but the tensors cover 16 (trailing bytes"},
      {"data but no tensors", st_file("{}", "abc"), "the data buffer has 3 bytes but the tensors cover 0"},
      {"metadata not an object", st_file(R"({"__metadata__":["a"]})", ""),
       "'__metadata__' must be an object of strings, it is array"},
      {"metadata value a number", st_file(R"({"__metadata__":{"layers":2}})", ""),
       "metadata 'layers' must be a string, it is number"},
      {"metadata value null", st_file(R"({"__metadata__":{"a":null}})", ""),
       "metadata 'a' must be a string, it is null"},
      {"control bytes are escaped",
       st_file("{\"t\\u0001\\n\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[0,2]}}", "ab"),
       "tensor 't\\x01\\x0a' has dtype 'F16'"},
    };
    int k = 0;
    for (const bad_file& c : cases)
    {
        CAPTURE(c.name);
        const std::string path = dir / ("bad" + std::to_string(k++) + ".safetensors");
        write_bytes(path, c.bytes);
        check_rejected(path, c.needle);
    }

    SUBCASE("not a file")
    {
        check_rejected(dir / "missing.safetensors", "cannot open (No such file or directory)");
        check_rejected(dir.path.string(), "is a directory, not a safetensors file");
    }
    SUBCASE("a header longer than the limit is refused before it is read")
    {
        const std::string path = dir / "sparse.safetensors";
        write_bytes(path, u64_le(200'000'000));
        fs::resize_file(path, 200'000'100);  // sparse: the length fits in the file
        check_rejected(path, "header length 200000000 is over the limit of 100000000 bytes");
    }
}

// ---- half precision: Hugging Face's F16 and BF16 -----------------------------------------------------

TEST_CASE("accepted_dtypes::any_float widens F16 and BF16 exactly, read as float and as double")
{
    temp_dir dir;
    const std::string path = dir / "half.safetensors";
    const double inf = std::numeric_limits<double>::infinity();
    // Each value worked out from its bits. F16: sign, 5 exponent bits (bias 15), 10 fraction bits; an
    // exponent of 0 means fraction * 2^-24. BF16: the top half of a float32 (8 exponent bits, bias 127).
    const std::vector<std::uint16_t> f16 = {
      0x3c00,  // exponent 15, fraction 0: 1
      0xc000,  // negative, exponent 16: -2
      0x3555,  // exponent 13, fraction 0x155 = 341: (1 + 341/1024) * 2^-2 = 1365/4096
      0x7bff,  // the largest finite: exponent 30, fraction 1023: (2 - 2^-10) * 2^15 = 65504
      0x0400,  // the smallest normal: 2^-14
      0x0001,  // the smallest subnormal: 1 * 2^-24
      0x83ff,  // the largest subnormal, negative: -1023 * 2^-24
      0x8000,  // -0
      0x7c00,  // +infinity
      0xfc00,  // -infinity
      0x7e01,  // a NaN (exponent all ones, fraction not 0)
    };
    const std::vector<double> f16_values = {1.0,     -2.0,    1365.0 / 4096.0, 65504.0, 0x1p-14, 0x1p-24,
                                            -0x1.ff8p-15, -0.0, inf,             -inf,    std::nan("")};
    const std::vector<std::uint16_t> bf16 = {
      0x3f80,  // float32 0x3f800000: 1
      0xc0a0,  // 0xc0a00000: negative, exponent 129, fraction 0x20/128: -(1 + 1/4) * 2^2 = -5
      0x4049,  // 0x40490000: exponent 128, fraction 0x49 = 73: (1 + 73/128) * 2 = 201/64
      0x7f7f,  // the largest finite: exponent 254, fraction 127: (2 - 2^-7) * 2^127
      0x0080,  // the smallest normal: 2^-126
      0x0001,  // 0x00010000, a subnormal float32: 2^16 * 2^-149 = 2^-133
      0x8000,  // -0
      0x7f80,  // +infinity
      0xff80,  // -infinity
      0x7fc0,  // a NaN
    };
    const std::vector<double> bf16_values = {1.0, -5.0, 201.0 / 64.0, 0x1.fep127, 0x1p-126, 0x1p-133, -0.0, inf,
                                             -inf, std::nan("")};
    const std::string header = R"({"__metadata__":{"format":"pt"},)"
                               R"("h":{"dtype":"F16","shape":[11],"data_offsets":[0,22]},)"
                               R"("b":{"dtype":"BF16","shape":[2,5],"data_offsets":[22,42]}})";
    write_bytes(path, st_file(header, le_bytes(f16) + le_bytes(bf16)));

    const auto check_values = [](const auto& got, const std::vector<double>& want)
    {
        REQUIRE(got.size() == want.size());
        for (std::size_t k = 0; k < want.size(); ++k)
        {
            CAPTURE(k);
            CHECK(same_value(static_cast<double>(got.data()[k]), want[k]));
        }
    };
    const io::safetensors_file f = io::read_safetensors(path, io::accepted_dtypes::any_float);
    CHECK(f.metadata.at("format") == "pt");
    CHECK(f.tensors.at("h").dtype == "F16");
    CHECK(f.tensors.at("b").dtype == "BF16");
    CHECK(to_shape(f.tensors.at("b").values.shape()) == shape_t{2, 5});
    check_values(f.tensors.at("h").values, f16_values);
    check_values(f.tensors.at("b").values, bf16_values);

    const io::safetensors_reader reader(path, io::accepted_dtypes::any_float);
    CHECK(reader.tensors().at("h").dtype == "F16");
    check_values(reader.read<float>("h"), f16_values);
    check_values(reader.read<double>("h"), f16_values);
    check_values(reader.read<float>("b"), bf16_values);
    check_values(reader.read<double>("b"), bf16_values);
}

TEST_CASE("any_float reads every F16 and BF16 bit pattern, in order, through more than one chunk")
{
    // All 65536 patterns of each: the non-negative ones up to infinity increase strictly, each negative
    // pattern is its positive one negated, and every pattern above infinity is a NaN.
    temp_dir dir;
    const std::string path = dir / "all.safetensors";
    std::vector<std::uint16_t> patterns(65536);
    for (std::size_t k = 0; k < patterns.size(); ++k)
    {
        patterns[k] = static_cast<std::uint16_t>(k);
    }
    const std::string header = R"({"h":{"dtype":"F16","shape":[65536],"data_offsets":[0,131072]},)"
                               R"("b":{"dtype":"BF16","shape":[65536],"data_offsets":[131072,262144]}})";
    write_bytes(path, st_file(header, le_bytes(patterns) + le_bytes(patterns)));
    const io::safetensors_reader reader(path, io::accepted_dtypes::any_float);
    struct half_dtype
    {
        std::string tensor;
        std::size_t infinity;  // the pattern of +infinity
    };
    for (const half_dtype& d : {half_dtype{"h", 0x7c00}, half_dtype{"b", 0x7f80}})
    {
        CAPTURE(d.tensor);
        const array<double> v = reader.read<double>(d.tensor);
        const array<float> narrow = reader.read<float>(d.tensor);
        std::size_t increasing = 0, mirrored = 0, nans = 0, as_float = 0;
        for (std::size_t k = 0; k < 0x8000; ++k)
        {
            increasing += k == 0 || k > d.infinity || v(k) > v(k - 1);
            mirrored += same_value(v(k | 0x8000), -v(k));
            nans += k > d.infinity && std::isnan(v(k));
        }
        for (std::size_t k = 0; k < v.size(); ++k)
        {
            as_float += same_value(narrow(k), v(k));
        }
        CHECK(v(d.infinity) == std::numeric_limits<double>::infinity());
        CHECK(increasing == 0x8000);
        CHECK(mirrored == 0x8000);
        CHECK(nans == 0x7fff - d.infinity);
        CHECK(as_float == 65536);
    }
}

TEST_CASE("each mode refuses the dtypes it does not accept, naming those it does; any_float is as strict")
{
    temp_dir dir;
    const auto any_float = io::accepted_dtypes::any_float;
    const std::string two_f16 = le_bytes<std::uint16_t>({0x3c00, 0x4000});
    const std::string half_entry = R"({"dtype":"F16","shape":[2],"data_offsets":[0,4]})";
    struct bad_file
    {
        std::string name, bytes, needle;
        io::accepted_dtypes accepted;
    };
    const std::vector<bad_file> cases = {
      {"F16 in xgrad's mode", st_file(with_entry(half_entry), two_f16),
       "tensor 't' has dtype 'F16'; only F32 and F64 are supported", io::accepted_dtypes::f32_and_f64},
      {"BF16 in xgrad's mode", st_file(with_entry(R"({"dtype":"BF16","shape":[2],"data_offsets":[0,4]})"), two_f16),
       "tensor 't' has dtype 'BF16'; only F32 and F64 are supported", io::accepted_dtypes::f32_and_f64},
      {"I16", st_file(with_entry(R"({"dtype":"I16","shape":[2],"data_offsets":[0,4]})"), two_f16),
       "tensor 't' has dtype 'I16'; only F16, BF16, F32 and F64 are supported", any_float},
      {"a hole between tensors",
       st_file(R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},)"
               R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]}})",
               two_f16 + two_f16.substr(0, 2)),
       "bytes [2, 4] of the data buffer belong to no tensor", any_float},
      {"trailing bytes", st_file(with_entry(half_entry), two_f16 + "XY"),
       "the data buffer has 6 bytes but the tensors cover 4 (trailing bytes", any_float},
      {"wrong length for the shape",
       st_file(with_entry(R"({"dtype":"BF16","shape":[3],"data_offsets":[0,4]})"), two_f16),
       "data_offsets [0, 4] (4 bytes) but shape (3) of BF16 needs 6 bytes", any_float},
      {"unknown field",
       st_file(with_entry(R"({"dtype":"F16","shape":[2],"data_offsets":[0,4],"scale":2})"), two_f16),
       "tensor 't' has an unknown field 'scale'", any_float},
      {"duplicate tensor", st_file("{\"t\":" + half_entry + ",\"t\":" + half_entry + "}", two_f16),
       "header JSON has the key 't' twice in one object", any_float},
    };
    int k = 0;
    for (const bad_file& c : cases)
    {
        CAPTURE(c.name);
        const std::string path = dir / ("bad" + std::to_string(k++) + ".safetensors");
        write_bytes(path, c.bytes);
        check_rejected(path, c.needle, c.accepted);
    }
}

// ---- atomic writing ---------------------------------------------------------------------------------

TEST_CASE("write_safetensors is atomic: a failed write leaves the old file and no temporary behind")
{
    temp_dir dir;
    const std::string path = dir / "model.safetensors";
    io::write_safetensors(path, sample_file());
    const std::string old_bytes = read_bytes(path);
    const auto only_the_old_file = [&]
    {
        CHECK(read_bytes(path) == old_bytes);
        CHECK(directory_listing(dir.path) == std::vector<std::string>{"model.safetensors"});
    };

    SUBCASE("the write itself fails (file size limit: the disk is full)")
    {
        io::safetensors_file big;
        big.tensors["w"] = {"F64", test::random_array({100, 100}, 3)};  // 80 kB
        struct rlimit saved
        {
        };
        REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
        void (*previous)(int) = signal(SIGXFSZ, SIG_IGN);
        struct rlimit small = saved;
        small.rlim_cur = 4096;
        REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
        std::string message;
        try
        {
            io::write_safetensors(path, big);
        }
        catch (const std::runtime_error& e)
        {
            message = e.what();
        }
        setrlimit(RLIMIT_FSIZE, &saved);
        signal(SIGXFSZ, previous);
        INFO(message);
        CHECK(message.rfind(path + ": cannot write (", 0) == 0);
        only_the_old_file();
    }
    SUBCASE("the rename fails (a directory holds the final name)")
    {
        const std::string blocked = dir / "blocked.safetensors";
        fs::create_directory(blocked);
        fs::remove(path);
        CHECK(
          starts_with(error_of<std::runtime_error>([&] { io::write_safetensors(blocked, sample_file()); }),
                      blocked + ": cannot replace it ("));
        CHECK(fs::is_directory(blocked));
        CHECK(directory_listing(dir.path) == std::vector<std::string>{"blocked.safetensors"});
    }
    SUBCASE("the folder cannot take a temporary file")
    {
        const std::string inside_a_file = (fs::path(path) / "x.safetensors").string();
        CHECK(starts_with(
          error_of<std::runtime_error>([&] { io::write_safetensors(inside_a_file, sample_file()); }),
          inside_a_file + ": cannot create a temporary file beside it ("));
        only_the_old_file();
        if (geteuid() != 0)  // root writes into read-only folders, so this part needs an ordinary user
        {
            fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
            CHECK(
              starts_with(error_of<std::runtime_error>([&] { io::write_safetensors(path, sample_file()); }),
                          path + ": cannot create a temporary file beside it (Permission denied)"));
            fs::permissions(dir.path, fs::perms::owner_all);
            only_the_old_file();
        }
    }
    SUBCASE("what cannot be written is refused before the old file is touched")
    {
        io::safetensors_file f = sample_file();
        f.tensors["half"] = {"F16", array<double>{1.0}};
        CHECK_THROWS_WITH_AS(io::write_safetensors(path, f),
                             doctest::Contains("tensor 'half' has dtype 'F16'"), std::invalid_argument);
        f = sample_file();
        f.tensors["__metadata__"] = {"F32", array<double>{1.0}};
        CHECK_THROWS_AS(io::write_safetensors(path, f), std::invalid_argument);
        f = sample_file();
        f.metadata["bad"] = "\xff\xfe";
        CHECK_THROWS_WITH_AS(io::write_safetensors(path, f), doctest::Contains("not valid UTF-8"),
                             std::invalid_argument);
        only_the_old_file();
    }
    SUBCASE("a replaced file keeps its permissions; a new one is 0644")
    {
        fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
        io::write_safetensors(path, sample_file());
        CHECK(fs::status(path).permissions() ==
              (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
        const std::string fresh = dir / "fresh.safetensors";
        io::write_safetensors(fresh, sample_file());
        CHECK(fs::status(fresh).permissions() == (fs::perms::owner_read | fs::perms::owner_write |
                                                  fs::perms::group_read | fs::perms::others_read));
    }
}

// ---- checkpoints ------------------------------------------------------------------------------------

namespace
{
models::gpt_config small_config(std::size_t kv_heads = 1)
{
    models::gpt_config c;
    c.vocab_size = 7;
    c.block_size = 5;
    c.layers = 2;
    c.d_model = 8;
    c.heads = 4;
    c.kv_heads = kv_heads;
    return c;
}

// docs/spec.md's table for small_config(1): d = 8, G dh = 1 * 2 = 2.
std::map<std::string, shape_t> spec_shapes()
{
    std::map<std::string, shape_t> s{
      {"wte", {7, 8}}, {"wpe", {5, 8}}, {"ln_f.weight", {8}}, {"ln_f.bias", {8}}};
    for (const std::string b : {"blocks.0.", "blocks.1."})
    {
        s[b + "ln_1.weight"] = s[b + "ln_1.bias"] = s[b + "ln_2.weight"] = s[b + "ln_2.bias"] = {8};
        s[b + "attn.W_Q"] = s[b + "attn.W_O"] = {8, 8};
        s[b + "attn.W_K"] = s[b + "attn.W_V"] = {8, 2};
        s[b + "mlp.W_fc"] = {8, 32};
        s[b + "mlp.b_fc"] = {32};
        s[b + "mlp.W_proj"] = {32, 8};
        s[b + "mlp.b_proj"] = {8};
    }
    return s;
}

// Distinct values in every parameter, so that a swapped tensor would show.
template <class T>
models::gpt_parameters<T> sample_model(const models::gpt_config& c)
{
    models::gpt_parameters<T> p = models::gpt_parameters<T>::init(c, 5);
    unsigned seed = 100;
    for (parameter<T>& w : p.named_parameters())
    {
        w.value() = test::normal_array<T>(to_shape(w.value().shape()), seed++);
    }
    return p;
}

// Loading `path` throws format_error, one line, "<path>: ...", mentioning every needle.
template <class T = double>
void check_load_rejected(const std::string& path, const std::vector<std::string>& needles)
{
    try
    {
        io::load_checkpoint<T>(path);
        FAIL("no error for " << path);
    }
    catch (const io::format_error& e)
    {
        const std::string message = e.what();
        INFO(message);
        CHECK(message.rfind(path + ": ", 0) == 0);
        CHECK(message.find('\n') == std::string::npos);
        for (const std::string& needle : needles)
        {
            CHECK(message.find(needle) != std::string::npos);
        }
    }
}
}  // namespace

TEST_CASE("checkpoint round trip: every parameter under docs/spec.md's name and shape, sizes and extras kept")
{
    temp_dir dir;
    const models::gpt_config c = small_config(1);
    const auto model = sample_model<double>(c);
    io::checkpoint_extras extras;
    extras.metadata = {{"vocab", "[10, 32, 33, 97, 98, 99, 100]"}, {"step", "60"}, {"heads", "4"}};
    extras.tensors["optim.m.wte"] = {"F32", test::random_array({7, 8}, 9)};
    extras.tensors["optim.step"] = {"F64", array<double>(xt::xarray<double>(60.0))};
    const std::string path = dir / "model.safetensors";
    io::save_checkpoint(path, model, extras);

    // The file as any safetensors reader sees it: docs/spec.md's names, shapes, F64 for double, decimal sizes.
    const io::safetensors_file raw = io::read_safetensors(path);
    CHECK(raw.metadata == std::map<std::string, std::string>{{"vocab_size", "7"},
                                                             {"block_size", "5"},
                                                             {"layers", "2"},
                                                             {"d_model", "8"},
                                                             {"heads", "4"},
                                                             {"kv_heads", "1"},
                                                             {"vocab", "[10, 32, 33, 97, 98, 99, 100]"},
                                                             {"step", "60"}});
    const auto want = spec_shapes();
    CHECK(raw.tensors.size() == want.size() + 2);
    for (const auto& [name, shape] : want)
    {
        CAPTURE(name);
        REQUIRE(raw.tensors.count(name));
        CHECK(raw.tensors.at(name).dtype == "F64");
        CHECK(to_shape(raw.tensors.at(name).values.shape()) == shape);
    }

    const io::checkpoint<double> loaded = io::load_checkpoint<double>(path);
    CHECK(loaded.params.config.vocab_size == 7);
    CHECK(loaded.params.config.block_size == 5);
    CHECK(loaded.params.config.layers == 2);
    CHECK(loaded.params.config.d_model == 8);
    CHECK(loaded.params.config.heads == 4);
    CHECK(loaded.params.config.kv_head_count() == 1);
    CHECK(loaded.metadata == raw.metadata);
    REQUIRE(loaded.optimiser.size() == 2);
    CHECK(loaded.optimiser.at("optim.m.wte").dtype == "F32");
    CHECK(loaded.optimiser.at("optim.step").values() == 60.0);
    const auto a = model.named_parameters();
    const auto b = loaded.params.named_parameters();
    REQUIRE(a.size() == b.size());
    for (std::size_t k = 0; k < a.size(); ++k)
    {
        CAPTURE(a[k].name());
        CHECK(b[k].name() == a[k].name());
        CHECK(b[k].value() == a[k].value());  // exact: F64 both ways
        CHECK(test::max_abs(b[k].grad()) == 0.0);
        CHECK(test::shapes_equal(b[k].grad(), b[k].value()));
    }
}

TEST_CASE("checkpoint dtypes: float saves F32, and either dtype loads as float or double")
{
    temp_dir dir;
    const models::gpt_config c = small_config(2);
    const auto model32 = sample_model<float>(c);
    const std::string path32 = dir / "f32.safetensors";
    io::save_checkpoint(path32, model32);
    CHECK(io::read_safetensors(path32).tensors.at("blocks.1.attn.W_K").dtype == "F32");
    CHECK(io::read_safetensors(path32).metadata.at("kv_heads") == "2");

    const auto as64 = io::load_checkpoint<double>(path32);
    const auto as32 = io::load_checkpoint<float>(path32);
    const auto w = model32.named_parameters();
    const auto w64 = as64.params.named_parameters();
    const auto w32 = as32.params.named_parameters();
    for (std::size_t k = 0; k < w.size(); ++k)
    {
        CAPTURE(w[k].name());
        CHECK(w32[k].value() == w[k].value());
        CHECK(w64[k].value() == xt::cast<double>(w[k].value()));
    }

    const auto model64 = sample_model<double>(c);
    const std::string path64 = dir / "f64.safetensors";
    io::save_checkpoint(path64, model64);
    const auto narrowed = io::load_checkpoint<float>(path64).params.named_parameters();
    const auto source = model64.named_parameters();
    for (std::size_t k = 0; k < source.size(); ++k)
    {
        CHECK(narrowed[k].value() == xt::cast<float>(source[k].value()));
    }
}

TEST_CASE("save_checkpoint refuses extras it could not load back")
{
    temp_dir dir;
    const auto model = sample_model<double>(small_config());
    const std::string path = dir / "m.safetensors";
    io::checkpoint_extras extras;
    extras.tensors["adam.m.wte"] = {"F64", test::random_array({7, 8}, 1)};
    CHECK_THROWS_WITH_AS(
      io::save_checkpoint(path, model, extras),
      doctest::Contains("save_checkpoint: extra tensor 'adam.m.wte' must be optimiser state"),
      std::invalid_argument);
    extras.tensors.clear();
    extras.metadata["layers"] = "3";
    CHECK_THROWS_WITH_AS(io::save_checkpoint(path, model, extras),
                         doctest::Contains("extra metadata 'layers' = '3' disagrees with the model's 2"),
                         std::invalid_argument);
    CHECK_FALSE(fs::exists(path));
}

TEST_CASE("load_checkpoint: every validation error names the file, the key or tensor, and the shapes")
{
    temp_dir dir;
    const std::string good = dir / "good.safetensors";
    io::save_checkpoint(good, sample_model<double>(small_config(1)));
    const io::safetensors_file base = io::read_safetensors(good);
    int k = 0;
    // Writes `base` changed by `edit` and checks that loading it fails with every needle.
    const auto rejected =
      [&](const std::function<void(io::safetensors_file&)>& edit, const std::vector<std::string>& needles)
    {
        io::safetensors_file f = base;
        edit(f);
        const std::string path = dir / ("bad" + std::to_string(k++) + ".safetensors");
        io::write_safetensors(path, f);
        check_load_rejected<double>(path, needles);
        check_load_rejected<float>(path, needles);
    };

    SUBCASE("metadata")
    {
        for (const std::string& key : models::size_keys())
        {
            CAPTURE(key);
            rejected([&](io::safetensors_file& f) { f.metadata.erase(key); },
                     {std::string("metadata has no '") + key + "'"});
        }
        for (const char* text : {"", "two", "-1", "+2", " 2", "2 ", "2.0", "0x10", "1e2"})
        {
            CAPTURE(text);
            rejected([&](io::safetensors_file& f) { f.metadata["layers"] = text; },
                     {"metadata 'layers' = '", "' is not a positive decimal integer"});
        }
        rejected([](io::safetensors_file& f) { f.metadata["d_model"] = "99999999999999999999999"; },
                 {"metadata 'd_model' = '99999999999999999999999' is not a positive decimal integer"});
        rejected([](io::safetensors_file& f) { f.metadata["layers"] = "\x01"; },
                 {"metadata 'layers' = '\\x01' is not"});
        rejected([](io::safetensors_file& f) { f.metadata["kv_heads"] = "0"; },
                 {"metadata 'kv_heads' = '0' is not a positive decimal integer"});
        rejected([](io::safetensors_file& f) { f.metadata["heads"] = "3"; },
                 {"the metadata's sizes (vocab_size = 7, block_size = 5, layers = 2, d_model = 8, heads = 3, "
                  "kv_heads = 1) do not make a model"});
        rejected([](io::safetensors_file& f) { f.metadata["kv_heads"] = "3"; },
                 {"heads = 4, kv_heads = 3) do not make a model"});
        rejected([](io::safetensors_file& f) { f.metadata["vocab_size"] = "0"; },
                 {"metadata 'vocab_size' = '0' is not a positive decimal integer"});
    }
    SUBCASE("tensors")
    {
        rejected([](io::safetensors_file& f) { f.tensors.erase("blocks.1.mlp.b_fc"); },
                 {"tensor 'blocks.1.mlp.b_fc' is missing", "layers = 2"});
        rejected([](io::safetensors_file& f) { f.tensors.erase("ln_f.bias"); },
                 {"tensor 'ln_f.bias' is missing"});
        // Tensor `name` replaced by (or added as) seeded F64 values of `shape`, as the file's own are F64.
        const auto with_tensor = [&](const std::string& name, const shape_t& shape,
                                     const std::vector<std::string>& needles)
        {
            rejected([&](io::safetensors_file& f) { f.tensors[name] = {"F64", test::random_array(shape, 1)}; },
                     needles);
        };
        with_tensor("blocks.0.attn.W_K", {8, 8},
                    {"tensor 'blocks.0.attn.W_K' has shape (8, 8), expected (d, G*dh) = (8, 2)", "heads = 4",
                     "kv_heads = 1"});
        with_tensor("wte", {8, 7}, {"tensor 'wte' has shape (8, 7), expected (V, d) = (7, 8)"});
        with_tensor("wpe", {4, 8}, {"tensor 'wpe' has shape (4, 8), expected (block_size, d) = (5, 8)"});
        with_tensor("blocks.1.mlp.W_fc", {8, 8}, {"expected (d, 4d) = (8, 32)"});
        with_tensor("ln_f.weight", {1, 8}, {"tensor 'ln_f.weight' has shape (1, 8), expected (d) = (8)"});
        with_tensor("head", {7, 8},
                    {"unknown tensor 'head' with shape (7, 8)", "optimiser state must be named 'optim.*'"});
        with_tensor("blocks.2.ln_1.weight", {8}, {"unknown tensor 'blocks.2.ln_1.weight'", "layers = 2"});
        rejected([](io::safetensors_file& f) { f.metadata["layers"] = "3"; },
                 {"tensor 'blocks.2.ln_1.weight' is missing"});
        rejected([](io::safetensors_file& f) { f.metadata["layers"] = "1"; }, {"unknown tensor 'blocks.1."});
    }
    SUBCASE("the file itself")
    {
        check_load_rejected(dir / "none.safetensors", {"cannot open"});
        const std::string truncated = dir / "truncated.safetensors";
        std::string bytes = read_bytes(good);
        bytes.resize(bytes.size() - 3);
        write_bytes(truncated, bytes);
        check_load_rejected(truncated, {"outside the data buffer"});
    }
}

// ---- metadata claims against the file (io/checkpoint_limits.hpp) -----------------------------------------

namespace
{
// The process's virtual memory (VmSize), in bytes.
std::size_t virtual_bytes()
{
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
    {
        if (line.rfind("VmSize:", 0) == 0)
        {
            return std::stoull(line.substr(7)) * 1024;
        }
    }
    return 0;
}

// Runs `load` in a child process that may map at most `extra_bytes` more than it already has; true when
// the child ended normally. A loader that allocated by the metadata's claims would die of
// std::bad_alloc there.
bool loads_within(std::size_t extra_bytes, const std::function<void()>& load)
{
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0)
    {
        const rlim_t limit = virtual_bytes() + extra_bytes;
        struct rlimit cap
        {
            limit, limit
        };
        setrlimit(RLIMIT_AS, &cap);
        try
        {
            load();
        }
        catch (const io::format_error&)
        {
            _exit(0);
        }
        catch (...)
        {
            _exit(1);
        }
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
}  // namespace

TEST_CASE("load_checkpoint refuses metadata that claims far more than the file holds, before allocating")
{
    temp_dir dir;
    const std::string good = dir / "good.safetensors";
    io::save_checkpoint(good, sample_model<float>(small_config(1)));
    const io::safetensors_file base = io::read_safetensors(good);
    int k = 0;
    const auto claim = [&](const std::map<std::string, std::string>& changes,
                           const std::vector<std::string>& needles)
    {
        io::safetensors_file f = base;
        for (const auto& [key, value] : changes)
        {
            f.metadata[key] = value;
        }
        const std::string path = dir / ("claim" + std::to_string(k++) + ".safetensors");
        io::write_safetensors(path, f);
        check_load_rejected<float>(path, needles);
        CHECK(loads_within(std::size_t(512) << 20, [&] { io::load_checkpoint<float>(path); }));
    };

    // small_config: 2 layers, 12 tensors each, plus wte, wpe, ln_f.weight, ln_f.bias: 28 in the file.
    claim({{"layers", "4000000000"}},
          {"metadata says layers = 4000000000, which needs 48000000004 tensors; the file holds 28"});
    claim({{"layers", "18446744073709551615"}},
          {"layers = 18446744073709551615, which needs over 18446744073709551615"});
    // A thousand layers of swiglu with every bias: 18 tensors each; wte, wpe, ln_f's two and lm_head.
    claim({{"layers", "1000"}, {"mlp", "swiglu"}, {"bias", "all"}, {"tied_head", "false"}},
          {"which needs 18005 tensors; the file holds 28"});
    // vocab_size x d_model = 4e9 x 8 values in wte alone, where the file holds the model's 1,600.
    claim({{"vocab_size", "4000000000"}},
          {"metadata says vocab_size = 4000000000, block_size = 5, layers = 2, d_model = 8",
           "the model needs 32000001544 parameter values (wte (V, d) alone 32000000000); the file's parameter "
           "tensors hold 1600"});
    claim({{"block_size", "100000000"}},
          {"block_size = 100000000, layers = 2, d_model = 8", "wpe (block_size, d) alone"});
    claim({{"d_model", "4611686018427387904"}, {"heads", "1"}, {"kv_heads", "1"}},
          {"d_model = 4611686018427387904", "needs over 18446744073709551615"});
    claim({{"mlp_hidden", "1000000000"}}, {"layers = 2, d_model = 8", "mlp_hidden = 1000000000",
                                          "the blocks (layers x block) alone"});
    // One tensor more than the file (lm_head) is no refusal by count, but its values are.
    claim({{"vocab_size", "4000000000"}, {"tied_head", "false"}},
          {"lm_head (d, V) alone 32000000000"});

    // A small gap is the loader's to name: it says which tensor is missing.
    io::safetensors_file f = base;
    f.metadata["layers"] = "3";
    io::write_safetensors(dir / "three.safetensors", f);
    check_load_rejected<float>(dir / "three.safetensors", {"tensor 'blocks.2.ln_1.weight' is missing"});
}

TEST_CASE("checkpoint_demand_of counts the tensors of docs/spec.md for every variant")
{
    std::map<std::string, std::string> m{{"vocab_size", "7"}, {"block_size", "5"}, {"layers", "2"},
                                         {"d_model", "8"},    {"heads", "4"},      {"kv_heads", "1"}};
    io::checkpoint_demand d;
    REQUIRE(io::checkpoint_demand_of(m, d));
    CHECK(d.tensors == 28);
    // V d + block d + L (2 d^2 + 2 d G dh + 8 d^2 + 9 d) + 2 d, with G dh = 2: the parameter count.
    CHECK(d.values == 7 * 8 + 5 * 8 + 2 * (2 * 64 + 2 * 8 * 2 + 8 * 64 + 9 * 8) + 2 * 8);
    CHECK(d.values == models::gpt_parameter_count(small_config(1)));

    // rmsnorm and no bias: per layer ln_1.weight, ln_2.weight, four attention matrices, two MLP matrices;
    // no wpe with rope; lm_head when untied.
    m["norm"] = "rmsnorm";
    m["bias"] = "none";
    m["position"] = "rope";
    m["tied_head"] = "false";
    REQUIRE(io::checkpoint_demand_of(m, d));
    CHECK(d.tensors == 2 * 8 + 1 + 1 + 1);  // blocks, wte, ln_f.weight, lm_head
    CHECK(d.values == 7 * 8 * 2 + 2 * (2 * 8 + 2 * 64 + 2 * 8 * 2 + 2 * 8 * 32) + 8);
    // swiglu with mlp_hidden h = 12 and every bias: 4 + 8 + 6 tensors a layer, ln_f's two.
    m = {{"vocab_size", "7"}, {"block_size", "5"}, {"layers", "2"}, {"d_model", "8"}, {"heads", "4"},
         {"kv_heads", "1"}, {"mlp", "swiglu"}, {"mlp_hidden", "12"}, {"bias", "all"}};
    REQUIRE(io::checkpoint_demand_of(m, d));
    CHECK(d.tensors == 2 * 18 + 2 + 2);
    const std::uint64_t layer = 4 * 8 + 2 * 64 + 2 * 8 * 2 + (2 * 8 + 2 * 2) + 3 * 8 * 12 + (2 * 12 + 8);
    CHECK(d.values == 7 * 8 + 5 * 8 + 2 * layer + 2 * 8);
    // An unknown value counts as the default (the loader names it afterwards); a missing size gives no
    // demand. bias = mlp: norms with biases, no attention biases, the MLP's three.
    m["bias"] = "sometimes";
    REQUIRE(io::checkpoint_demand_of(m, d));
    CHECK(d.tensors == 2 * (4 + 4 + 3 + 3) + 2 + 2);
    m.erase("heads");
    CHECK_FALSE(io::checkpoint_demand_of(m, d));
}
}  // namespace test_safetensors
