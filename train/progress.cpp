#include "train/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace xgrad::train
{
double resident_mib()
{
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (!f)
    {
        return 0;
    }
    unsigned long long total = 0, resident = 0;
    const int read = std::fscanf(f, "%llu %llu", &total, &resident);
    std::fclose(f);
    return read == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0) : 0;
}

std::string format_duration(double seconds)
{
    if (!(seconds >= 0) || seconds > 360000)
    {
        return "--:--";
    }
    const long s = std::lround(seconds);
    char buf[32];
    if (s >= 3600)
    {
        std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    }
    else
    {
        std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
    }
    return buf;
}

namespace
{
std::string thousands(double x)
{
    std::string digits = std::to_string(std::llround(x));
    for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3)
    {
        digits.insert(static_cast<std::size_t>(i), ",");
    }
    return digits;
}
}  // namespace

progress_display::progress_display(std::FILE* out, std::uint64_t first_step, std::uint64_t last_step, bool terminal,
                                   std::uint64_t plain_every)
    : out_(out), first_step_(first_step), last_step_(last_step), terminal_(terminal),
      plain_every_(plain_every ? plain_every : 1)
{
}

std::string progress_display::line(const step_record& r, double seconds_left) const
{
    char buf[256];
    char val[32] = "";
    if (r.val_loss)
    {
        std::snprintf(val, sizeof val, "  val %.4f", *r.val_loss);
    }
    std::snprintf(buf, sizeof buf, "step %llu/%llu  loss %.4f%s  lr %.2e  %s tok/s  %s left",
                  static_cast<unsigned long long>(r.step), static_cast<unsigned long long>(last_step_),
                  r.train_loss, val, r.lr, thousands(r.tokens_per_s).c_str(),
                  format_duration(seconds_left).c_str());
    return buf;
}

// Whether this step is drawn: on a terminal at most ten times a second (plus validation steps and the
// last); otherwise every plain_every steps.
bool progress_display::due(const step_record& r) const
{
    if (r.step >= last_step_ || r.val_loss || !drew_)
    {
        return true;
    }
    if (terminal_)
    {
        return std::chrono::steady_clock::now() - last_draw_ >= std::chrono::milliseconds(100);
    }
    return r.step % plain_every_ == 0;
}

void progress_display::show(const step_record& r)
{
    if (!due(r))
    {
        return;
    }
    last_draw_ = std::chrono::steady_clock::now();
    drew_ = true;
    const std::uint64_t done = r.step > first_step_ ? r.step - first_step_ : 1;
    const double left = r.elapsed_s / static_cast<double>(done) * static_cast<double>(last_step_ - std::min(r.step, last_step_));
    const std::string text = line(r, left);
    if (!terminal_)
    {
        std::fprintf(out_, "%s\n", text.c_str());
    }
    else
    {
        const std::size_t width = 24;
        const auto filled = static_cast<std::size_t>(static_cast<double>(width) * static_cast<double>(std::min(r.step, last_step_)) /
                                                     static_cast<double>(last_step_));
        const std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
        std::fprintf(out_, "\r\x1b[K[%s] %s", bar.c_str(), text.c_str());
        if (r.val_loss && r.step < last_step_)
        {
            std::fputc('\n', out_);  // keep each validation point on screen
        }
    }
    std::fflush(out_);
}

void progress_display::finish()
{
    if (terminal_ && drew_)
    {
        std::fputc('\n', out_);
        std::fflush(out_);
    }
}

namespace
{
// The rows of an existing log up to and including `step` (header first).
std::vector<std::string> rows_through(const std::string& path, std::uint64_t step)
{
    std::ifstream in(path);
    std::vector<std::string> kept{log_header()};
    std::string line;
    bool header = true;
    while (std::getline(in, line))
    {
        if (header)
        {
            header = false;
            continue;
        }
        const std::uint64_t row_step = std::strtoull(line.c_str(), nullptr, 10);
        if (row_step >= 1 && row_step <= step)
        {
            kept.push_back(line);
        }
    }
    return kept;
}
}  // namespace

training_log::training_log(const std::string& path, bool resume, std::uint64_t keep_through_step) : path_(path)
{
    // The kept rows go to a temporary file renamed over the log, so a kill during this rewrite leaves
    // the old log whole; then rows are appended.
    const std::vector<std::string> rows =
        resume ? rows_through(path, keep_through_step) : std::vector<std::string>{log_header()};
    const std::string temp = path + ".tmp";
    std::FILE* out = std::fopen(temp.c_str(), "w");
    bool ok = out != nullptr;
    for (std::size_t i = 0; ok && i < rows.size(); ++i)
    {
        ok = std::fprintf(out, "%s\n", rows[i].c_str()) >= 0;
    }
    ok = out && std::fclose(out) == 0 && ok;
    if (!ok || std::rename(temp.c_str(), path.c_str()) != 0)
    {
        const int error = errno;
        std::remove(temp.c_str());
        throw std::runtime_error("cannot write " + path + ": " + std::strerror(error));
    }
    file_ = std::fopen(path.c_str(), "a");
    if (!file_)
    {
        throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
    }
}

training_log::~training_log()
{
    if (file_)
    {
        std::fclose(file_);
    }
}

void training_log::write(const step_record& r)
{
    char val[40] = "";
    if (r.val_loss)
    {
        std::snprintf(val, sizeof val, "%.9g", *r.val_loss);
    }
    char bpb[40] = "";
    if (r.val_bpb)
    {
        std::snprintf(bpb, sizeof bpb, "%.9g", *r.val_bpb);
    }
    char sharpness[40] = "";
    if (r.sharpness)
    {
        std::snprintf(sharpness, sizeof sharpness, "%.9g", *r.sharpness);
    }
    std::fprintf(file_, "%llu,%.9g,%s,%.9g,%.6g,%.1f,%.3f,%.2f,%s,%s\n", static_cast<unsigned long long>(r.step),
                 r.train_loss, val, r.lr, r.grad_norm, r.tokens_per_s, r.elapsed_s, r.rss_mib, bpb, sharpness);
    if (std::fflush(file_) != 0)
    {
        throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
    }
}
}  // namespace xgrad::train
