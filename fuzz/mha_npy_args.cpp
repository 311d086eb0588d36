// Fuzz target: xgrad-mha-npy's command line (tools/mha_npy_args.hpp). The input is the argument list,
// arguments separated by NUL bytes. Parsing either gives options that make sense and read back the same
// from their own command line, or throws input_error with a message; nothing else may happen.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.hpp"
#include "tools/mha_npy_args.hpp"

using namespace xgrad::tools::mha_npy;
namespace fuzz = xgrad::fuzz;

namespace
{
// The command line that gives `o`, spelled out in full.
std::vector<std::string> command_line(const options& o)
{
    std::vector<std::string> args = {"--in", o.in.string(), "--out", o.out.string(), "--heads",
                                     std::to_string(o.heads)};
    if (o.kv_heads)
    {
        args.insert(args.end(), {"--kv-heads", std::to_string(o.kv_heads)});
    }
    args.insert(args.end(), {"--grad", o.manual ? "manual" : "tape", "--dtype", o.float32 ? "float32" : "float64"});
    if (o.causal)
    {
        args.push_back("--causal");
    }
    if (o.detect_anomaly)
    {
        args.push_back("--detect-anomaly");
    }
    return args;
}

bool same(const options& a, const options& b)
{
    return a.in == b.in && a.out == b.out && a.heads == b.heads && a.kv_heads == b.kv_heads &&
           a.causal == b.causal && a.manual == b.manual && a.float32 == b.float32 &&
           a.detect_anomaly == b.detect_anomaly;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::vector<std::string> args = fuzz::split_at_nul(data, size);
    options o;
    try
    {
        o = parse_arguments(args);
    }
    catch (const input_error& e)
    {
        fuzz::require(std::string(e.what()).size() > 0, "input_error without a message");
        return 0;
    }
    fuzz::require(!o.in.empty() && !o.out.empty(), "an empty --in or --out was accepted");
    fuzz::require(o.heads > 0, "--heads 0 was accepted");
    fuzz::require(!(o.manual && o.detect_anomaly), "--detect-anomaly was accepted with --grad manual");
    const std::vector<std::string> again = command_line(o);
    fuzz::require(same(parse_arguments(again), o), "the options read differently from their own command line");
    return 0;
}
