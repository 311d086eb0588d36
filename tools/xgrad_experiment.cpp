// xgrad-experiment: a grid of xgrad-train runs from a spec (docs/experiments.md, "The grid runner"):
// every variant's flags checked by xgrad-train itself before any run starts, the runs as child processes
// (as many at a time as there are cores), a stopped grid resumed, and a report with intervals and tests
// over seeds. --replot rebuilds the report from the runs on disk. The command line is parsed by
// tools/experiment_args.cpp.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiment/grid.hpp"
#include "experiment/grid_report.hpp"
#include "io/escape.hpp"
#include "io/json_limits.hpp"
#include "tools/experiment_args.hpp"
#include "tools/tool_errors.hpp"
#include "train/communicator.hpp"

using namespace xgrad::train;
namespace fs = std::filesystem;
namespace tools = xgrad::tools;
using tools::experiment_cli::experiment_command;
using tools::experiment_cli::experiment_options;

namespace
{
using tools::experiment_cli::program;

// docs/spec.md, "Exit statuses": 2 a bad flag, or an unknown flag or value in the grid spec; 1 a run or
// the report failed (a checkpoint the report cannot read among them).
const tools::error_rules errors{program, tools::wording::first_line,
                                {/*bad_value*/ 2, /*bad_file*/ 1, /*anomaly*/ 1, /*failure*/ 1}};

// A spec, grid.json or steps.json: a regular file of at most 16 MiB (a spec is a few hundred bytes, the
// grid.json of 10000 variants a few MB).
constexpr std::size_t max_json_file_bytes = std::size_t(16) << 20;

std::string read_text(const std::string& path) { return xgrad::io::read_small_file(path, max_json_file_bytes); }

// load_spec on the file `path` (none: the command line alone); its errors name the file.
grid::spec load_spec_file(const std::string& path, const grid::spec_overrides& overrides)
{
    const std::string text = path.empty() ? "" : read_text(path);
    try
    {
        return grid::load_spec(text, overrides);
    }
    catch (const std::invalid_argument& e)
    {
        throw std::invalid_argument((path.empty() ? "the command line" : path) + ": " + e.what());
    }
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

// steps.json: {variant: steps}, each a whole number of steps from 1.
std::map<std::string, std::int64_t> steps_of(const std::string& path)
{
    const auto j = xgrad::io::parse_json_bounded<nlohmann::json>(read_text(path), path);
    if (!j.is_object())
    {
        throw std::invalid_argument(path + ": must hold a JSON object of variant: steps");
    }
    std::map<std::string, std::int64_t> steps;
    for (const auto& [name, value] : j.items())
    {
        if (!value.is_number_integer() || value.get<std::int64_t>() < 1)
        {
            throw std::invalid_argument(path + ": \"" + xgrad::io::escaped(name) +
                                        "\" must be a whole number of steps from 1, got " +
                                        xgrad::io::quoted(value.dump()));
        }
        steps[name] = value.get<std::int64_t>();
    }
    return steps;
}

// The steps per variant: reused when the grid in OUT was planned from the same spec, else measured.
std::map<std::string, std::int64_t> steps_per_variant(const grid::spec& s, const std::string& out,
                                                      const grid::runner_options& o)
{
    const fs::path saved_spec = fs::path(out) / grid::grid_files::spec,
                   saved_steps = fs::path(out) / grid::grid_files::steps;
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

// The cores this process may use: the machine's, shared by the ranks mpirun started on it.
int cores_for_this_process()
{
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const char* local_ranks = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    return std::max(1, cores / std::max(1, local_ranks ? std::atoi(local_ranks) : 1));
}

// Runs at a time (--jobs, or the cores, at most the runs) and threads per run (--threads, or the cores
// shared among the jobs), on this process.
grid::runner_options runner_for(const experiment_options& c, std::size_t runs)
{
    grid::runner_options o;
    o.program = c.xgrad_train.empty() ? train_beside_me() : c.xgrad_train;
    o.progress = c.quiet ? nullptr : stdout;
    const int cores = cores_for_this_process();
    o.jobs = std::max(1, std::min(c.jobs > 0 ? c.jobs : cores, static_cast<int>(runs)));
    o.threads = c.threads > 0 ? c.threads : std::max(1, cores / o.jobs);
    return o;
}

struct grid_plan
{
    grid::spec s;
    std::vector<grid::run> runs;
    grid::runner_options o;
};

// The grid in OUT as planned before: grid.json and steps.json (--replot, and the ranks but the first).
grid_plan planned_grid(const experiment_options& c)
{
    grid_plan p;
    p.s = load_spec_file((fs::path(c.out) / grid::grid_files::spec).string(), {});
    const auto steps = steps_of((fs::path(c.out) / grid::grid_files::steps).string());
    p.runs = grid::plan_runs(p.s, steps, c.out);
    p.o = runner_for(c, p.runs.size());
    return p;
}

// The grid of the spec and flags: every variant checked and sized by xgrad-train, grid.json and
// steps.json written to OUT.
grid_plan new_grid(const experiment_options& c)
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
    grid_plan p;
    p.s = load_spec_file(c.spec_file, ov);
    p.o = runner_for(c, p.s.variants.size() * p.s.seeds.size());
    if (!fs::exists(p.o.program))
    {
        throw std::invalid_argument("no xgrad-train at " + p.o.program + " (--xgrad-train PATH)");
    }
    const bool out_existed = fs::exists(c.out);
    fs::create_directories(c.out);
    try
    {
        p.runs = grid::plan_runs(p.s, steps_per_variant(p.s, c.out, p.o), c.out);
    }
    catch (...)
    {
        if (!out_existed)  // a grid refused at its check leaves no OUT behind
        {
            std::error_code ignored;
            fs::remove(c.out, ignored);  // only while empty
        }
        throw;
    }
    return p;
}

// Every process ends with rank 0's `status` (a sum in which the others put 0).
int status_of_rank_zero(communicator& comm, int status)
{
    double shared = comm.rank() == 0 ? status : 0;
    comm.allreduce_sum_sleeping(&shared, 1);  // the others wait while rank 0 probes the variants
    return static_cast<int>(shared);
}

// Runs the grid on this process's share of it, then (rank 0) the summary; the exit status.
int run_share(const grid_plan& p, const experiment_options& c, communicator& comm)
{
    const bool leader = comm.rank() == 0;
    if (leader && p.o.progress)
    {
        std::printf("%zu runs (%zu variants x %zu seeds), %d at a time with %d thread(s) each", p.runs.size(),
                    p.s.variants.size(), p.s.seeds.size(), p.o.jobs, p.o.threads);
        if (comm.size() > 1)
        {
            std::printf(" on each of %d processes", comm.size());
        }
        std::printf("; xgrad-train: %s\n", p.o.program.c_str());
    }
    const grid::grid_outcome g = grid::run_grid(p.runs, c.out, p.o, comm);
    for (const std::string& f : g.failures)
    {
        std::fprintf(stderr, "%s: run failed: %s\n", program, f.c_str());
    }
    const std::size_t failed = g.failures.size() + g.failed_on_other_ranks;
    if (g.interrupted)
    {
        if (leader)
        {
            std::printf("stopped: %zu of %zu runs finished; run the same command again to continue\n",
                        g.finished, p.runs.size());
        }
        return 130;
    }
    if (leader)
    {
        std::printf("%zu runs finished (%zu of them before this start), %zu failed\n", g.finished, g.skipped,
                    failed);
    }
    return failed == 0 ? 0 : 1;
}

// Rank 0 plans the grid (and holds OUT's lock); then every process runs its share; then rank 0 writes the
// report. Under one process that is the whole grid.
int run(const experiment_options& c, communicator& comm)
{
    const bool leader = comm.rank() == 0;
    grid_plan p;
    std::optional<grid::grid_lock> lock;
    int status = 0;
    if (leader)
    {
        try
        {
            p = c.replot ? planned_grid(c) : new_grid(c);
            if (!c.replot && !c.dry_run)
            {
                lock.emplace(c.out);
                grid::check_run_folders(p.runs);
            }
        }
        catch (...)
        {
            status = tools::fail_with_current_exception(errors);
        }
    }
    status = status_of_rank_zero(comm, status);
    if (status != 0 || (!leader && (c.dry_run || c.replot)))
    {
        return status;
    }
    if (c.dry_run)
    {
        print_plan(p.runs, p.o);
        return 0;
    }
    if (!leader)
    {
        p = planned_grid(c);
    }
    if (!c.replot)
    {
        status = run_share(p, c, comm);
        if (status == 130 || !leader)
        {
            return status;
        }
    }
    std::string machine = cpu_model();
    if (comm.size() > 1)
    {
        machine += " (rank 0 of " + std::to_string(comm.size()) + " processes)";
    }
    grid::report_context rc{c.out, machine, p.o.jobs * comm.size(), p.o.threads};
    const std::string report = grid::write_report(p.s, p.runs, rc);
    if (!c.quiet)
    {
        std::printf("\n%s\nreport: %s\n", report.c_str(), (fs::path(c.out) / grid::grid_files::report).c_str());
    }
    return status;
}

}  // namespace

int main(int argc, char** argv)
{
    std::unique_ptr<communicator> comm;
    try
    {
        comm = make_communicator();
        const std::vector<std::string> args(argv + 1, argv + argc);
        if (comm->rank() != 0)
        {
            // The same command line on every process: rank 0 alone says what is wrong with it, or the help.
            experiment_command c;
            try
            {
                c = tools::experiment_cli::parse_experiment_arguments(args);
            }
            catch (const tools::input_error&)
            {
                return 2;
            }
            return c.help ? 0 : run(c.run, *comm);
        }
        const experiment_command c = tools::experiment_cli::parse_experiment_arguments(args);
        if (c.help)
        {
            std::fputs(c.help_text.c_str(), stdout);
            return 0;
        }
        return run(c.run, *comm);
    }
    catch (...)
    {
        const int status = tools::fail_with_current_exception(errors);
        if (comm && comm->size() > 1)
        {
            // The other processes may be waiting on this one: end without MPI's orderly exit, so that
            // mpirun sees a process fail and ends the job (the runs resume on the next start).
            std::fflush(nullptr);
            std::_Exit(status);
        }
        return status;
    }
}
