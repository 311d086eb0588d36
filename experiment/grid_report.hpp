// The report of a grid of runs (xgrad-experiment), built from the runs on disk alone: per variant the
// parameter count, tokens/s, final validation loss (and bits per byte when log.csv has val_bpb) as
// mean ± sd with a 95% t interval over seeds, the difference from the baseline with its interval, Welch's
// t-test (and the paired test over shared seeds), a verdict in words; loss curves (mean and a band over
// seeds, gnuplot) and each variant's attention maps for its first seed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "experiment/grid.hpp"

namespace xgrad::train::grid
{
// What one run measured, read back from its folder.
struct run_result
{
    std::string variant;
    std::uint64_t seed = 0;
    bool finished = false;
    std::int64_t steps = 0;
    double val_loss = 0;                 // at the last step
    std::optional<double> val_bpb;       // when log.csv has the column
    double tokens_per_s = 0;             // median over the run's steps
    double train_seconds = 0;            // elapsed_s summed over the run's sessions
    std::uint64_t parameters = 0;        // from model.safetensors, optimiser state left out
};

// Throws std::runtime_error naming the folder when the run has no log.csv or checkpoint.
run_result read_run(const run& r);

// Where the report's lines and numbers come from.
struct report_context
{
    std::string out;         // the grid's folder: report.md, loss-curves.png, attention-*.png go here
    std::string machine;     // e.g. the CPU model; "" to leave out
    int jobs = 1, threads = 1;
};

// Writes OUT/report.md (and the pictures; without gnuplot a note in the report instead) and returns
// the markdown. Unfinished runs are listed, not counted.
std::string write_report(const spec& s, const std::vector<run>& runs, const report_context& c);
}  // namespace xgrad::train::grid
