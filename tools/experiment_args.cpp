// Parsing xgrad-experiment's options with CLI11: the spec, what the command line adds to it or replaces,
// the budget per run, and how the runs share the machine.
#include "tools/experiment_args.hpp"

#include <CLI/CLI.hpp>

#include "tools/command_line.hpp"

namespace xgrad::tools::experiment_cli
{
experiment_command parse_experiment_arguments(const std::vector<std::string>& args)
{
    experiment_command command;
    experiment_options& c = command.run;
    CLI::App app{"Run a grid of xgrad-train runs over variants and seeds, and report on them with intervals "
                 "and tests (docs/experiments.md)",
                 program};
    app.add_option("--spec", c.spec_file, "JSON spec: data, fixed, axes, variants, seeds, baseline, budget");
    app.add_option("--out", c.out, "folder for the runs, grid.json, report.md and the pictures")->required();
    app.add_option("--data", c.overrides.data, "text file (replaces the spec's \"data\")");
    app.add_option("--set", c.overrides.sets,
                   "NAME=VALUE: a fixed xgrad-train flag for every run (repeatable)");
    app.add_option("--axis", c.overrides.axes, "NAME=V1,V2,...: one more axis of the grid (repeatable)");
    app.add_option("--variant", c.overrides.variants,
                   "LABEL:NAME=VALUE,...: one more listed variant (repeatable)");
    app.add_option("--seeds", c.overrides.seeds, "N (seeds 1..N) or a list S1,S2,...");
    app.add_option("--baseline", c.overrides.baseline, "the variant the others are compared with");
    app.add_option("--steps", c.steps, "budget per run in steps")->check(CLI::PositiveNumber);
    app.add_option("--tokens", c.tokens, "budget per run in training tokens")->check(CLI::PositiveNumber);
    app.add_option("--seconds", c.seconds, "budget per run in seconds of training (steps from a timed probe)")
        ->check(CLI::PositiveNumber);
    // At most 1024 processes at a time, and 1024 threads each (xgrad-train's own bound).
    app.add_option("--jobs", c.jobs, "runs at a time (default: the number of cores)")
        ->check(CLI::Range(1, 1024));
    app.add_option("--threads", c.threads, "threads per run (default: cores / jobs)")
        ->check(CLI::Range(1, 1024));
    app.add_option("--xgrad-train", c.xgrad_train,
                   "the xgrad-train to run (default: the one beside this program)");
    app.add_flag("--replot", c.replot, "no training: the report and pictures from the runs in --out");
    app.add_flag("--dry-run", c.dry_run,
                 "check the spec and every variant's flags, print the commands, run nothing");
    app.add_flag("--quiet", c.quiet, "no progress and no report on stdout");
    if (!parse_command_line(app, args))
    {
        command.help = true;
        command.help_text = app.help();
    }
    return command;
}
}  // namespace xgrad::tools::experiment_cli
