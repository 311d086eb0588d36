// How the tools run CLI11 on their arguments (the tools' side of examples/cli.hpp): --help is answered by
// the caller, and every CLI11 error becomes an input_error (exit status 2) that ends in " (see --help)".
// Apart from tools/tool_errors.cpp, so that the fuzzed parsers (fuzz/targets.cmake) need no more than CLI11.
#pragma once

#include <string>
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

// CLI11 reads "-1" into an unsigned option as 2^64 - 1: an option bound to a count takes this check, which
// refuses a sign before the text is converted ("--batch: must be a count >= 0, got '-1'").
inline const CLI::Validator& count_check()
{
    static const CLI::Validator check(
        [](std::string& text) {
            const bool signed_text = !text.empty() && (text[0] == '-' || text[0] == '+');
            return signed_text ? "must be a count >= 0, got '" + text.substr(0, 24) + "'" : std::string();
        },
        "COUNT");
    return check;
}

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
