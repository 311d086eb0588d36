// One GPT training step, repeated: what docs/performance.md profiles. Each step is what a training loop
// does (fresh tape, forward with the loss, backward, AdamW, gradients reset), on the bench's three sizes;
// the program prints the median wall time and the median CPU time of the calling thread per step, and
// the share of the FMA peak a given peak implies. Run it under a profiler:
//
//   perf record -e cpu-clock -g ./build/bin/gpt_step_profile --config nano --steps 400
//   perf report --no-children --sort dso,sym
//
// Usage: gpt_step_profile [--config nano|char|shake] [--steps N] [--threads N] [--every-activation]
//                         [--bf16] [--peak GFLOPS]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "examples/command_line.hpp"
#include "examples/random_ids.hpp"
#include "kernels/parallel.hpp"
#include "kernels/precision.hpp"
#include "models/gpt.hpp"
#include "optim/optim.hpp"

using namespace xgrad;
using namespace xgrad::models;

namespace
{
struct step_config
{
    gpt_config model;
    std::size_t batch;
};

// The bench's GPT sizes (bench/main.cpp): V, block_size = T, L, d, H; and B.
const std::map<std::string, step_config>& configs()
{
    static const std::map<std::string, step_config> all{
        {"nano", {{65, 64, 2, 64, 4}, 16}},
        {"char", {{65, 128, 4, 128, 4}, 16}},
        {"shake", {{65, 256, 6, 384, 6}, 8}},
    };
    return all;
}

double thread_cpu_ms()
{
    timespec now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return now.tv_sec * 1e3 + now.tv_nsec * 1e-6;
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct profile_options
{
    std::string config = "nano";
    int steps = 50, threads = 1;
    bool every_activation = false, bf16 = false;
    double peak_gflops = 0;  // 0: no share printed
};

void declare_options(examples::command_line& cli, profile_options& o)
{
    cli.add_option("--config", o.config, "the bench's GPT size").one_of({"nano", "char", "shake"});
    cli.add_option("--steps", o.steps, "steps to run (the first 3 are not timed)").range(4, 1000000);
    cli.add_option("--threads", o.threads, "xgrad threads").range(1, 256);
    cli.add_flag("--every-activation", o.every_activation,
                 "keep a node for every activation (the divergence report's layout; training runs without)");
    cli.add_flag("--bf16", o.bf16, "matrix products in bfloat16 (float32 on a CPU without bf16 products)");
    cli.add_option("--peak", o.peak_gflops, "an FMA peak in GFLOP/s (the bench prints it), for a share").positive();
}

struct step_times
{
    std::vector<double> wall_ms, cpu_ms;  // of the timed steps
    double first_loss = 0;
};

// `steps` training steps as a training loop runs them: fresh tape, forward with the loss, backward,
// AdamW, gradients reset. The first 3 fault in the tape's pages and warm the caches, and are not timed.
step_times run_steps(const step_config& c, const profile_options& o)
{
    auto params = gpt_parameters<float>::init(c.model, 1);
    auto named = params.named_parameters();
    optim::adam<float> optimiser(named, optim::adamw_options(1e-4, 0.1));
    std::mt19937_64 rng(2);
    const std::size_t T = c.model.block_size;
    const ids_t tokens = examples::random_ids(c.batch, T, c.model.vocab_size, rng);
    const ids_t targets = examples::random_ids(c.batch, T, c.model.vocab_size, rng);
    gpt_options options;
    options.every_activation = o.every_activation;

    step_times times;
    for (int s = 0; s < o.steps; ++s)
    {
        const auto wall_start = std::chrono::steady_clock::now();
        const double cpu_start = thread_cpu_ms();
        params.zero_grad();
        tape<float> t;
        const auto r = gpt_forward(t, params, tokens, &targets, options);
        t.backward(r.loss);
        optimiser.step();
        const double cpu = thread_cpu_ms() - cpu_start;
        const std::chrono::duration<double, std::milli> wall = std::chrono::steady_clock::now() - wall_start;
        if (s == 0)
        {
            times.first_loss = r.loss.value()();
        }
        if (s >= 3)
        {
            times.wall_ms.push_back(wall.count());
            times.cpu_ms.push_back(cpu);
        }
    }
    return times;
}

void report(const step_config& c, const profile_options& o, const step_times& times)
{
    const std::size_t B = c.batch, T = c.model.block_size;
    const double flop = 2.0 * 3.0 * static_cast<double>(gpt_forward_multiply_adds(c.model, B, T).total());
    const double wall = median(times.wall_ms);
    const double gflops = flop / (wall * 1e6);
    std::printf("%s (V %zu, L %zu, d %zu, H %zu, T %zu, B %zu), %d thread%s%s: loss at step 1 %.4f\n",
                o.config.c_str(), c.model.vocab_size, c.model.layers, c.model.d_model, c.model.heads, T, B,
                o.threads, o.threads == 1 ? "" : "s", o.bf16 ? ", bf16 products" : "", times.first_loss);
    std::printf("median of %zu steps: wall %.2f ms, calling thread's CPU %.2f ms; %.0f tokens/s, %.1f GFLOP/s "
                "(FLOP = 2 x 3 x forward multiply-adds)\n",
                times.wall_ms.size(), wall, median(times.cpu_ms), B * T / (wall * 1e-3), gflops);
    if (o.peak_gflops > 0)
    {
        std::printf("share of the given FMA peak (%.1f GFLOP/s): %.1f%%\n", o.peak_gflops,
                    100 * gflops / o.peak_gflops);
    }
}
}  // namespace

int main(int argc, char** argv)
{
    examples::command_line cli{"Times (and, under a profiler, shows) one GPT training step, repeated", "gpt_step_profile"};
    profile_options o;
    declare_options(cli, o);
    if (const auto status = cli.parse(argc, argv))
    {
        return *status;
    }
    const step_config& c = configs().at(o.config);
    set_num_threads(o.threads);
    const precision_scope precision(o.bf16 ? matmul_precision::bf16 : matmul_precision::fp32);
    report(c, o, run_steps(c, o));
    return 0;
}
