// A grid of xgrad-train runs (xgrad-experiment): a spec names fixed flags, axes or listed variants,
// seeds, a baseline and a budget per run; the runner starts xgrad-train child processes, as many at a
// time as there are cores, and keeps each run's state on disk so that a stopped grid resumes (finished
// runs are skipped, an interrupted one continues from its latest checkpoint with --resume); under mpirun
// the processes share the runs out. docs/experiments.md documents the spec.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "train/communicator.hpp"

namespace xgrad::train::grid
{
// One xgrad-train flag: `--name value`, or `--name` alone when `is_switch`.
struct flag
{
    std::string name;  // without the leading "--"
    std::string value;
    bool is_switch = false;
};

struct variant
{
    std::string name;
    std::vector<flag> flags;  // the fixed flags with these added or replaced
};

// How long each run trains: a number of steps, of training tokens (steps = ceil(tokens / (B T))), or
// of wall-clock seconds (steps chosen from a short timed probe run of each variant).
struct budget
{
    enum class unit
    {
        steps,
        tokens,
        seconds
    };
    unit kind = unit::steps;
    double amount = 0;
};

struct spec
{
    std::string data;
    std::vector<flag> fixed;
    std::vector<variant> variants;  // the axes' product first, then the listed variants
    std::vector<std::uint64_t> seeds;
    std::string baseline;           // a variant's name (default: the first)
    budget per_run;
};

// What the command line adds to or changes in a spec file. Values are JSON when they parse as JSON
// (numbers, true, false), strings otherwise.
struct spec_overrides
{
    std::string data;
    std::vector<std::string> sets;      // "name=value": a fixed flag
    std::vector<std::string> axes;      // "name=v1,v2,...": one more axis
    std::vector<std::string> variants;  // "NAME:name=value,name=value"
    std::string seeds;                  // "N" (seeds 1..N) or "a,b,c"
    std::string baseline;
    std::string budget;                 // "steps=N", "tokens=N" or "seconds=S"
};

// Parses and checks a spec (JSON text; empty for none) with the overrides applied. Throws
// std::invalid_argument naming the key: a flag the runner sets itself (--out, --seed, --steps, ...),
// an empty axis, duplicate variant names, an unknown baseline, no data, no budget, no seeds.
spec load_spec(const std::string& json_text, const spec_overrides& overrides);

// The spec as JSON with every variant listed (no axes): load_spec reads it back to the same spec.
std::string spec_to_json(const spec& s);

// The value of `name` for variant `v` ("" when absent).
std::string flag_value(const variant& v, const std::string& name);

struct run
{
    std::string variant;
    std::uint64_t seed = 0;
    std::string dir;                // OUT/<variant>/seed-<seed>
    std::int64_t steps = 0;
    std::vector<std::string> args;  // xgrad-train's arguments, without --threads and --resume
};

// xgrad-train's arguments for variant `v` of `s` (without --threads and --resume); `replaced` flags take
// the place of the variant's own.
std::vector<std::string> run_arguments(const spec& s, const variant& v, std::uint64_t seed, std::int64_t steps,
                                       const std::string& dir, const std::vector<flag>& replaced = {});

// The runs of a grid in order: seed by seed, every variant for each (a grid stopped early stays
// balanced across variants); `steps` per variant name.
std::vector<run> plan_runs(const spec& s, const std::map<std::string, std::int64_t>& steps, const std::string& out);

// A variant's name as a folder name: letters, digits and ".=+-" kept, anything else '_'.
std::string folder_name(const std::string& variant_name);

// What the runner itself keeps in --out beside the variants' folders (with their temporaries NAME.tmp...):
// a variant whose folder would take one of these names, or start with '.', is refused (grid_spec.cpp).
namespace grid_files
{
constexpr const char* report = "report.md";
constexpr const char* loss_curves = "loss-curves.png";
constexpr const char* curves = "curves";         // one CSV per variant
constexpr const char* spec = "grid.json";        // the spec as run, for --resume
constexpr const char* steps = "steps.json";      // each variant's steps, for --resume
constexpr const char* lock = ".lock";            // one runner at a time
constexpr const char* check = ".check";          // the check stage's runs
constexpr const char* all[] = {report, loss_curves, curves, spec, steps, lock, check};
}  // namespace grid_files

struct runner_options
{
    std::string program;  // the xgrad-train executable
    int jobs = 1;         // processes at a time
    int threads = 1;      // --threads of each
    std::FILE* progress = nullptr;
};

// Checks every variant's flags by running xgrad-train on them for a step or, for a budget in seconds,
// `probe_steps` (in OUT/.check, removed afterwards); returns the steps per variant. Throws
// std::invalid_argument with xgrad-train's own message and the variant's name when a probe fails.
std::map<std::string, std::int64_t> check_and_size(const spec& s, const std::string& out, const runner_options& o);

struct grid_outcome
{
    std::size_t finished = 0;  // runs finished, including those finished before (on every rank)
    std::size_t skipped = 0;   // already finished when this call began
    std::vector<std::string> failures;  // this process's: "variant/seed-N: last line of its output"
    std::size_t failed_on_other_ranks = 0;  // under mpirun: failures the other ranks reported
    bool interrupted = false;               // on any rank
};

// Holds an exclusive lock on OUT/.lock while it lives (the kernel drops it if the process dies). Throws
// std::invalid_argument when another xgrad-experiment holds it.
class grid_lock
{
public:
    explicit grid_lock(const std::string& out);
    ~grid_lock();
    grid_lock(const grid_lock&) = delete;
    grid_lock& operator=(const grid_lock&) = delete;

private:
    int fd_ = -1;
};

// Refuses (std::invalid_argument) a run folder whose command.txt differs from the planned command.
void check_run_folders(const std::vector<run>& runs);

// Runs every unfinished run, after taking the lock and checking the run folders. SIGINT or SIGTERM ends
// the children (they resume from their latest checkpoint on the next call) and returns.
grid_outcome run_grid(const std::vector<run>& runs, const std::string& out, const runner_options& o);

// The same across the processes of `comm` (mpirun -np N xgrad-experiment): every process calls it with the
// same runs once rank 0 holds the lock and has checked the run folders. The unfinished runs, listed by all
// before any starts, are dealt out in turn (run i to rank i mod N), each taken whole by one process and
// run `o.jobs` at a time there; rank 0 alone shows progress and records the session's wall-clock time.
// Returns on every rank once every rank is done, with the counts of all of them.
grid_outcome run_grid(const std::vector<run>& runs, const std::string& out, const runner_options& o,
                      communicator& comm);
}  // namespace xgrad::train::grid
