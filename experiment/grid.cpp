// The grid's runner: xgrad-train child processes, at most `jobs` at a time, each run's state on disk,
// resuming, the progress line.
#include "experiment/grid.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "train/communicator.hpp"
#include "train/run_log.hpp"
#include "train/trainer.hpp"

namespace xgrad::train::grid
{
namespace fs = std::filesystem;

// ---- child processes ----
namespace
{
volatile std::sig_atomic_t stop_requested = 0;

void on_stop(int) { stop_requested = 1; }

// This process's environment without the variables Open MPI's launcher sets for its ranks: an
// xgrad-train started by a rank of `mpirun xgrad-experiment` is a process of its own, not a rank.
std::vector<std::string> environment_without_mpi()
{
    std::vector<std::string> kept;
    for (char** e = environ; *e; ++e)
    {
        const std::string entry = *e;
        if (entry.rfind("OMPI_", 0) != 0 && entry.rfind("PMIX_", 0) != 0 && entry.rfind("PMI_", 0) != 0)
        {
            kept.push_back(entry);
        }
    }
    return kept;
}

// Starts `program args...` with stdout and stderr appended to `output`. The child dies with this process
// (PR_SET_PDEATHSIG), so a runner killed by SIGKILL leaves no orphan writing into its run folder.
pid_t spawn(const std::string& program, const std::vector<std::string>& args, const std::string& output)
{
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (const std::string& a : args)
    {
        argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    const std::vector<std::string> environment = environment_without_mpi();  // built before fork: the child
    std::vector<char*> envp;                                                 // only calls what is safe there
    for (const std::string& e : environment)
    {
        envp.push_back(const_cast<char*>(e.c_str()));
    }
    envp.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0)
    {
        throw std::runtime_error("cannot start " + program + ": fork failed");
    }
    if (pid == 0)
    {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setpgid(0, 0);  // a Ctrl-C on the terminal reaches the runner alone, which then stops its children
        if (getppid() != parent)
        {
            _exit(137);
        }
        const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        const int null_in = open("/dev/null", O_RDONLY);
        if (fd < 0 || null_in < 0)
        {
            _exit(126);
        }
        dup2(null_in, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        execve(program.c_str(), argv.data(), envp.data());
        _exit(127);
    }
    return pid;
}

std::string describe_status(int status)
{
    if (WIFEXITED(status))
    {
        return "exit status " + std::to_string(WEXITSTATUS(status));
    }
    return "killed by signal " + std::to_string(WTERMSIG(status));
}

std::string last_line_of(const std::string& path)
{
    std::ifstream in(path);
    std::string line, last;
    while (std::getline(in, line))
    {
        if (!line.empty())
        {
            last = line;
        }
    }
    return last;
}

std::string read_file(const std::string& path)
{
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_atomically(const std::string& path, const std::string& text)
{
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << text;
        if (!out)
        {
            throw std::runtime_error("cannot write " + tmp);
        }
    }
    fs::rename(tmp, path);
}

std::int64_t last_logged_step(const std::string& dir)
{
    return run_log::read((fs::path(dir) / "log.csv").string()).last_step();
}

struct job
{
    std::vector<std::string> args;
    std::string output;  // where its stdout and stderr go
};

// Runs `jobs` at most `parallel` at a time: `on_start(index)` before each, `on_exit(index, status,
// still_running)` after,
// `on_tick(running)` every half second. Once SIGINT or SIGTERM arrived it starts nothing more and ends
// the running children with SIGTERM; each continues later from its latest checkpoint (--save-every).
template <class OnStart, class OnExit, class OnTick>
void run_jobs(const std::string& program, const std::vector<job>& jobs, int parallel, OnStart on_start, OnExit on_exit,
              OnTick on_tick)
{
    struct sigaction action = {};
    action.sa_handler = on_stop;
    struct sigaction old_int, old_term;
    sigaction(SIGINT, &action, &old_int);
    sigaction(SIGTERM, &action, &old_term);
    std::map<pid_t, std::size_t> running;
    std::size_t next = 0;
    bool forwarded = false;
    while (next < jobs.size() || !running.empty())
    {
        while (!stop_requested && next < jobs.size() && static_cast<int>(running.size()) < parallel)
        {
            on_start(next);
            running[spawn(program, jobs[next].args, jobs[next].output)] = next;
            ++next;
        }
        if (stop_requested && !forwarded)
        {
            for (const auto& [pid, index] : running)
            {
                kill(pid, SIGTERM);
            }
            forwarded = true;
            next = jobs.size();
        }
        int status = 0;
        const pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0 && running.count(pid))
        {
            const std::size_t index = running[pid];
            running.erase(pid);
            on_exit(index, status, running.size());
            continue;
        }
        on_tick(running.size());
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
}

// B T: the variant's --batch and --block, or xgrad-train's defaults.
double tokens_per_step(const variant& v)
{
    const train_options defaults;
    const std::string batch = flag_value(v, "batch"), block = flag_value(v, "block");
    return (batch.empty() ? static_cast<double>(defaults.batch) : std::stod(batch)) *
           (block.empty() ? static_cast<double>(defaults.model.block_size) : std::stod(block));
}

// The probe's seconds per training step: B T over the median tokens/s of steps 2 .. N-1, which leaves
// out the start-up, the final evaluation and moments when the machine was busy with something else.
double seconds_per_step(const std::string& dir, std::int64_t probe_steps, double tokens_per_step)
{
    const auto rates = run_log::read((fs::path(dir) / "log.csv").string()).numbers("tokens_per_s");
    std::vector<double> middle;
    for (const auto& [step, rate] : rates)
    {
        if (step >= 2 && step < probe_steps && rate > 0)
        {
            middle.push_back(rate);
        }
    }
    if (middle.empty())
    {
        throw std::runtime_error("the timing probe in " + dir + " logged no tokens_per_s");
    }
    std::nth_element(middle.begin(), middle.begin() + static_cast<std::ptrdiff_t>(middle.size() / 2), middle.end());
    return tokens_per_step / middle[middle.size() / 2];
}

const std::int64_t timing_probe_steps = 30;
}  // namespace

std::map<std::string, std::int64_t> check_and_size(const spec& s, const std::string& out, const runner_options& o)
{
    const bool timed = s.per_run.kind == budget::unit::seconds;
    const std::int64_t probe_steps = timed ? timing_probe_steps : 1;
    const fs::path check_dir = fs::path(out) / grid_files::check;
    fs::remove_all(check_dir);
    fs::create_directories(check_dir);
    struct removed_at_exit  // a refused or interrupted check leaves nothing of its own behind either
    {
        fs::path dir;
        ~removed_at_exit()
        {
            std::error_code ignored;
            fs::remove_all(dir, ignored);
        }
    } check_folder{check_dir};
    std::vector<job> probes;
    for (const variant& v : s.variants)
    {
        const std::string dir = (check_dir / folder_name(v.name)).string();
        const std::vector<flag> quick{{"eval-windows", "1", false}, {"eval-every", "0", false},
                                      {"save-every", "0", false},   {"sample-tokens", "0", false},
                                      {"no-plots", "", true},       {"threads", std::to_string(o.threads), false}};
        probes.push_back({run_arguments(s, v, s.seeds.front(), probe_steps, dir, quick), dir + ".out"});
    }
    std::vector<int> statuses(probes.size(), -1);
    run_jobs(
        o.program, probes, o.jobs, [](std::size_t) {}, [&](std::size_t i, int status, std::size_t) { statuses[i] = status; },
        [](std::size_t) {});
    if (stop_requested)
    {
        throw std::runtime_error("interrupted while checking the variants");
    }
    std::map<std::string, std::int64_t> steps;
    for (std::size_t i = 0; i < probes.size(); ++i)
    {
        const variant& v = s.variants[i];
        if (!(WIFEXITED(statuses[i]) && WEXITSTATUS(statuses[i]) == 0))
        {
            const std::string why = last_line_of(probes[i].output);
            throw std::invalid_argument("variant " + v.name + ": " + (why.empty() ? describe_status(statuses[i]) : why));
        }
        if (timed)
        {
            const double per_step =
                seconds_per_step((check_dir / folder_name(v.name)).string(), probe_steps, tokens_per_step(v));
            steps[v.name] = std::max<std::int64_t>(1, static_cast<std::int64_t>(s.per_run.amount / per_step));
        }
        else if (s.per_run.kind == budget::unit::tokens)
        {
            steps[v.name] =
                std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(s.per_run.amount / tokens_per_step(v))));
        }
        else
        {
            steps[v.name] = static_cast<std::int64_t>(std::llround(s.per_run.amount));
        }
    }
    return steps;
}

// ---- the grid ----
namespace
{
std::string joined(const std::vector<std::string>& args)
{
    std::string text;
    for (const std::string& a : args)
    {
        text += a + "\n";
    }
    return text;
}

bool is_finished(const run& r) { return fs::exists(fs::path(r.dir) / "finished"); }

// Refuses a run folder whose recorded command differs from the planned one.
void check_recorded_command(const run& r)
{
    const fs::path recorded = fs::path(r.dir) / "command.txt";
    if (fs::exists(recorded) && read_file(recorded.string()) != joined(r.args))
    {
        throw std::invalid_argument("run " + r.dir + " was started with other flags (see its command.txt); "
                                    "use another --out or remove that folder");
    }
}

std::size_t count_finished(const std::vector<run>& runs)
{
    return static_cast<std::size_t>(std::count_if(runs.begin(), runs.end(), is_finished));
}

std::string host_name()
{
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    return name;
}

// This process's share of the unfinished runs: every size-th from its rank on.
std::vector<const run*> my_share(const std::vector<const run*>& pending, const communicator& comm)
{
    std::vector<const run*> mine;
    for (std::size_t i = static_cast<std::size_t>(comm.rank()); i < pending.size();
         i += static_cast<std::size_t>(comm.size()))
    {
        mine.push_back(pending[i]);
    }
    return mine;
}

std::string clock_text(double seconds)
{
    const long s = std::lround(std::max(0.0, seconds));
    char text[32];
    if (s >= 3600)
    {
        std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, s / 60 % 60);
    }
    else
    {
        std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
    }
    return text;
}

// Steps done over the whole grid: finished runs count fully, running or stopped ones by log.csv.
std::int64_t steps_done(const std::vector<run>& runs)
{
    std::int64_t done = 0;
    for (const run& r : runs)
    {
        done += is_finished(r) ? r.steps : std::min(r.steps, last_logged_step(r.dir));
    }
    return done;
}

class progress_line
{
public:
    progress_line(const std::vector<run>& runs, std::FILE* to)
        : runs_(runs), to_(to), terminal_(to && isatty(fileno(to))), start_(clock::now()), at_start_(steps_done(runs))
    {
        for (const run& r : runs)
        {
            total_ += r.steps;
        }
    }

    double elapsed() const { return std::chrono::duration<double>(clock::now() - start_).count(); }

    // A line on every change in the number of finished runs, otherwise every 2 s (terminal) or 60 s.
    void show(std::size_t finished, std::size_t running, bool force = false)
    {
        const double now = elapsed();
        if (!to_ || (!force && finished == shown_finished_ && now - shown_at_ < (terminal_ ? 2 : 60)))
        {
            return;
        }
        shown_finished_ = finished;
        shown_at_ = now;
        const std::int64_t done = steps_done(runs_);
        const double rate = static_cast<double>(done - at_start_) / std::max(now, 1e-9);
        const std::string eta = rate > 0 ? clock_text(static_cast<double>(total_ - done) / rate) : "?";
        std::fprintf(to_, "%sgrid: %zu/%zu runs finished, %zu running, %.0f%% of the steps, %s elapsed, ETA %s%s",
                     terminal_ ? "\r" : "", finished, runs_.size(), running,
                     100.0 * static_cast<double>(done) / static_cast<double>(std::max<std::int64_t>(total_, 1)),
                     clock_text(now).c_str(), eta.c_str(), terminal_ ? "   " : "\n");
        std::fflush(to_);
    }

    void end() const
    {
        if (to_ && terminal_)
        {
            std::fputc('\n', to_);
        }
    }

private:
    using clock = std::chrono::steady_clock;
    const std::vector<run>& runs_;
    std::FILE* to_;
    bool terminal_;
    clock::time_point start_;
    std::int64_t at_start_ = 0, total_ = 0;
    std::size_t shown_finished_ = static_cast<std::size_t>(-1);
    double shown_at_ = 0;
};
}  // namespace

grid_lock::grid_lock(const std::string& out)
{
    const std::string path = (fs::path(out) / grid_files::lock).string();
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0 || flock(fd_, LOCK_EX | LOCK_NB) != 0)
    {
        if (fd_ >= 0)
        {
            close(fd_);
        }
        throw std::invalid_argument("another xgrad-experiment is running on " + out);
    }
}

grid_lock::~grid_lock() { close(fd_); }

void check_run_folders(const std::vector<run>& runs)
{
    for (const run& r : runs)
    {
        check_recorded_command(r);
    }
}

grid_outcome run_grid(const std::vector<run>& runs, const std::string& out, const runner_options& o)
{
    fs::create_directories(out);
    const grid_lock lock(out);
    check_run_folders(runs);
    communicator single;
    return run_grid(runs, out, o, single);
}

grid_outcome run_grid(const std::vector<run>& runs, const std::string& out, const runner_options& o,
                      communicator& comm)
{
    const bool leader = comm.rank() == 0;
    grid_outcome outcome;
    std::vector<const run*> pending;
    for (const run& r : runs)
    {
        if (is_finished(r))
        {
            ++outcome.skipped;
        }
        else
        {
            pending.push_back(&r);
        }
    }
    double listed = 0;  // every process lists the unfinished runs before any starts one
    comm.allreduce_sum_sleeping(&listed, 1);
    pending = my_share(pending, comm);
    std::vector<job> jobs;
    for (const run* r : pending)
    {
        fs::create_directories(r->dir);
        const bool resume = fs::exists(fs::path(r->dir) / "model.safetensors");
        job j{r->args, (fs::path(r->dir) / "train.out").string()};
        j.args.insert(j.args.end(), {"--threads", std::to_string(o.threads)});
        if (resume)
        {
            j.args.push_back("--resume");
        }
        jobs.push_back(j);
    }
    // The wall-clock time of this session, kept up to date on disk by rank 0 (the report sums the sessions).
    const std::string session = (fs::path(out) / ("session-" + std::to_string(std::time(nullptr)) + ".txt")).string();
    progress_line progress(runs, leader ? o.progress : nullptr);
    std::size_t finished_here = 0;
    const std::string where = comm.size() == 1 ? ""
                                               : " on rank " + std::to_string(comm.rank()) + " of " +
                                                     std::to_string(comm.size()) + " (" + host_name() + ")";
    auto on_start = [&](std::size_t i) {
        const run& r = *pending[i];
        write_atomically((fs::path(r.dir) / "command.txt").string(), joined(r.args));
        std::ofstream(fs::path(r.dir) / "attempts.txt", std::ios::app)
            << (jobs[i].args.back() == "--resume" ? "resume" : "fresh") << where << "\n";
    };
    auto on_exit = [&](std::size_t i, int status, std::size_t running) {
        const run& r = *pending[i];
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        {
            write_atomically((fs::path(r.dir) / "finished").string(), std::to_string(r.steps) + "\n");
            ++finished_here;
        }
        else if (!stop_requested)
        {
            outcome.failures.push_back(r.variant + "/seed-" + std::to_string(r.seed) + ": " + describe_status(status) +
                                       ": " + last_line_of(jobs[i].output));
        }
        progress.show(count_finished(runs), running, true);
    };
    auto on_tick = [&](std::size_t running) {
        if (leader)
        {
            write_atomically(session, std::to_string(progress.elapsed()) + "\n");
        }
        progress.show(count_finished(runs), running);
    };
    run_jobs(o.program, jobs, o.jobs, on_start, on_exit, on_tick);

    // Every rank's counts: runs finished, runs failed, whether it was stopped.
    double counts[3] = {static_cast<double>(finished_here), static_cast<double>(outcome.failures.size()),
                        stop_requested ? 1.0 : 0.0};
    comm.allreduce_sum_sleeping(counts, 3);
    if (leader)
    {
        write_atomically(session, std::to_string(progress.elapsed()) + "\n");  // the last rank's end
    }
    progress.end();
    outcome.finished = outcome.skipped + static_cast<std::size_t>(counts[0]);
    outcome.failed_on_other_ranks = static_cast<std::size_t>(counts[1]) - outcome.failures.size();
    outcome.interrupted = counts[2] > 0;
    return outcome;
}
}  // namespace xgrad::train::grid
