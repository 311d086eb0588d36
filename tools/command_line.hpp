// How the tools run CLI11 on their arguments (the tools' side of examples/command_line.hpp): --help is
// answered by the caller, and every CLI11 error becomes an input_error (exit status 2) that ends in
// " (see --help)".
// Apart from tools/tool_errors.cpp, so that the fuzzed parsers (fuzz/targets.cmake) need no more than CLI11.
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/tool_errors.hpp"

namespace xgrad::tools
{
// What an input_error keeps of CLI11's message: all of it, or its first line (a parser whose every
// message is one line: tools/train_args.hpp).
enum class cli_message
{
    whole,
    first_line,
};

// CLI11 reads "-1" into an unsigned option as 2^64 - 1, and clamps a decimal number past the type's range
// to its largest value: an integer option takes this check of its text first ("--batch: must be a count
// >= 0, got '-1'"; "--steps: '18446744073709551616' is past the range of -9223372036854775808 to ...").
template <class Integer>
const CLI::Validator& integer_check()
{
    static const CLI::Validator check(
        [](std::string& text) {
            const std::string shown = "'" + text.substr(0, 24) + "'";
            if (std::is_unsigned_v<Integer> && !text.empty() && (text[0] == '-' || text[0] == '+'))
            {
                return "must be a count >= 0, got " + shown;
            }
            const bool decimal = !text.empty() && text.find_first_not_of("-0123456789") == std::string::npos;
            Integer value{};
            if (decimal && std::from_chars(text.data(), text.data() + text.size(), value).ec ==
                               std::errc::result_out_of_range)
            {
                return shown + " is past the range of " +
                       std::to_string(std::numeric_limits<Integer>::min()) + " to " +
                       std::to_string(std::numeric_limits<Integer>::max());
            }
            return std::string();
        },
        std::is_unsigned_v<Integer> ? "COUNT" : "INT");
    return check;
}

inline const CLI::Validator& count_check() { return integer_check<std::uint64_t>(); }

// Parses `args`, the arguments after the program name, into `app`. False when --help was asked for (the
// caller prints app.help()). A CLI11 error throws input_error: CLI11's message, as much of it as `kept`
// says, then " (see --help)".
inline bool parse_command_line(CLI::App& app, const std::vector<std::string>& args,
                               cli_message kept = cli_message::whole)
{
    std::vector<const char*> argv{app.get_name().c_str()};
    for (const std::string& a : args)
    {
        argv.push_back(a.c_str());
    }
    try
    {
        app.parse(static_cast<int>(argv.size()), argv.data());
        return true;
    }
    catch (const CLI::CallForHelp&)
    {
        return false;
    }
    catch (const CLI::ParseError& e)
    {
        const std::string what = e.what();
        throw input_error((kept == cli_message::first_line ? what.substr(0, what.find('\n')) : what) +
                          " (see --help)");
    }
}
}  // namespace xgrad::tools
