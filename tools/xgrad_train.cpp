// xgrad-train: trains docs/spec.md's small GPT on a text file (docs/spec.md, "Training on text"). Progress
// on a terminal, plain lines otherwise; log.csv and model.safetensors in --out; --resume continues a
// run exactly; Ctrl-C stops after the current step with a checkpoint. Under `mpirun -np N` the processes
// train data-parallel: each takes its share of the global batch of N x B windows.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "kernels/precision.hpp"
#include "tools/tool_errors.hpp"
#include "tools/train_args.hpp"
#include "train/option_error.hpp"
#include "train/communicator.hpp"
#include "train/trainer.hpp"

using namespace xgrad;

namespace
{
const char* const program = tools::train_cli::train_program;
volatile std::sig_atomic_t interrupted = 0;

void on_interrupt(int) { interrupted = 1; }

// Ctrl-C is taken by one thread that waits for it (sigwait); every other thread blocks SIGINT, so the
// signal never lands inside a computing thread. (Delivered asynchronously it could arrive inside a JIT
// GEMM kernel, and about one Ctrl-C in five then corrupted the heap.) Constructed first in main, before
// any library starts a thread, so that every thread inherits the blocked mask.
class interrupt_watcher
{
public:
    interrupt_watcher()
    {
        // A handler, not SIG_IGN (which a shell gives background jobs): an ignored signal is discarded
        // before sigwait could see it. The handler itself never runs while the mask blocks SIGINT.
        std::signal(SIGINT, on_interrupt);
        sigemptyset(&set_);
        sigaddset(&set_, SIGINT);
        pthread_sigmask(SIG_BLOCK, &set_, nullptr);
        thread_ = std::thread([this] {
            int signal = 0;
            while (sigwait(&set_, &signal) == 0 && !done_)
            {
                interrupted = 1;
            }
        });
    }
    ~interrupt_watcher()
    {
        done_ = true;
        pthread_kill(thread_.native_handle(), SIGINT);  // wakes the sigwait
        thread_.join();
    }
    interrupt_watcher(const interrupt_watcher&) = delete;
    interrupt_watcher& operator=(const interrupt_watcher&) = delete;

private:
    sigset_t set_;
    std::atomic<bool> done_{false};
    std::thread thread_;
};

// docs/spec.md, "Exit statuses": 2 bad flags or flag values, a malformed checkpoint, a run that needs more
// memory than is available; 1 any other failure (an anomaly that --detect-anomaly finds among them).
const tools::error_rules errors{program, tools::wording::first_line,
                                {/*bad_value*/ 2, /*bad_file*/ 2, /*anomaly*/ 1, /*failure*/ 1}};

// The help text, or the run and its summary on stdout; the exit status.
int run(tools::train_cli::train_command command)
{
    if (command.help)
    {
        std::fputs(command.help_text.c_str(), stdout);
        return 0;
    }
    train::train_options& o = command.run;
    const bool quiet = command.quiet;
    auto comm = train::make_communicator();
    o.interrupt = &interrupted;
    const bool leader = comm->rank() == 0;
    std::FILE* progress = quiet || !leader ? nullptr : stdout;
    // docs/spec.md, "Training on text": --precision bf16 rounds every matrix product's operands
    const precision_scope precision(parse_matmul_precision(command.precision.c_str()));
    const train::train_summary s = train::run_training(o, progress, isatty(STDOUT_FILENO) != 0, *comm);
    if (!leader)
    {
        return 0;
    }
    if (s.first_step >= o.steps)
    {
        std::printf("%s/model.safetensors is already at step %lld; nothing to do\n", o.out.c_str(),
                    static_cast<long long>(s.first_step));
        return 0;
    }
    if (s.interrupted)
    {
        std::printf("interrupted: checkpoint at step %lld; add --resume to continue\n", static_cast<long long>(s.last_step));
        return 130;
    }
    std::printf("step %lld: train loss %.4f, validation loss %.4f, %.0f tokens/s (median), %llu parameters",
                static_cast<long long>(s.last_step), s.train_loss, s.val_loss, s.tokens_per_s,
                static_cast<unsigned long long>(s.parameters));
    if (comm->size() > 1)
    {
        std::printf(", %d processes, %.3f s in allreduce", comm->size(), comm->allreduce_seconds());
    }
    std::printf("\n");
    if (!s.sample.empty())
    {
        std::printf("--- sample ---\n%s\n--------------\n", s.sample.c_str());
    }
    return 0;
}
}  // namespace

int main(int argc, char** argv)
{
    const interrupt_watcher watcher;
    try
    {
        return run(tools::train_cli::parse_train_arguments(std::vector<std::string>(argv + 1, argv + argc)));
    }
    catch (const train::option_error& e)  // the library names option fields; say them as flags
    {
        return tools::fail_with(errors, e.problem == train::option_problem::bad_value ? 2 : 1,
                                e.message(tools::train_cli::flag_of_field));
    }
    catch (...)
    {
        return tools::fail_with_current_exception(errors);
    }
}
