// Parsing xgrad-mha-npy's options: each flag at most once, values after a space or '=', every
// problem reported as one line that names the flag.
#include "tools/mha_npy_args.hpp"

#include <charconv>
#include <map>
#include <system_error>

namespace xgrad::tools::mha_npy
{
namespace
{
std::size_t parse_count(const std::string& flag, const std::string& text)
{
    std::size_t n = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, n);
    if (ec != std::errc() || ptr != end || n == 0)
    {
        throw input_error(flag + " needs a positive integer, got '" + text + "'");
    }
    return n;
}
}  // namespace

options parse_arguments(const std::vector<std::string>& args)
{
    options o;
    std::map<std::string, std::string> seen;
    for (std::size_t i = 0; i < args.size(); ++i)
    {
        std::string flag = args[i], value;
        const bool has_inline_value = flag.rfind("--", 0) == 0 && flag.find('=') != std::string::npos;
        if (has_inline_value)
        {
            value = flag.substr(flag.find('=') + 1);
            flag = flag.substr(0, flag.find('='));
        }
        const bool takes_value = flag == "--in" || flag == "--out" || flag == "--heads" ||
                                 flag == "--kv-heads" || flag == "--grad" || flag == "--dtype";
        const bool is_switch = flag == "--causal" || flag == "--detect-anomaly";
        if (!takes_value && !is_switch)
        {
            throw input_error(flag.rfind("-", 0) == 0 ? "unknown option '" + flag + "' (see --help)"
                                                      : "unexpected argument '" + flag + "' (see --help)");
        }
        if (seen.count(flag))
        {
            throw input_error(flag + " given twice");
        }
        if (!takes_value && has_inline_value)
        {
            throw input_error(flag + " takes no value");
        }
        if (takes_value && !has_inline_value)
        {
            if (i + 1 == args.size())
            {
                throw input_error(flag + " needs a value (see --help)");
            }
            value = args[++i];
        }
        seen[flag] = value;
    }
    for (const char* required : {"--in", "--out", "--heads"})
    {
        if (!seen.count(required))
        {
            throw input_error(std::string("missing required option ") + required + " (see --help)");
        }
    }
    for (const char* path_flag : {"--in", "--out"})
    {
        if (seen[path_flag].empty())
        {
            throw input_error(std::string(path_flag) + " needs a non-empty directory name");
        }
    }
    o.in = seen["--in"];
    o.out = seen["--out"];
    o.heads = parse_count("--heads", seen["--heads"]);
    if (seen.count("--kv-heads"))
    {
        o.kv_heads = parse_count("--kv-heads", seen["--kv-heads"]);
    }
    o.causal = seen.count("--causal") > 0;
    o.detect_anomaly = seen.count("--detect-anomaly") > 0;
    if (seen.count("--grad"))
    {
        const std::string& g = seen["--grad"];
        if (g != "tape" && g != "manual")
        {
            throw input_error("--grad must be 'tape' or 'manual', got '" + g + "'");
        }
        o.manual = g == "manual";
    }
    if (seen.count("--dtype"))
    {
        const std::string& t = seen["--dtype"];
        if (t != "float64" && t != "float32")
        {
            throw input_error("--dtype must be 'float64' or 'float32', got '" + t + "'");
        }
        o.float32 = t == "float32";
    }
    if (o.detect_anomaly && o.manual)
    {
        throw input_error("--detect-anomaly watches the tape's ops; it does not apply to --grad manual");
    }
    return o;
}
}  // namespace xgrad::tools::mha_npy
