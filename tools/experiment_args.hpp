// The command line of xgrad-experiment (CLI11), parsed apart from the program so that the program need
// not include CLI11's header (docs/performance.md, "CLI11 compiled three times, not eleven"): it is
// compiled once, with the other parsers on the xgrad library (tools/command_lines.cmake).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "experiment/grid.hpp"
#include "tools/tool_errors.hpp"

namespace xgrad::tools::experiment_cli
{
// The program's name, which leads its usage and its messages.
inline constexpr const char* program = "xgrad-experiment";

// Bad usage: exit status 2.
using tools::input_error;

// A grid to run, or to report on again: what each flag asks for, 0 or empty where it is not given.
struct experiment_options
{
    std::string spec_file, out;             // --spec, --out
    train::grid::spec_overrides overrides;  // --data, --set, --axis, --variant, --seeds, --baseline
    std::int64_t steps = 0, tokens = 0;     // the budget per run: --steps, --tokens or --seconds
    double seconds = 0;
    int jobs = 0, threads = 0;              // runs at a time, threads per run: from the cores when 0
    std::string xgrad_train;                // empty: the xgrad-train beside the program
    bool replot = false, dry_run = false, quiet = false;
};

// What the command line asks for: the help text, or a grid.
struct experiment_command
{
    bool help = false;
    std::string help_text;   // when help
    experiment_options run;  // otherwise
};

// The arguments after the program name. Throws input_error for an unknown, malformed or missing option
// or a stray argument: CLI11's message, then " (see --help)".
experiment_command parse_experiment_arguments(const std::vector<std::string>& args);
}  // namespace xgrad::tools::experiment_cli
