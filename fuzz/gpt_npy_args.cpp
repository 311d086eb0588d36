// Fuzz target: xgrad-gpt-npy's command line (tools/gpt_npy_args.hpp, CLI11). The input is the argument
// list, arguments separated by NUL bytes. Parsing gives the help text, or options that read back the same
// from their own command line, or input_error with a message; nothing else may happen.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.hpp"
#include "tools/gpt_npy_args.hpp"

using namespace xgrad::tools::gpt_npy;
namespace fuzz = xgrad::fuzz;

namespace
{
// The command line that gives `o`, every value attached with '=' (a value may begin with '-').
std::vector<std::string> command_line_of(const options& o)
{
    std::vector<std::string> args = {"--checkpoint=" + o.checkpoint, "--in=" + o.in, "--out=" + o.out,
                                     "--grad=" + o.grad, "--dtype=" + o.dtype};
    if (o.detect_anomaly)
    {
        args.push_back("--detect-anomaly");
    }
    return args;
}

bool same(const options& a, const options& b)
{
    return a.checkpoint == b.checkpoint && a.in == b.in && a.out == b.out && a.grad == b.grad &&
           a.dtype == b.dtype && a.detect_anomaly == b.detect_anomaly;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    command_line c;
    try
    {
        c = parse_arguments(fuzz::split_at_nul(data, size));
    }
    catch (const input_error& e)
    {
        fuzz::require(std::string(e.what()).size() > 0, "input_error without a message");
        return 0;
    }
    if (c.help)
    {
        fuzz::require(c.help_text.rfind("usage: xgrad-gpt-npy", 0) == 0, "help without the usage line", c.help_text);
        return 0;
    }
    const options& o = c.run;
    fuzz::require(o.grad == "tape" || o.grad == "manual", "--grad outside tape|manual was accepted", o.grad);
    fuzz::require(o.dtype == "float64" || o.dtype == "float32", "--dtype outside float64|float32 was accepted",
                  o.dtype);
    fuzz::require(!(o.detect_anomaly && o.grad == "manual"), "--detect-anomaly was accepted with --grad manual");
    const command_line again = parse_arguments(command_line_of(o));
    fuzz::require(!again.help && same(again.run, o), "the options read differently from their own command line",
                  o.checkpoint + " | " + o.in + " | " + o.out);
    return 0;
}
