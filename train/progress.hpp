// What a training run shows and keeps: a progress bar on a terminal (plain lines otherwise) and log.csv.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace xgrad::train
{
// One step's numbers, as shown and logged.
struct step_record
{
    std::uint64_t step = 0;
    double train_loss = 0;
    std::optional<double> val_loss;  // measured on some steps only
    std::optional<double> val_bpb;   // val_loss in bits per byte of text, where val_loss was measured
    double lr = 0;
    double grad_norm = 0;            // global gradient norm before clipping
    double tokens_per_s = 0;         // this step's tokens over its wall time
    double elapsed_s = 0;            // since the run (or its resumption) started
    double rss_mib = 0;              // the process's resident memory after the step
    std::optional<double> sharpness; // the top Hessian eigenvalue, on steps where it was measured
};

// The resident memory of this process in MiB (from /proc/self/statm; 0 where that is not available).
double resident_mib();

// A bar rewritten in place on a terminal ("step 120/1000 [#####....] loss 2.134 val 2.201 12,345 tok/s
// 0:41 left"); plain lines every `plain_every` steps, on validation steps and at the end otherwise.
class progress_display
{
public:
    // Steps first_step + 1 .. last_step are shown (first_step > 0 when a run resumes).
    progress_display(std::FILE* out, std::uint64_t first_step, std::uint64_t last_step, bool terminal,
                     std::uint64_t plain_every);
    void show(const step_record& r);
    void finish();

private:
    bool due(const step_record& r) const;
    std::string line(const step_record& r, double seconds_left) const;
    std::FILE* out_;
    std::uint64_t first_step_;
    std::uint64_t last_step_;
    bool terminal_;
    std::uint64_t plain_every_;
    std::chrono::steady_clock::time_point last_draw_{};
    bool drew_ = false;
};

// "1:02:03" or "4:05".
std::string format_duration(double seconds);

// log.csv: a header line, then one row per step (step,train_loss,val_loss,lr,grad_norm,tokens_per_s,
// elapsed_s,rss_mib,val_bpb,sharpness); val_loss, val_bpb and sharpness empty where they were not measured.
// Each row is flushed as it is written.
class training_log
{
public:
    // A fresh log, or (resume) the existing one cut after `keep_through_step` and appended to: rows a
    // crashed run wrote after its last checkpoint are dropped, so no step appears twice. Throws
    // std::runtime_error naming the path when it cannot write.
    training_log(const std::string& path, bool resume, std::uint64_t keep_through_step);
    ~training_log();
    training_log(const training_log&) = delete;
    training_log& operator=(const training_log&) = delete;
    void write(const step_record& r);

private:
    std::string path_;
    std::FILE* file_ = nullptr;
};

inline const char* log_header()
{
    return "step,train_loss,val_loss,lr,grad_norm,tokens_per_s,elapsed_s,rss_mib,val_bpb,sharpness";
}
}  // namespace xgrad::train
