// The command line of xgrad-gpt-npy (CLI11), parsed apart from the program so that tests and the fuzzer
// (fuzz/gpt_npy_args.cpp) can call the parser directly.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tools/tool_errors.hpp"

namespace xgrad::tools::gpt_npy
{
// The program's name, which leads its usage and its messages.
inline constexpr const char* program = "xgrad-gpt-npy";

// Bad usage or bad input: exit status 2.
using tools::input_error;

struct options
{
    std::string checkpoint, in, out;
    std::string grad = "tape";
    std::string dtype = "float64";
    bool detect_anomaly = false;
    std::map<std::string, std::string> run_as;  // variant values for models::run_as (tools/model_flags.hpp)
};

// What the command line asks for: the help text, or a run with these options.
struct command_line
{
    bool help = false;
    std::string help_text;  // when help
    options run;            // otherwise
};

// The arguments after the program name. Throws input_error with a one-line message for an unknown,
// malformed or missing option or a stray argument (unknown options are named before missing ones).
command_line parse_arguments(const std::vector<std::string>& args);
}  // namespace xgrad::tools::gpt_npy
