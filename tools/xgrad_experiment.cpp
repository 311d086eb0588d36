// xgrad-experiment: a grid of xgrad-train runs from a spec (docs/experiments.md, "The grid runner"):
// every variant's flags checked by xgrad-train itself before any run starts, the runs as child processes
// (as many at a time as there are cores), a stopped grid resumed, and a report with intervals and tests
// over seeds. --replot rebuilds the report from the runs on disk.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "experiment/grid.hpp"
#include "experiment/grid_report.hpp"
#include "tools/command_line.hpp"
#include "tools/tool_errors.hpp"

using namespace xgrad::train;
namespace fs = std::filesystem;
namespace tools = xgrad::tools;

namespace
{
const char* const program = "xgrad-experiment";

// docs/spec.md, "Exit statuses": 2 a bad flag, or an unknown flag or value in the grid spec; 1 a run or
// the report failed (a checkpoint the report cannot read among them).
const tools::error_rules errors{program, tools::wording::first_line,
                                {/*bad_value*/ 2, /*bad_file*/ 1, /*anomaly*/ 1, /*failure*/ 1}};

std::string read_text(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
    {
        throw std::invalid_argument("cannot read " + path);
    }
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const std::string& path, const std::string& text)
{
    {
        std::ofstream out(path + ".tmp");
        out << text;
    }
    fs::rename(path + ".tmp", path);
}

// xgrad-train in the folder of this executable.
std::string train_beside_me()
{
    std::error_code ec;
    const fs::path me = fs::read_symlink("/proc/self/exe", ec);
    return ((ec ? fs::path(".") : me.parent_path()) / "xgrad-train").string();
}

std::string cpu_model()
{
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
    {
        if (line.rfind("model name", 0) == 0)
        {
            return line.substr(line.find(':') + 2) + ", " + std::to_string(std::thread::hardware_concurrency()) +
                   " cores";
        }
    }
    return "";
}

std::string steps_json(const std::map<std::string, std::int64_t>& steps) { return nlohmann::json(steps).dump(2) + "\n"; }

std::map<std::string, std::int64_t> steps_of(const std::string& path)
{
    return nlohmann::json::parse(read_text(path)).get<std::map<std::string, std::int64_t>>();
}

struct command_line
{
    std::string spec_file, out;
    grid::spec_overrides overrides;
    std::int64_t steps = 0, tokens = 0;
    double seconds = 0;
    int jobs = 0, threads = 0;
    std::string xgrad_train;
    bool replot = false, dry_run = false, quiet = false;
};

// The steps per variant: reused when the grid in OUT was planned from the same spec, else measured.
std::map<std::string, std::int64_t> steps_per_variant(const grid::spec& s, const std::string& out,
                                                      const grid::runner_options& o)
{
    const fs::path saved_spec = fs::path(out) / "grid.json", saved_steps = fs::path(out) / "steps.json";
    if (fs::exists(saved_spec) && fs::exists(saved_steps) && read_text(saved_spec.string()) == grid::spec_to_json(s))
    {
        return steps_of(saved_steps.string());
    }
    const auto steps = grid::check_and_size(s, out, o);
    write_text(saved_spec.string(), grid::spec_to_json(s));
    write_text(saved_steps.string(), steps_json(steps));
    return steps;
}

void print_plan(const std::vector<grid::run>& runs, const grid::runner_options& o)
{
    for (const grid::run& r : runs)
    {
        std::printf("%s", o.program.c_str());
        for (const std::string& a : r.args)
        {
            std::printf(" %s", a.c_str());
        }
        std::printf(" --threads %d\n", o.threads);
    }
}

int run(const command_line& c)
{
    grid::runner_options o;
    o.program = c.xgrad_train.empty() ? train_beside_me() : c.xgrad_train;
    o.progress = c.quiet ? nullptr : stdout;
    grid::spec s;
    std::map<std::string, std::int64_t> steps;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    o.jobs = c.jobs > 0 ? c.jobs : cores;
    if (c.replot)
    {
        s = grid::load_spec(read_text((fs::path(c.out) / "grid.json").string()), {});
        steps = steps_of((fs::path(c.out) / "steps.json").string());
    }
    else
    {
        grid::spec_overrides ov = c.overrides;
        const int budgets = (c.steps > 0) + (c.tokens > 0) + (c.seconds > 0);
        if (budgets > 1)
        {
            throw std::invalid_argument("give one of --steps, --tokens, --seconds");
        }
        ov.budget = c.steps > 0    ? "steps=" + std::to_string(c.steps)
                    : c.tokens > 0 ? "tokens=" + std::to_string(c.tokens)
                    : c.seconds > 0 ? "seconds=" + std::to_string(c.seconds)
                                    : "";
        s = grid::load_spec(c.spec_file.empty() ? "" : read_text(c.spec_file), ov);
        const int runs = static_cast<int>(s.variants.size() * s.seeds.size());
        o.jobs = std::min(o.jobs, runs);
        o.threads = c.threads > 0 ? c.threads : std::max(1, cores / o.jobs);
        if (!fs::exists(o.program))
        {
            throw std::invalid_argument("no xgrad-train at " + o.program + " (--xgrad-train PATH)");
        }
        fs::create_directories(c.out);
        steps = steps_per_variant(s, c.out, o);
    }
    o.jobs = std::min<int>(o.jobs, static_cast<int>(s.variants.size() * s.seeds.size()));
    o.threads = c.threads > 0 ? c.threads : std::max(1, cores / o.jobs);
    const std::vector<grid::run> runs = grid::plan_runs(s, steps, c.out);
    if (c.dry_run)
    {
        print_plan(runs, o);
        return 0;
    }
    int status = 0;
    if (!c.replot)
    {
        if (o.progress)
        {
            std::printf("%zu runs (%zu variants x %zu seeds), %d at a time with %d thread(s) each; xgrad-train: %s\n",
                        runs.size(), s.variants.size(), s.seeds.size(), o.jobs, o.threads, o.program.c_str());
        }
        const grid::grid_outcome g = grid::run_grid(runs, c.out, o);
        for (const std::string& f : g.failures)
        {
            std::fprintf(stderr, "%s: run failed: %s\n", program, f.c_str());
        }
        if (g.interrupted)
        {
            std::printf("stopped: %zu of %zu runs finished; run the same command again to continue\n", g.finished,
                        runs.size());
            return 130;
        }
        std::printf("%zu runs finished (%zu of them before this start), %zu failed\n", g.finished, g.skipped,
                    g.failures.size());
        status = g.failures.empty() ? 0 : 1;
    }
    grid::report_context rc{c.out, cpu_model(), o.jobs, o.threads};
    const std::string report = grid::write_report(s, runs, rc);
    if (!c.quiet)
    {
        std::printf("\n%s\nreport: %s\n", report.c_str(), (fs::path(c.out) / "report.md").c_str());
    }
    return status;
}

// The command line; nothing once --help is printed.
std::optional<command_line> parse_arguments(int argc, char** argv)
{
    command_line c;
    CLI::App app{"Run a grid of xgrad-train runs over variants and seeds, and report on them with intervals "
                 "and tests (docs/experiments.md)",
                 program};
    app.add_option("--spec", c.spec_file, "JSON spec: data, fixed, axes, variants, seeds, baseline, budget");
    app.add_option("--out", c.out, "folder for the runs, grid.json, report.md and the pictures")->required();
    app.add_option("--data", c.overrides.data, "text file (replaces the spec's \"data\")");
    app.add_option("--set", c.overrides.sets, "NAME=VALUE: a fixed xgrad-train flag for every run (repeatable)");
    app.add_option("--axis", c.overrides.axes, "NAME=V1,V2,...: one more axis of the grid (repeatable)");
    app.add_option("--variant", c.overrides.variants, "LABEL:NAME=VALUE,...: one more listed variant (repeatable)");
    app.add_option("--seeds", c.overrides.seeds, "N (seeds 1..N) or a list S1,S2,...");
    app.add_option("--baseline", c.overrides.baseline, "the variant the others are compared with");
    app.add_option("--steps", c.steps, "budget per run in steps")->check(CLI::PositiveNumber);
    app.add_option("--tokens", c.tokens, "budget per run in training tokens")->check(CLI::PositiveNumber);
    app.add_option("--seconds", c.seconds, "budget per run in seconds of training (steps from a timed probe)")
        ->check(CLI::PositiveNumber);
    app.add_option("--jobs", c.jobs, "runs at a time (default: the number of cores)")->check(CLI::PositiveNumber);
    app.add_option("--threads", c.threads, "threads per run (default: cores / jobs)")->check(CLI::PositiveNumber);
    app.add_option("--xgrad-train", c.xgrad_train, "the xgrad-train to run (default: the one beside this program)");
    app.add_flag("--replot", c.replot, "no training: the report and pictures from the runs in --out");
    app.add_flag("--dry-run", c.dry_run, "check the spec and every variant's flags, print the commands, run nothing");
    app.add_flag("--quiet", c.quiet, "no progress and no report on stdout");
    if (!tools::parse_command_line(app, std::vector<std::string>(argv + 1, argv + argc)))
    {
        std::fputs(app.help().c_str(), stdout);
        return std::nullopt;
    }
    return c;
}
}  // namespace

int main(int argc, char** argv)
{
    try
    {
        const std::optional<command_line> c = parse_arguments(argc, argv);
        return c ? run(*c) : 0;
    }
    catch (...)
    {
        return tools::fail_with_current_exception(errors);
    }
}
