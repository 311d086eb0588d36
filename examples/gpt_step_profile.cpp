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

#include "examples/cli.hpp"
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
}  // namespace

int main(int argc, char** argv)
{
    CLI::App app{"Times (and, under a profiler, shows) one GPT training step, repeated", "gpt_step_profile"};
    std::string name = "nano";
    int steps = 50, threads = 1;
    bool every_activation = false, bf16 = false;
    double peak_gflops = 0;
    app.add_option("--config", name, "the bench's GPT size")->check(CLI::IsMember({"nano", "char", "shake"}))
        ->capture_default_str();
    app.add_option("--steps", steps, "steps to run (the first 3 are not timed)")->check(CLI::Range(4, 1000000))
        ->capture_default_str();
    app.add_option("--threads", threads, "xgrad threads")->check(CLI::Range(1, 256))->capture_default_str();
    app.add_flag("--every-activation", every_activation,
                 "keep a node for every activation (the divergence report's layout; training runs without)");
    app.add_flag("--bf16", bf16, "matrix products in bfloat16 (float32 on a CPU without bf16 products)");
    app.add_option("--peak", peak_gflops, "an FMA peak in GFLOP/s (the bench prints it), for a share")
        ->check(CLI::PositiveNumber);
    if (const auto status = examples::parse_command_line(app, argc, argv))
    {
        return *status;
    }
    const step_config& c = configs().at(name);
    const std::size_t B = c.batch, T = c.model.block_size;
    set_num_threads(threads);
    const precision_scope precision(bf16 ? matmul_precision::bf16 : matmul_precision::fp32);

    auto params = gpt_parameters<float>::init(c.model, 1);
    auto named = params.named_parameters();
    optim::adam<float> optimiser(named, optim::adamw_options(1e-4, 0.1));
    std::mt19937_64 rng(2);
    const ids_t tokens = examples::random_ids(B, T, c.model.vocab_size, rng);
    const ids_t targets = examples::random_ids(B, T, c.model.vocab_size, rng);
    gpt_options options;
    options.every_activation = every_activation;

    std::vector<double> wall_ms, cpu_ms;
    double first_loss = 0;
    for (int s = 0; s < steps; ++s)
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
            first_loss = r.loss.value()();
        }
        if (s >= 3)  // the first steps fault in the tape's pages and warm the caches
        {
            wall_ms.push_back(wall.count());
            cpu_ms.push_back(cpu);
        }
    }
    const double flop = 2.0 * 3.0 * static_cast<double>(gpt_forward_multiply_adds(c.model, B, T).total());
    const double wall = median(wall_ms);
    std::printf("%s (V %zu, L %zu, d %zu, H %zu, T %zu, B %zu), %d thread%s%s: loss at step 1 %.4f\n", name.c_str(),
                c.model.vocab_size, c.model.layers, c.model.d_model, c.model.heads, T, B, threads,
                threads == 1 ? "" : "s", bf16 ? ", bf16 products" : "", first_loss);
    std::printf("median of %zu steps: wall %.2f ms, calling thread's CPU %.2f ms; %.0f tokens/s, %.1f GFLOP/s "
                "(FLOP = 2 x 3 x forward multiply-adds)\n", wall_ms.size(), wall, median(cpu_ms),
                B * T / (wall * 1e-3), flop / (wall * 1e6));
    if (peak_gflops > 0)
    {
        std::printf("share of the given FMA peak (%.1f GFLOP/s): %.1f%%\n", peak_gflops,
                    100 * flop / (wall * 1e6) / peak_gflops);
    }
    return 0;
}
