// The command line of xgrad-convert (CLI11), parsed apart from the program so that the program need not
// include CLI11's header (docs/performance.md, "CLI11 compiled three times, not eleven"): it is compiled
// once, with the other parsers on the xgrad library (tools/command_lines.cmake).
#pragma once

#include <string>
#include <vector>

#include "tools/tool_errors.hpp"

namespace xgrad::tools::convert_cli
{
// The program's name, which leads its usage and its messages.
inline constexpr const char* program = "xgrad-convert";

// Bad usage: exit status 2.
using tools::input_error;

// What the command line asks for: the help text, or the checkpoint IN in format `from` converted to OUT
// in format `to` (each format xgrad, hf-gpt2 or llama2c).
struct convert_command
{
    bool help = false;
    std::string help_text;  // when help
    std::string from, to;   // otherwise
    std::string in, out;    // never empty
};

// The arguments after the program name. Throws input_error for an unknown, malformed or missing option,
// a stray argument (CLI11's message, then " (see --help)") or an empty IN or OUT.
convert_command parse_convert_arguments(const std::vector<std::string>& args);
}  // namespace xgrad::tools::convert_cli
