// The xgrad-mha-npy command line, run as a user runs it: good self- and cross-attention cases with both
// backwards and both dtypes (against each other and against NumPy reference results committed in
// tests/data/npy/mha_cross), and every class of bad input, which must give a non-zero status, exactly
// one line on stderr and no output file. Inputs are written here with npy::save from seeded values.
#include <doctest/doctest.h>

#include "source_dir.hpp"
#include "test_util.hpp"

#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "io/npy.hpp"

namespace tool_cli_test
{
using namespace xgrad;
using xgrad::test::quote;
using xgrad::test::read_bytes;
using xgrad::test::run_tool;
using xgrad::test::temp_dir;
using xgrad::test::tool_run;
namespace fs = std::filesystem;

namespace
{
const std::string tool = xgrad::test::program_dir() + "/xgrad-mha-npy";
const std::string reference_case = xgrad::test::source_dir() + "/tests/data/npy/mha_cross";

// Writes X.npy (B, Tq, d) for self-attention, or Xq, Xk, Xv.npy, and the four weights.
void write_case(const fs::path& dir, bool self, std::size_t batch, std::size_t tq, std::size_t tk,
                std::size_t d, std::size_t heads, std::size_t kv_heads, unsigned seed)
{
    fs::create_directories(dir);
    auto at = [&](const char* name) { return (dir / name).string(); };
    if (self)
    {
        npy::save(at("X.npy"), test::normal_array<double>({batch, tq, d}, seed));
    }
    else
    {
        npy::save(at("Xq.npy"), test::normal_array<double>({batch, tq, d}, seed));
        npy::save(at("Xk.npy"), test::normal_array<float>({batch, tk, d}, seed + 1));  // float32 inputs are converted
        npy::save(at("Xv.npy"), test::normal_array<double>({batch, tk, d}, seed + 2));
    }
    const std::size_t kv = kv_heads * (d / heads);
    const double s = 1.0 / std::sqrt(static_cast<double>(d));
    npy::save(at("W_Q.npy"), test::normal_array<double>({d, d}, seed + 3, s));
    npy::save(at("W_K.npy"), test::normal_array<double>({d, kv}, seed + 4, s));
    npy::save(at("W_V.npy"), test::normal_array<double>({d, kv}, seed + 5, s));
    npy::save(at("W_O.npy"), test::normal_array<double>({d, d}, seed + 6, s));
}

// The header's dtype string of a .npy file, e.g. "<f8".
std::string descr_of(const fs::path& p)
{
    const std::string text = read_bytes(p);
    const std::size_t at = text.find("'descr': '");
    return at == std::string::npos ? "" : text.substr(at + 10, 3);
}

std::set<std::string> listing(const fs::path& dir)
{
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
    {
        names.insert(e.path().filename().string());
    }
    return names;
}

using shapes = std::map<std::string, shape_t>;

shapes expected_shapes(std::size_t batch, std::size_t tq, std::size_t tk, std::size_t d, std::size_t heads,
                       std::size_t kv_heads, bool self)
{
    const std::size_t kv = kv_heads * (d / heads);
    shapes s{{"output", {batch, tq, d}}, {"attn", {batch, heads, tq, tk}},
             {"grad_W_Q", {d, d}},       {"grad_W_K", {d, kv}},
             {"grad_W_V", {d, kv}},      {"grad_W_O", {d, d}}};
    if (self)
    {
        s["grad_X"] = {batch, tq, d};
    }
    else
    {
        s["grad_Xq"] = {batch, tq, d};
        s["grad_Xk"] = {batch, tk, d};
        s["grad_Xv"] = {batch, tk, d};
    }
    return s;
}

// Runs one good case and checks the file set, shapes and dtype; returns the outputs as float64.
std::map<std::string, array<double>> run_good(const temp_dir& scratch, const fs::path& in,
                                              const fs::path& out, const std::string& flags,
                                              const shapes& want, const char* dtype)
{
    const tool_run r =
        run_tool(tool, scratch, "--in " + quote(in) + " --out " + quote(out) + " " + flags + " --dtype " + dtype);
    INFO(flags, " ", dtype, ": ", r.err);
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
    std::set<std::string> expected_files;
    for (const auto& [name, shape] : want)
    {
        expected_files.insert(name + ".npy");
    }
    CHECK(listing(out) == expected_files);
    std::map<std::string, array<double>> got;
    for (const auto& [name, shape] : want)
    {
        const fs::path file = out / (name + ".npy");
        CAPTURE(name);
        CHECK(descr_of(file) == (std::string(dtype) == "float32" ? "<f4" : "<f8"));
        got[name] = npy::load_float<double>(file.string());
        CHECK(to_shape(got[name].shape()) == shape);
    }
    return got;
}

double max_abs_difference(const array<double>& a, const array<double>& b)
{
    REQUIRE(a.shape() == b.shape());
    double m = 0.0;
    for (std::size_t k = 0; k < a.size(); ++k)
    {
        m = std::max(m, std::abs(a.data()[k] - b.data()[k]));
    }
    return m;
}

void check_close(const std::map<std::string, array<double>>& a, const std::map<std::string, array<double>>& b,
                 double tolerance)
{
    for (const auto& [name, value] : a)
    {
        CAPTURE(name);
        REQUIRE(b.count(name));
        CHECK(max_abs_difference(value, b.at(name)) <= tolerance);
        CHECK(std::all_of(value.begin(), value.end(), [](double x) { return std::isfinite(x); }));
    }
}

// A .npy file of int64 zeros: a dtype the tool must refuse where floats are needed.
void write_int64(const fs::path& p, const shape_t& shape)
{
    std::string header = "{'descr': '<i8', 'fortran_order': False, 'shape': (";
    for (std::size_t i = 0; i < shape.size(); ++i)
    {
        header += (i ? ", " : "") + std::to_string(shape[i]);
    }
    header += shape.size() == 1 ? ",), }" : "), }";
    header.append((10 + header.size() + 1 + 63) / 64 * 64 - 10 - header.size() - 1, ' ');
    header += '\n';
    std::ofstream f(p, std::ios::binary);
    f << std::string("\x93NUMPY\x01\x00", 8) << static_cast<char>(header.size()) << '\0' << header
      << std::string(element_count(shape) * 8, '\0');
}

// A .npy file with the header dict `dict` (any bytes) and `data_bytes` zero bytes of data.
void write_raw_npy(const fs::path& p, const std::string& dict, std::size_t data_bytes)
{
    std::string header = dict;
    header.append((10 + header.size() + 1 + 63) / 64 * 64 - 10 - header.size() - 1, ' ');
    header += '\n';
    std::ofstream f(p, std::ios::binary);
    f << std::string("\x93NUMPY\x01\x00", 8) << static_cast<char>(header.size() % 256)
      << static_cast<char>(header.size() / 256) << header << std::string(data_bytes, '\0');
}

// True when every byte is printable ASCII (the final newline of a message aside).
bool printable_line(const std::string& line)
{
    return std::all_of(line.begin(), line.end() - (line.empty() || line.back() != '\n' ? 0 : 1),
                       [](char c) { return c >= 0x20 && c < 0x7f; });
}
}  // namespace

TEST_CASE("xgrad-mha-npy --help")
{
    temp_dir scratch;
    const tool_run r = run_tool(tool, scratch, "--help");
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(r.out.find("usage: xgrad-mha-npy --in DIR --out DIR --heads H") == 0);
    CHECK(r.out.find("(B,Tq,Tk): one mask per batch element, read as (B,1,Tq,Tk)") != std::string::npos);
}

TEST_CASE("xgrad-mha-npy self-attention: tape = manual in float64 and float32, grad_X sums the three paths")
{
    temp_dir scratch;
    const std::size_t B = 2, T = 5, d = 8, H = 4, G = 2;
    const fs::path in = scratch.path / "in";
    write_case(in, true, B, T, T, d, H, G, 11);
    mask_t mask = mask_t::from_shape({T, T});  // (Tq, Tk), with causal: query 0 sees nothing
    for (std::size_t i = 0; i < T; ++i)
    {
        for (std::size_t j = 0; j < T; ++j)
        {
            mask(i, j) = i > 0 && (i + j) % 4 != 3;
        }
    }
    npy::save_bool((in / "mask.npy").string(), mask);
    const shapes want = expected_shapes(B, T, T, d, H, G, true);
    const std::string flags = "--heads 4 --kv-heads 2 --causal";

    std::map<std::string, std::map<std::string, array<double>>> results;
    for (const char* grad : {"tape", "manual"})
    {
        for (const char* dtype : {"float64", "float32"})
        {
            const std::string key = std::string(grad) + "-" + dtype;
            results[key] = run_good(scratch, in, scratch.path / key, flags + " --grad " + grad, want, dtype);
        }
    }
    check_close(results["tape-float64"], results["manual-float64"], 1e-12);
    check_close(results["tape-float32"], results["manual-float32"], 1e-5);
    check_close(results["tape-float64"], results["tape-float32"], 1e-4);
    const auto& f64 = results["tape-float64"];
    for (std::size_t b = 0; b < B; ++b)
    {
        for (std::size_t c = 0; c < d; ++c)
        {
            CHECK(f64.at("output")(b, 0, c) == 0.0);  // query 0 attends to nothing: its row is 0 before W_O
        }
    }

    // The same X given as Xq = Xk = Xv: the self-attention gradient is the sum of the three.
    const fs::path cross_in = scratch.path / "cross_in";
    fs::create_directories(cross_in);
    for (const char* w : {"W_Q.npy", "W_K.npy", "W_V.npy", "W_O.npy", "mask.npy"})
    {
        fs::copy_file(in / w, cross_in / w);
    }
    for (const char* x : {"Xq.npy", "Xk.npy", "Xv.npy"})
    {
        fs::copy_file(in / "X.npy", cross_in / x);
    }
    auto cross = run_good(scratch, cross_in, scratch.path / "cross_out", flags,
                          expected_shapes(B, T, T, d, H, G, false), "float64");
    const array<double> summed = cross["grad_Xq"] + cross["grad_Xk"] + cross["grad_Xv"];
    CHECK(max_abs_difference(summed, f64.at("grad_X")) <= 1e-12);
    for (const char* name : {"output", "attn", "grad_W_Q", "grad_W_K", "grad_W_V", "grad_W_O"})
    {
        CAPTURE(name);
        CHECK(max_abs_difference(cross[name], f64.at(name)) <= 1e-12);
    }
}

TEST_CASE("xgrad-mha-npy cross-attention, Tq != Tk, causal and masks: tape = manual, both dtypes")
{
    temp_dir scratch;
    const std::size_t B = 3, Tq = 4, Tk = 6, d = 6, H = 3, G = 3;
    const fs::path in = scratch.path / "in";
    write_case(in, false, B, Tq, Tk, d, H, G, 21);
    npy::save((in / "grad_output.npy").string(), test::normal_array<double>({B, Tq, d}, 99));
    const shapes want = expected_shapes(B, Tq, Tk, d, H, G, false);

    // A (B, Tq, Tk) mask, read as (B, 1, Tq, Tk); then a (B, 1, 1, Tk) padding mask, as 4-D.
    mask_t per_batch = mask_t::from_shape({B, Tq, Tk});
    std::size_t k = 0;
    for (auto&& m : per_batch)
    {
        m = (k++ * 5) % 7 != 2;
    }
    mask_t padding = mask_t::from_shape({B, 1, 1, Tk});
    for (std::size_t b = 0; b < B; ++b)
    {
        for (std::size_t j = 0; j < Tk; ++j)
        {
            padding(b, 0, 0, j) = j < Tk - b;
        }
    }
    for (const mask_t* mask : {&per_batch, &padding})
    {
        CAPTURE(mask->dimension());
        npy::save_bool((in / "mask.npy").string(), *mask);
        for (const char* causal : {"", " --causal"})
        {
            std::map<std::string, std::map<std::string, array<double>>> results;
            for (const char* grad : {"tape", "manual"})
            {
                for (const char* dtype : {"float64", "float32"})
                {
                    const std::string key = std::string(grad) + "-" + dtype;
                    const fs::path out = scratch.path / ("out-" + key);
                    fs::remove_all(out);
                    results[key] = run_good(scratch, in, out,
                                            std::string("--heads 3 --grad ") + grad + causal, want, dtype);
                }
            }
            check_close(results["tape-float64"], results["manual-float64"], 1e-12);
            check_close(results["tape-float32"], results["manual-float32"], 1e-5);
            check_close(results["tape-float64"], results["tape-float32"], 1e-4);
        }
    }
}

TEST_CASE(
    "xgrad-mha-npy agrees with NumPy (tests/data/npy/mha_cross: GQA, causal, (B,Tq,Tk) mask, a row "
    "with no key)")
{
    temp_dir scratch;
    const fs::path expected_dir = fs::path(reference_case) / "expected";
    std::map<std::string, array<double>> expected;
    for (const auto& e : fs::directory_iterator(expected_dir))
    {
        expected[e.path().stem().string()] = npy::load_float<double>(e.path().string());
    }
    REQUIRE(expected.size() == 9);
    const shapes want = expected_shapes(2, 3, 5, 8, 4, 2, false);
    for (const char* grad : {"tape", "manual"})
    {
        for (const char* dtype : {"float64", "float32"})
        {
            CAPTURE(grad);
            CAPTURE(dtype);
            const fs::path out = scratch.path / (std::string(grad) + dtype);
            auto got = run_good(scratch, fs::path(reference_case) / "in", out,
                                std::string("--heads 4 --kv-heads 2 --causal --grad ") + grad, want, dtype);
            // float64 gradients are compared with NumPy's central differences (error ~1e-9).
            check_close(got, expected, std::string(dtype) == "float64" ? 1e-7 : 1e-4);
        }
    }
}

TEST_CASE("xgrad-mha-npy bad input: non-zero status, one line on stderr, no output left behind")
{
    temp_dir scratch;
    const std::size_t B = 2, T = 3, d = 4;
    const fs::path good_in = scratch.path / "good";
    write_case(good_in, true, B, T, T, d, 2, 2, 5);
    const fs::path cross_in = scratch.path / "good_cross";
    write_case(cross_in, false, B, T, 5, d, 2, 2, 6);

    struct bad_case
    {
        std::string name;
        std::string needle;  // what the stderr line must mention
        int status;
        std::function<void(const fs::path& in)> corrupt;  // applied to a copy of good_in (or cross_in)
        std::string flags = "--heads 2";
        bool cross = false;
    };
    const std::vector<bad_case> cases = {
        {"missing weight file", "W_O.npy: cannot open (No such file or directory)", 2,
         [](const fs::path& in) { fs::remove(in / "W_O.npy"); }},
        {"no input at all", "no X.npy (self-attention) and no Xq.npy", 2,
         [](const fs::path& in) { fs::remove(in / "X.npy"); }},
        {"missing Xv in cross-attention", "Xv.npy: cannot open", 2,
         [](const fs::path& in) { fs::remove(in / "Xv.npy"); }, "--heads 2", true},
        {"missing --in directory", "no such directory", 2, [](const fs::path& in) { fs::remove_all(in); }},
        {"weight shape", "W_Q.npy: shape (4, 3) must be (d, d) = (4, 4)", 2,
         [](const fs::path& in) {
             npy::save((in / "W_Q.npy").string(), test::normal_array<double>({4, 3}, 1));
         }},
        {"W_K shape with kv-heads", "W_K.npy: shape (4, 4) must be (d, G*dh) = (4, 2) (d = 4, H = 2, G = 1)",
         2, [](const fs::path&) {}, "--heads 2 --kv-heads 1"},
        {"X not 3-D", "X.npy: shape (6, 4) must be (B, T, d)", 2,
         [](const fs::path& in) {
             npy::save((in / "X.npy").string(), test::normal_array<double>({6, 4}, 1));
         }},
        {"Xk batch disagrees", "Xk.npy: shape (1, 5, 4) must be (B, Tk, d)", 2,
         [](const fs::path& in) {
             npy::save((in / "Xk.npy").string(), test::normal_array<double>({1, 5, 4}, 1));
         },
         "--heads 2", true},
        {"Xv disagrees with Xk", "Xv.npy: shape (2, 4, 4) must be the shape of Xk.npy", 2,
         [](const fs::path& in) {
             npy::save((in / "Xv.npy").string(), test::normal_array<double>({2, 4, 4}, 1));
         },
         "--heads 2", true},
        {"grad_output shape", "grad_output.npy: shape (2, 3, 3)", 2,
         [](const fs::path& in) {
             npy::save((in / "grad_output.npy").string(), test::normal_array<double>({2, 3, 3}, 1));
         }},
        {"d % H", "--heads 3 does not divide d = 4", 2, [](const fs::path&) {}, "--heads 3"},
        {"H % G", "--kv-heads 3 does not divide --heads 2", 2, [](const fs::path&) {},
         "--heads 2 --kv-heads 3"},
        {"truncated npy", "X.npy: truncated", 2,
         [](const fs::path& in) { fs::resize_file(in / "X.npy", fs::file_size(in / "X.npy") - 5); }},
        {"corrupt npy header", "W_V.npy: not a .npy file (bad magic string", 2,
         [](const fs::path& in) {
             std::ofstream(in / "W_V.npy", std::ios::binary) << "garbage, not a NumPy file";
         }},
        {"int dtype", "W_K.npy: dtype '<i8' (int64) is not supported; a float array is needed", 2,
         [](const fs::path& in) {
             write_int64(in / "W_K.npy", {4, 4});
         }},
        {"non-bool mask", "mask.npy: dtype '<f8' (float64) is not supported; a bool array ('|b1') is needed",
         2,
         [](const fs::path& in) {
             npy::save((in / "mask.npy").string(), test::normal_array<double>({3, 3}, 1));
         }},
        {"mask that does not broadcast",
         "mask.npy: shape (2, 3) does not broadcast to (B, H, Tq, Tk) = (2, 2, 3, 3)", 2,
         [](const fs::path& in) {
             npy::save_bool((in / "mask.npy").string(), mask_t(xt::ones<bool>(shape_t{2, 3})));
         }},
        {"3-D mask is (B,Tq,Tk), not (H,Tq,Tk)", "mask.npy: shape (4, 3, 3) does not broadcast", 2,
         [](const fs::path& in) {
             npy::save_bool((in / "mask.npy").string(), mask_t(xt::ones<bool>(shape_t{4, 3, 3})));
         },
         "--heads 4"},
        {"5-D mask", "mask.npy: shape (1, 1, 1, 3, 3) does not broadcast", 2,
         [](const fs::path& in) {
             npy::save_bool((in / "mask.npy").string(), mask_t(xt::ones<bool>(shape_t{1, 1, 1, 3, 3})));
         }},
        {"missing --heads", "missing required option --heads", 2, [](const fs::path&) {}, ""},
        {"unknown flag", "unknown option '--head'", 2, [](const fs::path&) {}, "--head 2"},
        {"flag without value", "--heads needs a value", 2, [](const fs::path&) {}, "--heads"},
        {"bad --heads", "--heads needs a positive integer, got '2x'", 2, [](const fs::path&) {},
         "--heads 2x"},
        {"zero --heads", "--heads needs a positive integer, got '0'", 2, [](const fs::path&) {}, "--heads 0"},
        {"bad --grad", "--grad must be 'tape' or 'manual'", 2, [](const fs::path&) {},
         "--heads 2 --grad numeric"},
        {"bad --dtype", "--dtype must be 'float64' or 'float32'", 2, [](const fs::path&) {},
         "--heads 2 --dtype f16"},
        {"flag twice", "--heads given twice", 2, [](const fs::path&) {}, "--heads 2 --heads 2"},
        {"stray argument", "unexpected argument 'extra'", 2, [](const fs::path&) {}, "--heads 2 extra"},
        {"control byte in a header key", "unexpected key '\\x1d'", 2,
         [](const fs::path& in) {
             write_raw_npy(in / "X.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 4), '\x1d': 1}",
                           2 * 3 * 4 * 8);
         }},
        {"control and non-ASCII bytes in a dtype", "dtype '<f\\x1f\\xff' is not supported", 2,
         [](const fs::path& in) {
             write_raw_npy(in / "W_Q.npy", "{'descr': '<f\x1f\xff', 'fortran_order': False, 'shape': (4, 4)}",
                           128);
         }},
        {"control byte in an argument", "got '\\x1b[31m'", 2, [](const fs::path&) {},
         "--heads 2 --dtype \"$(printf '\\033[31m')\""},
        {"--detect-anomaly: finite X and W_Q whose product overflows", "anomaly in forward: ", 3,
         [](const fs::path& in) {
             npy::save((in / "X.npy").string(), test::filled<double>({2, 3, 4}, 1e300));
             npy::save((in / "W_Q.npy").string(), test::filled<double>({4, 4}, 1e10));
         },
         "--heads 2 --detect-anomaly"},
        {"--detect-anomaly with --grad manual", "--detect-anomaly watches the tape's ops", 2,
         [](const fs::path&) {}, "--heads 2 --detect-anomaly --grad manual"},
        {"--detect-anomaly given a value", "--detect-anomaly takes no value", 2, [](const fs::path&) {},
         "--heads 2 --detect-anomaly=yes"},
    };

    int index = 0;
    for (const bad_case& c : cases)
    {
        CAPTURE(c.name);
        const fs::path in = scratch.path / ("in" + std::to_string(index));
        fs::copy(c.cross ? cross_in : good_in, in, fs::copy_options::recursive);
        c.corrupt(in);
        for (const bool out_exists : {false, true})
        {
            CAPTURE(out_exists);
            const fs::path out = scratch.path / ("out" + std::to_string(index++));
            if (out_exists)
            {
                fs::create_directory(out);
            }
            const tool_run r =
                run_tool(tool, scratch, "--in " + quote(in) + " --out " + quote(out) + " " + c.flags);
            CAPTURE(r.err);
            CHECK(r.status == c.status);
            CHECK(r.out.empty());
            CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
            CHECK((!r.err.empty() && r.err.back() == '\n'));
            CHECK(r.err.rfind("xgrad-mha-npy: ", 0) == 0);
            CHECK(r.err.find(c.needle) != std::string::npos);
            CHECK(printable_line(r.err));  // bytes from files and arguments are escaped as \xNN
            CHECK(fs::exists(out) == out_exists);
            if (out_exists)
            {
                CHECK(fs::is_empty(out));
            }
        }
    }
}

TEST_CASE("xgrad-mha-npy usage and output-directory failures")
{
    temp_dir scratch;
    const fs::path good_in = scratch.path / "good";
    write_case(good_in, true, 2, 3, 3, 4, 2, 2, 5);

    SUBCASE("no arguments")
    {
        const tool_run r = run_tool(tool, scratch, "");
        CHECK(r.status == 2);
        CHECK(r.err == "xgrad-mha-npy: missing required option --in (see --help)\n");
    }
    SUBCASE("--out is a file")
    {
        const fs::path out = scratch.path / "a_file";
        std::ofstream(out) << "keep me";
        const tool_run r =
            run_tool(tool, scratch, "--in " + quote(good_in) + " --out " + quote(out) + " --heads 2");
        CHECK(r.status == 2);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(r.err.find("exists and is not a directory") != std::string::npos);
        CHECK(read_bytes(out) == "keep me");
    }
    SUBCASE("--out cannot be created: status 1, nothing created")
    {
        const fs::path blocker = scratch.path / "blocker";
        std::ofstream(blocker) << "x";
        const fs::path out = blocker / "sub" / "dir";
        const tool_run r =
            run_tool(tool, scratch, "--in " + quote(good_in) + " --out " + quote(out) + " --heads 2");
        CHECK(r.status == 1);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(r.err.find("cannot create") != std::string::npos);
        CHECK(read_bytes(blocker) == "x");
    }
    SUBCASE("a failure while renaming the outputs into place removes those already placed")
    {
        const fs::path out = scratch.path / "nested" / "out";
        fs::create_directories(out / "grad_X.npy");  // a directory where the last output goes
        const tool_run r =
            run_tool(tool, scratch, "--in " + quote(good_in) + " --out " + quote(out) + " --heads 2");
        CHECK(r.status == 1);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(r.err.find("grad_X.npy: is a directory") != std::string::npos);
        CHECK(listing(out) == std::set<std::string>{"grad_X.npy"});
    }
    SUBCASE("missing parent directories of --out are created, and not on failure")
    {
        const fs::path out = scratch.path / "p1" / "p2" / "out";
        const tool_run ok =
            run_tool(tool, scratch, "--in " + quote(good_in) + " --out " + quote(out) + " --heads 2");
        CHECK(ok.status == 0);
        CHECK(fs::exists(out / "grad_X.npy"));
        const fs::path bad_out = scratch.path / "q1" / "q2" / "out";
        const tool_run bad =
            run_tool(tool, scratch, "--in " + quote(good_in) + " --out " + quote(bad_out) + " --heads 3");
        CHECK(bad.status == 2);
        CHECK_FALSE(fs::exists(scratch.path / "q1"));
    }
}

TEST_CASE("xgrad-mha-npy --detect-anomaly: the same files when nothing is anomalous, NaN inputs propagate, "
          "an overflow is named with its trace")
{
    temp_dir scratch;
    const std::size_t B = 2, T = 3, d = 4;
    const fs::path in = scratch.path / "in";
    write_case(in, true, B, T, T, d, 2, 2, 21);
    const shapes want = expected_shapes(B, T, T, d, 2, 2, true);
    const auto plain = run_good(scratch, in, scratch.path / "plain", "--heads 2 --causal", want, "float64");
    const auto watched =
        run_good(scratch, in, scratch.path / "watched", "--heads 2 --causal --detect-anomaly", want, "float64");
    for (const auto& [name, a] : plain)
    {
        CAPTURE(name);
        CHECK(read_bytes(scratch.path / "plain" / (name + ".npy")) ==
              read_bytes(scratch.path / "watched" / (name + ".npy")));  // byte for byte
    }

    // A NaN in X is not an anomaly: it propagates into the outputs and the run succeeds.
    array<double> x = test::normal_array<double>({B, T, d}, 21);
    x(1, 2, 3) = std::numeric_limits<double>::quiet_NaN();
    npy::save((in / "X.npy").string(), x);
    const auto with_nan = run_good(scratch, in, scratch.path / "nan", "--heads 2 --detect-anomaly", want, "float64");
    CHECK(std::isnan(with_nan.at("output")(1, 2, 0)));
    CHECK(std::isfinite(with_nan.at("output")(0, 0, 0)));

    // An overflow from finite inputs: status 3, one line naming the op and its label, with the trace.
    npy::save((in / "X.npy").string(), test::filled<double>({B, T, d}, 1e300));
    npy::save((in / "W_Q.npy").string(), test::filled<double>({d, d}, 1e10));
    const fs::path out = scratch.path / "overflow";
    const tool_run r =
        run_tool(tool, scratch, "--in " + quote(in) + " --out " + quote(out) + " --heads 2 --detect-anomaly");
    CAPTURE(r.err);
    CHECK(r.status == 3);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.find("anomaly in forward: ") != std::string::npos);
    CHECK(r.err.find("matmul 'Q_linear'") != std::string::npos);
    CHECK(r.err.find("gave inf at index [0, 0, 0]") != std::string::npos);
    CHECK(r.err.find("; forward trace: %0 input 'X' (2, 3, 4); ") != std::string::npos);
    CHECK_FALSE(fs::exists(out));

    // Without the mode, the same inputs run through and write non-finite outputs.
    const auto unwatched = run_good(scratch, in, scratch.path / "unwatched", "--heads 2", want, "float64");
    CHECK_FALSE(std::isfinite(unwatched.at("output")(0, 0, 0)));
}
}  // namespace tool_cli_test
