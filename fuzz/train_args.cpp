// Fuzz target: the command lines of xgrad-train and xgrad-sample (tools/train_args.hpp, CLI11). The input
// is an argument list, arguments separated by NUL bytes; its first byte picks the program. Parsing gives
// the help text, options, or input_error with a one-line message; nothing else may happen.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.hpp"
#include "tools/train_args.hpp"

using namespace xgrad::tools::train_cli;
namespace fuzz = xgrad::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size == 0)
    {
        return 0;
    }
    const bool sample = data[0] & 1;
    const std::vector<std::string> args = fuzz::split_at_nul(data + 1, size - 1);
    try
    {
        if (sample)
        {
            const sample_command c = parse_sample_arguments(args);
            fuzz::require(c.help || (c.run.temperature >= 0 && c.run.temperature <= 100),
                          "a temperature outside [0, 100] was accepted");
        }
        else
        {
            const train_command c = parse_train_arguments(args);
            const bool named_data = std::any_of(args.begin(), args.end(),
                                                [](const std::string& a) { return a.rfind("--data", 0) == 0; });
            fuzz::require(c.help || named_data, "a command line without --data was accepted");
            fuzz::require(c.help || c.help_text.empty(), "help text without help");
        }
    }
    catch (const input_error& e)
    {
        const std::string what = e.what();
        fuzz::require(!what.empty(), "input_error without a message");
        fuzz::require(what.find('\n') == std::string::npos, "a message of more than one line", what);
    }
    return 0;
}
