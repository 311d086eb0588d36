// xgrad-train: trains SPEC's small GPT on a text file (../shared/SPEC.md, "Training on text"). Progress
// on a terminal, plain lines otherwise; log.csv and model.safetensors in --out; --resume continues a
// run exactly; Ctrl-C stops after the current step with a checkpoint. Under `mpirun -np N` the processes
// train data-parallel: each takes its share of the global batch of N x B windows.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "train/communicator.hpp"
#include "train/trainer.hpp"

using namespace xgrad;

namespace
{
const char* const program = "xgrad-train";
volatile std::sig_atomic_t interrupted = 0;

void on_interrupt(int) { interrupted = 1; }

// One line on stderr, whatever the message holds.
int fail_with(const std::string& message, int status)
{
    std::string line = message.substr(0, message.find('\n'));
    std::fprintf(stderr, "%s: %s\n", program, line.c_str());
    return status;
}

void add_flags(CLI::App& app, train::train_options& o, std::int64_t& warmup, std::int64_t& decay)
{
    app.add_option("--data", o.data, "text file to train on (bytes are tokens)")->required();
    app.add_option("--out", o.out, "folder for model.safetensors, log.csv, loss.png, attention.png")->required();
    app.add_option("--steps", o.steps, "train up to this step")->capture_default_str();
    app.add_option("--layers", o.model.layers, "transformer blocks L")->capture_default_str();
    app.add_option("--d-model", o.model.d_model, "width d")->capture_default_str();
    app.add_option("--heads", o.model.heads, "query heads H (d % H == 0)")->capture_default_str();
    app.add_option("--kv-heads", o.model.kv_heads, "key/value heads G (H % G == 0; default H)");
    app.add_option("--block", o.model.block_size, "context length T")->capture_default_str();
    app.add_option("--batch", o.batch, "windows per step (per process under MPI)")->capture_default_str();
    app.add_option("--lr", o.lr, "peak learning rate X")->capture_default_str();
    app.add_option("--warmup", warmup, "warm-up steps W (default min(100, D / 10))");
    app.add_option("--decay-steps", decay, "cosine decay to X/10 ends at step D (default --steps)");
    app.add_option("--seed", o.seed, "seeds the initial weights and the batches")->capture_default_str();
    app.add_option("--threads", o.threads, "threads per process")->capture_default_str();
    app.add_flag("--resume", o.resume, "continue from --out/model.safetensors up to --steps");
    app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay on matrices")->capture_default_str();
    app.add_option("--clip", o.clip, "clip the global gradient norm to this")->capture_default_str();
    app.add_option("--eval-every", o.eval_every, "validation loss every so many steps (and at the last)")->capture_default_str();
    app.add_option("--eval-windows", o.eval_windows, "validation windows, evenly spaced")->capture_default_str();
    app.add_option("--save-every", o.save_every, "checkpoint every so many steps (and at the last)")->capture_default_str();
    app.add_option("--sample-tokens", o.sample_tokens, "tokens sampled at the end (0: none)")->capture_default_str();
    app.add_flag("!--no-plots", o.plots, "do not draw loss.png and attention.png");
    app.add_flag("--detect-anomaly", o.detect_anomaly, "stop at the first op that makes a NaN or Inf");
}
}  // namespace

int main(int argc, char** argv)
{
    train::train_options o;
    std::int64_t warmup = -1, decay = -1;
    bool quiet = false;
    CLI::App app{"Train a small GPT on a text file (SPEC's model; byte tokens; AdamW, warm-up + cosine)", program};
    add_flags(app, o, warmup, decay);
    app.add_flag("--quiet", quiet, "no progress output");
    try
    {
        app.parse(argc, argv);
    }
    catch (const CLI::CallForHelp&)
    {
        std::fputs(app.help().c_str(), stdout);
        return 0;
    }
    catch (const CLI::ParseError& e)
    {
        return fail_with(e.what(), 2);
    }
    if (warmup != -1)
    {
        o.warmup = warmup;
    }
    if (decay != -1)
    {
        o.decay_steps = decay;
    }
    try
    {
        auto comm = train::make_communicator();
        std::signal(SIGINT, on_interrupt);
        o.interrupt = &interrupted;
        const bool leader = comm->rank() == 0;
        std::FILE* progress = quiet || !leader ? nullptr : stdout;
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
    catch (const std::invalid_argument& e)
    {
        return fail_with(e.what(), 2);
    }
    catch (const std::exception& e)
    {
        return fail_with(e.what(), 1);
    }
}
