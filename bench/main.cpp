// xgrad vs LibTorch, side by side in one process: MHA self-attention forward + backward (causal mask,
// loss = sum(Y * G)) at five sizes, float32 and float64, one and two threads; plus the machine's FMA peak
// measured in the same run (every rate is reported as a share of it), the GEMM backend table, the
// 512^3 GEMM through xgrad's door and the per-op overhead of a chain of tiny adds. The harness is our own: warm-up, then rounds that
// interleave the implementations (rotating which goes first) so machine noise hits all of them, and
// medians over the rounds. Every float32 MHA and GPT row also runs xgrad at bf16 matmul precision and
// LibTorch under CPU autocast to bfloat16 when the CPU has bfloat16 dot products (--no-bf16: not).
// Without them xgrad's bf16 precision runs float32, and LibTorch's autocast was measured (AMD EPYC, AVX2)
// to disagree with float32 by 4% in Y and 8% in dW_Q at the medium size: no same-precision peer to time.
// Prints one table per dtype and writes the same rows as JSON.
//
//   xgrad_bench [--json PATH] [--quick] [--sizes tiny,small,...] [--dtypes f32,f64] [--threads 1,2]
//               [--budget SECONDS] [--min-reps N] [--max-reps N] [--no-bf16] [--window-T 1024|none]
#include <stdlib.h>
#include <time.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.hpp"

extern "C"
{
// OpenBLAS's own entry points (its cblas.h is kept out of this file; both libraries share this library).
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
}

namespace bench
{
void blas_threads(int n)
{
    openblas_set_num_threads(n);
}

int blas_threads()
{
    return openblas_get_num_threads();
}
}  // namespace bench

namespace
{
using bench::chain_case;
using bench::mha_case;
using bench::mha_problem;

struct size_spec
{
    std::string name;
    std::size_t B, T, d, H;
};

const std::vector<size_spec> all_sizes = {
    {"tiny", 1, 16, 32, 4},       {"small", 4, 64, 128, 4},  {"medium", 8, 128, 256, 8},
    {"large", 8, 256, 512, 8},    {"xl", 4, 512, 1024, 16},
};

struct settings
{
    std::string json_path = "mha_bench.json";
    std::vector<std::string> sizes{"tiny", "small", "medium", "large", "xl"};
    std::vector<std::string> dtypes{"f32", "f64"};
    std::vector<int> threads{1, 2};
    double budget_s = 3.0;  // seconds of timed rounds per (size, dtype, threads), before the clamps
    int min_reps = 5;       // at least this many rounds ...
    int min_reps_slow = 3;  // ... or this many when one round takes over 2 s (xl)
    int max_reps = 31;
    int chain_length = 1000;
    int chain_width = 4;
    int chain_reps = 41;
    int gemm_n = 512;
    int gemm_reps = 11;
    std::vector<std::string> gpt_configs{"nano", "char", "shake"};
    std::vector<std::string> decode_configs{"stories15M", "nano", "char", "shake"};
    int decode_rounds = 5;     // timed rounds of block_size tokens per decode row
    int decode_load_runs = 5;  // fresh processes per load measurement
    bool bf16 = true;  // the bf16 columns of the float32 MHA and GPT rows (--no-bf16: none)
    std::vector<std::size_t> window_lengths{1024};  // T of the sliding-window rows (--window-T)
};

// docs/spec.md's small GPT at three sizes (V, L, d, H, T, B), trained with AdamW, float32.
const std::vector<bench::gpt_spec> all_gpt_configs = {
    {"nano", 65, 2, 64, 4, 64, 16},
    {"char", 65, 4, 128, 4, 128, 16},
    {"shake", 65, 6, 384, 6, 256, 8},
};

struct gpt_row
{
    bench::gpt_spec spec;
    int threads, reps;
    double xgrad_ms, libtorch_ms, ratio, tokens_per_s, gflops, fma_peak_gflops;
    double loss_first, loss_second;  // xgrad's losses of the two untimed steps (LibTorch's agreed)
    double xgrad_cpu_ms, libtorch_cpu_ms;  // the calling thread's CPU time (all the work at one thread)
    // bf16: xgrad at bf16 matmul precision, LibTorch under CPU autocast to bfloat16 (has_bf16 when run)
    bool has_bf16;
    double xgrad_bf16_ms, libtorch_bf16_ms, xgrad_bf16_cpu_ms, libtorch_bf16_cpu_ms, loss_bf16_first;
};

struct row
{
    std::string size, dtype;
    std::size_t B, T, d, H;
    int threads, reps;
    double xgrad_ms, libtorch_ms, libtorch_nn_ms, ratio, gflops, libtorch_gflops, peak_gflops, fma_peak_gflops;
    double fused_ms, fused_ratio, fused_gflops;  // xgrad with the fused attention op
    // Medians of the calling thread's CPU time: at one thread all of a step's work, untouched by other
    // processes taking turns on a shared machine (LibTorch: the faster of its two paths).
    double xgrad_cpu_ms, fused_cpu_ms, libtorch_cpu_ms;
    std::size_t tape_bytes, libtorch_bytes, fused_tape_bytes;
    // float32 rows: the fused path at bf16 matmul precision, LibTorch composed under autocast to bfloat16
    bool has_bf16;
    double xgrad_bf16_ms, libtorch_bf16_ms, xgrad_bf16_cpu_ms, libtorch_bf16_cpu_ms;
};

// The fused attention op alone, forward + backward (float32, causal) at length T with the batch, width and
// heads of the large MHA size: the sliding window w = T / 8 against full causal attention.
struct window_row
{
    std::size_t B, H, T, dh, window;
    int threads, reps;
    double full_ms, window_ms, full_cpu_ms, window_cpu_ms;
    std::uint64_t full_multiply_adds, window_multiply_adds;  // the forward's work, as the op counts it
};

struct peak_row
{
    std::string dtype;
    int threads;
    double gflops;  // 512^3 through xgrad::kernels::gemm, from the median time
    double best_gflops;
    double fma_gflops;  // the FMA-loop peak at this thread count: what every rate is a share of
};

struct overhead_row
{
    std::string dtype;
    int threads;
    double xgrad_us, libtorch_us;
    double xgrad_cpu_us, libtorch_cpu_us;  // the calling thread's CPU time (the chain runs on it)
};

[[noreturn]] void die(const std::string& what)
{
    std::cerr << "\n*** xgrad_bench: " << what << "\n";
    std::exit(2);
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class F>
double time_ms(F&& f)
{
    const auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Like time_ms, in the calling thread's CPU time: what one-thread work costs regardless of other
// processes on a shared machine.
template <class F>
double thread_ms(F&& f)
{
    auto now = [] {
        timespec t{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
    };
    const double start = now();
    f();
    return now() - start;
}

// One round: every implementation's step once, starting with impls[first] (the first one rotates, so no
// implementation always runs on caches the previous one warmed); its wall and thread CPU times are kept
// when `keep`. Returns the round's wall time in ms.
template <class Impl>
double interleaved_round(std::vector<Impl>& impls, std::size_t first, bool keep)
{
    double total = 0;
    for (std::size_t k = 0; k < impls.size(); ++k)
    {
        auto& im = impls[(first + k) % impls.size()];
        bench::blas_threads(im.blas);
        double cpu = 0;
        const double ms = time_ms([&] { cpu = thread_ms([&] { im.c->step(); }); });
        total += ms;
        if (keep)
        {
            im.times.push_back(ms);
            im.cpu_times.push_back(cpu);
        }
    }
    bench::blas_threads(1);
    return total;
}

// The timed rounds after a warm-up round of `warm_ms`: as many as fill the budget, at least `floor` and
// at most --max-reps. Returns how many ran.
template <class Impl>
int timed_rounds(std::vector<Impl>& impls, double warm_ms, const settings& opt, int floor)
{
    const int reps = std::clamp(static_cast<int>(std::ceil(opt.budget_s * 1000.0 / std::max(warm_ms, 1e-3))),
                                std::min(floor, opt.max_reps), opt.max_reps);
    for (int r = 0; r < reps; ++r)
    {
        interleaved_round(impls, static_cast<std::size_t>(r), true);
    }
    return reps;
}

std::string read_first_line(const char* path, const std::string& prefix = "")
{
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line))
    {
        if (prefix.empty() || line.rfind(prefix, 0) == 0)
        {
            const auto colon = line.find(':');
            return prefix.empty() || colon == std::string::npos ? line : line.substr(colon + 2);
        }
    }
    return "?";
}

// Cores other processes keep busy, sampled from /proc/stat over half a second while this one sleeps.
double busy_cores()
{
    auto sample = [](double& busy, double& total) {
        std::ifstream in("/proc/stat");
        std::string cpu;
        double v[8] = {0};
        in >> cpu;
        for (double& x : v)
        {
            in >> x;
        }
        total = 0;
        for (double x : v)
        {
            total += x;
        }
        busy = total - v[3] - v[4];  // minus idle and iowait
    };
    double b0, t0, b1, t1;
    sample(b0, t0);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    sample(b1, t1);
    const double cores = static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
    return t1 > t0 ? cores * (b1 - b0) / (t1 - t0) : 0.0;
}

std::string fixed(double x, int digits)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, x);
    return buf;
}

std::string mib(std::size_t bytes)
{
    return fixed(static_cast<double>(bytes) / (1024.0 * 1024.0), bytes < 1024 * 1024 ? 3 : 1) + " MiB";
}

template <class T>
mha_problem<T> make_problem(const size_spec& s, unsigned seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<double> unit(0.0, 1.0), weight(0.0, 1.0 / std::sqrt(static_cast<double>(s.d)));
    auto fill = [&](std::size_t n, std::normal_distribution<double>& dist) {
        std::vector<T> v(n);
        for (auto& x : v)
        {
            x = static_cast<T>(dist(rng));
        }
        return v;
    };
    mha_problem<T> p;
    p.B = s.B;
    p.T = s.T;
    p.d = s.d;
    p.H = s.H;
    p.X = fill(s.B * s.T * s.d, unit);
    p.W_Q = fill(s.d * s.d, weight);
    p.W_K = fill(s.d * s.d, weight);
    p.W_V = fill(s.d * s.d, weight);
    p.W_O = fill(s.d * s.d, weight);
    p.G = fill(s.B * s.T * s.d, unit);
    return p;
}

// max |a - b| / max |b|: one number per tensor, insensitive to where the entries are small.
double relative_error(const std::vector<double>& a, const std::vector<double>& b)
{
    if (a.size() != b.size())
    {
        return INFINITY;
    }
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
    {
        const double e = std::abs(a[i] - b[i]);
        diff = std::isnan(e) ? INFINITY : std::max(diff, e);
        scale = std::max(scale, std::abs(b[i]));
    }
    return diff / std::max(scale, 1e-300);
}

template <class T>
std::pair<double, double> gemm_peak(const settings& opt, int threads)
{
    const std::size_t n = static_cast<std::size_t>(opt.gemm_n);
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<T> a(n * n), b(n * n), c(n * n);
    for (auto* v : {&a, &b})
    {
        for (auto& x : *v)
        {
            x = static_cast<T>(u(rng));
        }
    }
    (void)threads;  // xgrad's GEMM door runs on the calling thread alone
    std::vector<double> times;
    for (int r = 0; r < opt.gemm_reps + 2; ++r)
    {
        const double ms = thread_ms([&] { bench::xgrad_gemm<T>(n, a.data(), b.data(), c.data()); });
        if (r >= 2)
        {
            times.push_back(ms);
        }
    }
    const double flop = 2.0 * n * n * n;
    return {flop / (median(times) * 1e6), flop / (*std::min_element(times.begin(), times.end()) * 1e6)};
}

template <class T>
overhead_row chain_overhead(const settings& opt, const std::string& dtype, int threads)
{
    auto mine = bench::make_xgrad_chain<T>(opt.chain_length, opt.chain_width);
    auto theirs = bench::make_torch_chain<T>(opt.chain_length, opt.chain_width);
    std::vector<double> tx, tt, cx, ct;
    for (int r = 0; r < opt.chain_reps + 3; ++r)
    {
        const bool keep = r >= 3;  // three warm-up rounds
        const bool xgrad_first = r % 2 == 0;
        for (int k = 0; k < 2; ++k)
        {
            if ((k == 0) == xgrad_first)
            {
                double cpu = 0;
                const double ms = time_ms([&] { cpu = thread_ms([&] { mine->step(); }); });
                if (keep)
                {
                    tx.push_back(ms);
                    cx.push_back(cpu);
                }
            }
            else
            {
                bench::blas_threads(threads);
                double cpu = 0;
                const double ms = time_ms([&] { cpu = thread_ms([&] { theirs->step(); }); });
                bench::blas_threads(1);
                if (keep)
                {
                    tt.push_back(ms);
                    ct.push_back(cpu);
                }
            }
        }
    }
    const double expected = opt.chain_width;
    if (mine->result() != expected || theirs->result() != expected)
    {
        die("add chain: sum of dL/dx should be " + fixed(expected, 0) + ", xgrad gave " +
            fixed(mine->result(), 6) + ", LibTorch gave " + fixed(theirs->result(), 6));
    }
    const double per_op = 1000.0 / opt.chain_length;  // ms per chain -> us per op
    return {dtype, threads, median(tx) * per_op, median(tt) * per_op, median(cx) * per_op, median(ct) * per_op};
}

template <class T>
row mha_row(const settings& opt, const size_spec& s, const std::string& dtype, int threads, double peak,
            double fma_peak)
{
    const mha_problem<T> p = make_problem<T>(s, 1234);
    struct impl
    {
        const char* name;
        std::unique_ptr<mha_case> c;
        int blas;
        std::vector<double> times, cpu_times;  // wall clock; the calling thread's CPU time
        std::size_t bytes = 0;
    };
    // xgrad runs its BLAS single-threaded by design (it parallelises over matrices itself); LibTorch's
    // GEMMs go to the same OpenBLAS, whose thread count at::set_num_threads does not reach, so it is
    // set to `threads` around every LibTorch step.
    std::vector<impl> impls;
    impls.push_back({"xgrad", bench::make_xgrad_mha(p, false), 1, {}});
    impls.push_back({"xgrad fused", bench::make_xgrad_mha(p, true), 1, {}});
    impls.push_back({"LibTorch composed", bench::make_torch_mha(p, true), threads, {}});
    impls.push_back({"LibTorch nn.MultiheadAttention", bench::make_torch_mha(p, false), threads, {}});
    const bool bf16 = opt.bf16 && sizeof(T) == 4;
    if (bf16)
    {
        impls.push_back({"xgrad fused bf16", bench::make_xgrad_mha(p, true, true), 1, {}});
        impls.push_back({"LibTorch composed bf16", bench::make_torch_mha(p, true, true), threads, {}});
    }

    // Sanity before timing: Y and dL/dW_Q agree across the three, or the run stops here.
    for (auto& im : impls)
    {
        bench::blas_threads(im.blas);
        im.bytes = im.c->instrumented_step();
    }
    bench::blas_threads(1);
    const auto y_ref = impls[0].c->output(), g_ref = impls[0].c->grad_w_q();
    for (std::size_t i = 1; i < impls.size(); ++i)
    {
        // bf16 rows: operands rounded to 8 significant bits, so a few bfloat16 roundoffs (2^-8 each)
        const double tolerance = i >= 4 ? 3e-2 : sizeof(T) == 4 ? 1e-3 : 1e-9;
        const double ey = relative_error(y_ref, impls[i].c->output());
        const double eg = relative_error(g_ref, impls[i].c->grad_w_q());
        if (!(ey < tolerance) || !(eg < tolerance))
        {
            die("MISMATCH at size " + s.name + " " + dtype + ": xgrad vs " + impls[i].name + ": rel error Y " +
                std::to_string(ey) + ", dW_Q " + std::to_string(eg) + " (tolerance " + std::to_string(tolerance) +
                "). Timings would be meaningless; aborting.");
        }
    }

    const double warm = interleaved_round(impls, 0, false);  // warm-up; also sizes the number of timed rounds
    const int reps = timed_rounds(impls, warm, opt, warm > 2000.0 ? opt.min_reps_slow : opt.min_reps);

    row out{};
    out.size = s.name;
    out.dtype = dtype;
    out.B = s.B;
    out.T = s.T;
    out.d = s.d;
    out.H = s.H;
    out.threads = threads;
    out.reps = reps;
    out.xgrad_ms = median(impls[0].times);
    out.fused_ms = median(impls[1].times);
    out.xgrad_cpu_ms = median(impls[0].cpu_times);
    out.fused_cpu_ms = median(impls[1].cpu_times);
    out.libtorch_cpu_ms = std::min(median(impls[2].cpu_times), median(impls[3].cpu_times));
    out.libtorch_ms = median(impls[2].times);
    out.libtorch_nn_ms = median(impls[3].times);
    out.ratio = out.xgrad_ms / std::min(out.libtorch_ms, out.libtorch_nn_ms);
    // FLOP = 2 x multiply-adds; forward + backward = 3 x forward.
    const double flop = 2.0 * 3.0 * static_cast<double>(bench::mha_multiply_adds(s.B, s.T, s.d));
    out.gflops = flop / (out.xgrad_ms * 1e6);
    out.libtorch_gflops = flop / (std::min(out.libtorch_ms, out.libtorch_nn_ms) * 1e6);
    out.peak_gflops = peak;
    out.fma_peak_gflops = fma_peak;
    out.tape_bytes = impls[0].bytes;
    out.fused_tape_bytes = impls[1].bytes;
    out.libtorch_bytes = impls[2].bytes;
    out.fused_ratio = out.fused_ms / std::min(out.libtorch_ms, out.libtorch_nn_ms);
    out.fused_gflops = flop / (out.fused_ms * 1e6);
    out.has_bf16 = bf16;
    if (bf16)
    {
        out.xgrad_bf16_ms = median(impls[4].times);
        out.libtorch_bf16_ms = median(impls[5].times);
        out.xgrad_bf16_cpu_ms = median(impls[4].cpu_times);
        out.libtorch_bf16_cpu_ms = median(impls[5].cpu_times);
    }
    std::cerr << "  " << dtype << " threads=" << threads << " " << s.name << ": " << reps << " rounds, xgrad "
              << fixed(out.xgrad_ms, 3) << " ms, fused " << fixed(out.fused_ms, 3) << " ms, LibTorch " << fixed(out.libtorch_ms, 3) << " / nn "
              << fixed(out.libtorch_nn_ms, 3) << " ms";
    if (bf16)
    {
        std::cerr << "; bf16: xgrad fused " << fixed(out.xgrad_bf16_ms, 3) << " ms, LibTorch autocast "
                  << fixed(out.libtorch_bf16_ms, 3) << " ms";
    }
    std::cerr << "\n";
    return out;
}

window_row attention_window_row(const settings& opt, std::size_t T, int threads)
{
    const size_spec& s = all_sizes[3];  // large: B 8, d 512, H 8
    struct impl
    {
        const char* name;
        std::unique_ptr<bench::attention_case> c;
        int blas;
        std::vector<double> times, cpu_times;  // wall clock; the calling thread's CPU time
    };
    window_row out{s.B, s.H, T, s.d / s.H, T / 8, threads, 0, 0, 0, 0, 0, 0, 0};
    std::vector<impl> impls;
    impls.push_back({"full causal", bench::make_xgrad_attention(out.B, out.H, T, out.dh, 0), 1, {}, {}});
    impls.push_back({"window", bench::make_xgrad_attention(out.B, out.H, T, out.dh, out.window), 1, {}, {}});
    const double warm = interleaved_round(impls, 0, false);
    out.reps = timed_rounds(impls, warm, opt, opt.min_reps);
    out.full_ms = median(impls[0].times);
    out.window_ms = median(impls[1].times);
    out.full_cpu_ms = median(impls[0].cpu_times);
    out.window_cpu_ms = median(impls[1].cpu_times);
    out.full_multiply_adds = impls[0].c->multiply_adds();
    out.window_multiply_adds = impls[1].c->multiply_adds();
    return out;
}

// Products of the MHA step (projections, their gradients, per-head attention) at several sizes, squares,
// and the GPT step's projections.
const std::vector<bench::gemm_shape> gemm_shapes = {
    {"square", false, false, 64, 64, 64},
    {"square", false, false, 128, 128, 128},
    {"square", false, false, 256, 256, 256},
    {"square", false, false, 512, 512, 512},
    {"square", false, false, 1024, 1024, 1024},
    {"tiny X W", false, false, 16, 32, 32},
    {"tiny Q K^T", false, true, 16, 16, 8},
    {"small X W", false, false, 256, 128, 128},
    {"small Q K^T", false, true, 64, 64, 32},
    {"medium X W", false, false, 1024, 256, 256},
    {"medium Q K^T", false, true, 128, 128, 32},
    {"large X W", false, false, 2048, 512, 512},
    {"large dX = G W^T", false, true, 2048, 512, 512},
    {"large dW = X^T G", true, false, 512, 512, 2048},
    {"large Q K^T", false, true, 256, 256, 64},
    {"large P V", false, false, 256, 64, 256},
    {"large dV = P^T dO", true, false, 256, 64, 256},
    {"xl X W", false, false, 2048, 1024, 1024},
    {"xl dW = X^T G", true, false, 1024, 1024, 2048},
    {"xl Q K^T", false, true, 512, 512, 64},
    // The GPT step's projections at the bench's configs (rows = B T): nano d 64, char d 128, shake d 384.
    {"nano X W_qkv", false, false, 1024, 192, 64},
    {"nano H W_down", false, false, 1024, 64, 256},
    {"nano dW_qkv", true, false, 64, 192, 1024},
    {"char X W_qkv", false, false, 2048, 384, 128},
    {"char dX = G W^T", false, true, 2048, 128, 512},
    {"char dW_up", true, false, 128, 512, 2048},
    {"shake X W_qkv", false, false, 2048, 1152, 384},
    {"shake dW_up", true, false, 384, 1536, 2048},
};

std::vector<bench::gemm_row> gemm_table(const settings& opt)
{
    std::vector<bench::gemm_row> rows;
    for (const auto& dtype : opt.dtypes)
    {
        for (const auto& shape : gemm_shapes)
        {
            rows.push_back(dtype == "f32" ? bench::xgrad_gemm_row<float>(shape, opt.gemm_reps)
                                          : bench::xgrad_gemm_row<double>(shape, opt.gemm_reps));
        }
    }
    return rows;
}

// One GPT training step (forward, loss, backward, AdamW) of xgrad and of LibTorch from the same
// parameters and batch, in float32 and (with opt.bf16) in bfloat16 matmul precision / autocast: two
// untimed steps whose losses must agree (the second after one AdamW update), then interleaved timed
// rounds (the first case rotates). Every case keeps training across rounds.
gpt_row gpt_step_row(const settings& opt, const bench::gpt_spec& spec, int threads, double fma_peak)
{
    const bench::gpt_problem problem = bench::make_gpt_problem(spec, 1234);
    struct gpt_impl
    {
        const char* name;
        std::unique_ptr<bench::gpt_case> c;
        int blas;
        double losses[2];
        std::vector<double> times, cpu_times;  // wall clock; the calling thread's CPU time
    };
    std::vector<gpt_impl> impls;
    impls.push_back({"xgrad", bench::make_xgrad_gpt(problem), 1, {}, {}, {}});
    impls.push_back({"LibTorch", bench::make_torch_gpt(problem), threads, {}, {}, {}});
    if (opt.bf16)
    {
        impls.push_back({"xgrad bf16", bench::make_xgrad_gpt(problem, true), 1, {}, {}, {}});
        impls.push_back({"LibTorch autocast bf16", bench::make_torch_gpt(problem, true), threads, {}, {}, {}});
    }
    for (int s = 0; s < 2; ++s)
    {
        for (auto& im : impls)
        {
            bench::blas_threads(im.blas);
            im.losses[s] = im.c->step();
        }
        bench::blas_threads(1);
        const double reference = impls[1].losses[s];
        for (std::size_t i = 0; i < impls.size(); ++i)
        {
            // float32: the same sums in another order; bf16: operands rounded to 8 significant bits
            const double tolerance = i >= 2 ? 2e-2 : 1e-4;
            const double error = std::abs(impls[i].losses[s] - reference) / std::abs(reference);
            if (!(error < tolerance))
            {
                die("MISMATCH in the GPT " + spec.name + " step " + std::to_string(s + 1) + ": loss " + impls[i].name +
                    " " + fixed(impls[i].losses[s], 7) + " vs LibTorch " + fixed(reference, 7) +
                    ". Timings would be meaningless.");
            }
        }
    }
    const double warm = interleaved_round(impls, 0, false);
    const int reps = timed_rounds(impls, warm, opt, opt.min_reps_slow);
    gpt_row row{};
    row.spec = spec;
    row.threads = threads;
    row.reps = reps;
    row.xgrad_ms = median(impls[0].times);
    row.libtorch_ms = median(impls[1].times);
    row.xgrad_cpu_ms = median(impls[0].cpu_times);
    row.libtorch_cpu_ms = median(impls[1].cpu_times);
    row.ratio = row.xgrad_ms / row.libtorch_ms;
    row.tokens_per_s = static_cast<double>(spec.B * spec.T) / (row.xgrad_ms * 1e-3);
    // FLOP = 2 x multiply-adds; forward + backward = 3 x forward (the optimiser's few per parameter are left out)
    row.gflops = 2.0 * 3.0 * static_cast<double>(bench::gpt_forward_multiply_adds(spec)) / (row.xgrad_ms * 1e6);
    row.fma_peak_gflops = fma_peak;
    row.loss_first = impls[0].losses[0];
    row.loss_second = impls[0].losses[1];
    row.has_bf16 = opt.bf16;
    if (opt.bf16)
    {
        row.xgrad_bf16_ms = median(impls[2].times);
        row.libtorch_bf16_ms = median(impls[3].times);
        row.xgrad_bf16_cpu_ms = median(impls[2].cpu_times);
        row.libtorch_bf16_cpu_ms = median(impls[3].cpu_times);
        row.loss_bf16_first = impls[2].losses[0];
    }
    std::cerr << "  gpt " << spec.name << " threads=" << threads << ": " << reps << " rounds, xgrad "
              << fixed(row.xgrad_ms, 2) << " ms, LibTorch " << fixed(row.libtorch_ms, 2) << " ms";
    if (opt.bf16)
    {
        std::cerr << "; bf16: xgrad " << fixed(row.xgrad_bf16_ms, 2) << " ms, LibTorch autocast "
                  << fixed(row.libtorch_bf16_ms, 2) << " ms";
    }
    std::cerr << "\n";
    return row;
}

std::string pad(std::string s, std::size_t width, bool left = false)
{
    if (s.size() >= width)
    {
        return s;
    }
    return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

void print_table(std::ostream& out, const std::string& dtype, const std::vector<row>& rows,
                 const std::vector<peak_row>& peaks, const std::vector<overhead_row>& overheads)
{
    out << "\n=== " << (dtype == "f32" ? "float32" : "float64")
        << " — MHA self-attention forward+backward, causal, loss = sum(Y * G); medians ===\n";
    for (const auto& p : peaks)
    {
        if (p.dtype == dtype)
        {
            out << "in-run FMA peak (" << bench::fma_isa() << "), " << p.threads
                << (p.threads == 1 ? " thread" : " threads") << ": " << fixed(p.fma_gflops, 1)
                << " GFLOP/s; GEMM 512^3 through xgrad::kernels::gemm (one thread, thread CPU time): " << fixed(p.gflops, 1)
                << " GFLOP/s median (best " << fixed(p.best_gflops, 1) << ") = "
                << fixed(100.0 * p.gflops / (p.fma_gflops / p.threads), 1) << "% of one thread's FMA peak\n";
        }
    }
    for (const auto& o : overheads)
    {
        if (o.dtype == dtype)
        {
            out << "per-op overhead, chain of 1000 tiny adds fwd+bwd, " << o.threads
                << (o.threads == 1 ? " thread" : " threads") << ": xgrad " << fixed(o.xgrad_us, 2)
                << " us/op, LibTorch " << fixed(o.libtorch_us, 2) << " us/op (ratio "
                << fixed(o.xgrad_us / o.libtorch_us, 2) << "); thread CPU time: xgrad " << fixed(o.xgrad_cpu_us, 2)
                << " us/op, LibTorch " << fixed(o.libtorch_cpu_us, 2) << " us/op\n";
        }
    }
    out << "GFLOP/s, FLOP = 2 x multiply-adds, fwd+bwd = 3 x fwd (eq. 20.5); ratio = xgrad / min(LibTorch "
           "composed, nn); % FMA = xgrad GFLOP/s / in-run FMA peak at that thread count;\n"
           "xgrad = the composed graph (the default), fused = mha_options::fused (ops::attention); f ratio, f GFLOP/s, "
           "f % FMA and fused bytes are the fused path's\n";
    const std::vector<std::pair<std::string, std::size_t>> cols = {
        {"size", 7},       {"thr", 3},         {"(B,T,d,H)", 17},    {"xgrad ms", 10},  {"fused ms", 10},
        {"LibTorch ms", 11}, {"LT nn ms", 10},  {"ratio", 6},        {"f ratio", 7},    {"GFLOP/s", 8},
        {"% FMA", 6},      {"f GFLOP/s", 9},   {"f % FMA", 7},       {"LT GFLOP/s", 10}, {"tape bytes", 11},
        {"fused bytes", 11}, {"LT fwd bytes", 12}, {"reps", 4}};
    std::string header, rule;
    for (std::size_t i = 0; i < cols.size(); ++i)
    {
        header += (i ? " | " : "") + pad(cols[i].first, cols[i].second, i == 0);
        rule += (i ? "-|-" : "") + std::string(std::max(cols[i].first.size(), cols[i].second), '-');
    }
    out << header << "\n" << rule << "\n";
    for (const auto& r : rows)
    {
        if (r.dtype != dtype)
        {
            continue;
        }
        const std::string shape = "(" + std::to_string(r.B) + "," + std::to_string(r.T) + "," + std::to_string(r.d) +
                                  "," + std::to_string(r.H) + ")";
        const std::vector<std::string> cells = {r.size,
                                                fixed(r.threads, 0),
                                                shape,
                                                fixed(r.xgrad_ms, 3),
                                                fixed(r.fused_ms, 3),
                                                fixed(r.libtorch_ms, 3),
                                                fixed(r.libtorch_nn_ms, 3),
                                                fixed(r.ratio, 2),
                                                fixed(r.fused_ratio, 2),
                                                fixed(r.gflops, 2),
                                                fixed(100.0 * r.gflops / r.fma_peak_gflops, 1),
                                                fixed(r.fused_gflops, 2),
                                                fixed(100.0 * r.fused_gflops / r.fma_peak_gflops, 1),
                                                fixed(r.libtorch_gflops, 2),
                                                mib(r.tape_bytes),
                                                mib(r.fused_tape_bytes),
                                                mib(r.libtorch_bytes),
                                                std::to_string(r.reps)};
        std::string line;
        for (std::size_t i = 0; i < cols.size(); ++i)
        {
            line += (i ? " | " : "") + pad(cells[i], std::max(cols[i].first.size(), cols[i].second), i == 0);
        }
        out << line << "\n";
    }
    out << "one thread, medians of the calling thread's CPU time (all of a one-thread step's work; other processes "
           "on a shared machine do not stretch it):\n"
        << "size    |  xgrad cpu ms |  fused cpu ms | LibTorch cpu ms | ratio | f ratio | % FMA | f % FMA\n"
        << "--------|---------------|---------------|-----------------|-------|---------|-------|--------\n";
    for (const auto& r : rows)
    {
        if (r.dtype != dtype || r.threads != 1)
        {
            continue;
        }
        const double flop = r.gflops * r.xgrad_ms * 1e6;
        out << pad(r.size, 7, true) << " | " << pad(fixed(r.xgrad_cpu_ms, 3), 13) << " | "
            << pad(fixed(r.fused_cpu_ms, 3), 13) << " | " << pad(fixed(r.libtorch_cpu_ms, 3), 15) << " | "
            << pad(fixed(r.xgrad_cpu_ms / r.libtorch_cpu_ms, 2), 5) << " | "
            << pad(fixed(r.fused_cpu_ms / r.libtorch_cpu_ms, 2), 7) << " | "
            << pad(fixed(100.0 * flop / (r.xgrad_cpu_ms * 1e6) / r.fma_peak_gflops, 1), 5) << " | "
            << pad(fixed(100.0 * flop / (r.fused_cpu_ms * 1e6) / r.fma_peak_gflops, 1), 7) << "\n";
    }
    if (std::any_of(rows.begin(), rows.end(), [&](const row& r) { return r.dtype == dtype && r.has_bf16; }))
    {
        out << "bfloat16: xgrad fused at bf16 matmul precision (operands rounded to bfloat16, float32 accumulation) vs "
               "LibTorch composed under CPU autocast to bfloat16;\nbf16 ratio = xgrad bf16 / LibTorch bf16; speed-up = "
               "xgrad fused float32 / xgrad fused bf16 (same run); cpu = the calling thread's CPU time (1 thread)\n"
            << "size    | thr | xgrad bf16 ms | LT bf16 ms | bf16 ratio | speed-up | cpu: xgrad bf16 ms | LT bf16 ms | ratio\n"
            << "--------|-----|---------------|------------|------------|----------|--------------------|------------|------\n";
        for (const auto& r : rows)
        {
            if (r.dtype != dtype || !r.has_bf16)
            {
                continue;
            }
            out << pad(r.size, 7, true) << " | " << pad(std::to_string(r.threads), 3) << " | "
                << pad(fixed(r.xgrad_bf16_ms, 3), 13) << " | " << pad(fixed(r.libtorch_bf16_ms, 3), 10) << " | "
                << pad(fixed(r.xgrad_bf16_ms / r.libtorch_bf16_ms, 2), 10) << " | "
                << pad(fixed(r.fused_ms / r.xgrad_bf16_ms, 2), 8) << " | ";
            if (r.threads == 1)
            {
                out << pad(fixed(r.xgrad_bf16_cpu_ms, 3), 18) << " | " << pad(fixed(r.libtorch_bf16_cpu_ms, 3), 10)
                    << " | " << fixed(r.xgrad_bf16_cpu_ms / r.libtorch_bf16_cpu_ms, 2) << "\n";
            }
            else
            {
                out << pad("-", 18) << " | " << pad("-", 10) << " | -\n";
            }
        }
    }
    out << "tape bytes = xgrad tape.bytes_saved_for_backward(false) after the forward: the intermediate values a\n"
           "backward rule will read (the leaves X, G and the parameters exist before the forward and are not\n"
           "counted, as on the LibTorch side). LT fwd bytes = bytes LibTorch's\n"
           "CPU allocator handed out during the composed forward and still held before backward (saved tensors,\n"
           "Y and the loss; parameters and X are not counted, as they exist before the forward).\n";
}

// The fastest measured FMA peak of one thread for this dtype (the GEMM runs on one thread).
double one_thread_fma(const std::vector<peak_row>& peaks, const std::string& dtype)
{
    for (const auto& p : peaks)
    {
        if (p.dtype == (dtype == "float32" ? "f32" : "f64") && p.threads == 1)
        {
            return p.fma_gflops;
        }
    }
    for (const auto& p : peaks)
    {
        if (p.dtype == (dtype == "float32" ? "f32" : "f64"))
        {
            return p.fma_gflops / p.threads;
        }
    }
    return 0;
}

void print_gemm_tables(std::ostream& out, const std::vector<bench::gemm_row>& rows,
                       const std::vector<peak_row>& peaks)
{
    out << "\n=== GEMM backends, one thread: GFLOP/s (thread CPU time, median) and share of the one-thread FMA "
           "peak ===\n"
        << "door = xgrad::kernels::gemm, through the backend its rule picks for the product (kernels/gemm.cpp)\n";
    out << "door bf16 = the door at bf16 matmul precision (operands rounded to bfloat16 in the call, oneDNN's bf16 "
           "matmul primitive; % of the float32 FMA peak)\n";
    // The columns: every backend this build has, in the order its rows list them (kernels/gemm.hpp).
    std::vector<std::string> names;
    for (const auto& r : rows)
    {
        for (const auto& backend : r.backends)
        {
            if (std::find(names.begin(), names.end(), backend.first) == names.end())
            {
                names.push_back(backend.first);
            }
        }
    }
    out << pad("dtype", 7, true) << " | " << pad("product", 18, true) << " | " << pad("op", 7, true) << " | "
        << pad("m x n x k", 16) << " | " << pad("door uses", 13, true) << " | " << pad("door", 6) << " | "
        << pad("% FMA", 5) << " | " << pad("door bf16", 15);
    for (const auto& n : names)
    {
        out << " | " << pad(n, 13);
    }
    out << "\n";
    for (const auto& r : rows)
    {
        const double fma = one_thread_fma(peaks, r.dtype);
        const std::string dims = std::to_string(r.shape.m) + "x" + std::to_string(r.shape.n) + "x" +
                                 std::to_string(r.shape.k);
        out << pad(r.dtype, 7, true) << " | " << pad(r.shape.label, 18, true) << " | "
            << pad(std::string(r.shape.ta ? "A^T" : "A") + (r.shape.tb ? " B^T" : " B"), 7, true) << " | "
            << pad(dims, 16) << " | " << pad(r.chosen, 13, true) << " | " << pad(fixed(r.door_gflops, 1), 6) << " | "
            << pad(fixed(100.0 * r.door_gflops / fma, 1), 5) << " | "
            << pad(r.door_bf16_gflops > 0 ? fixed(r.door_bf16_gflops, 1) + " (" +
                                                fixed(100.0 * r.door_bf16_gflops / fma, 0) + "%)"
                                          : "-",
                   15);
        for (const auto& n : names)
        {
            std::string cell = "-";
            for (const auto& [backend, gflops] : r.backends)
            {
                if (backend == n)
                {
                    cell = fixed(gflops, 1) + " (" + fixed(100.0 * gflops / fma, 0) + "%)";
                }
            }
            out << " | " << pad(cell, 13);
        }
        out << "\n";
    }
}

// ---- the decode section --------------------------------------------------------------------------------

// llama2.c's stories15M shape with a byte vocabulary, and the GPT step's sizes (block = their T).
const std::vector<bench::decode_spec> all_decode_configs = {
    {"stories15M", 256, 6, 288, 6, 256, 768, true},
    {"nano", 65, 2, 64, 4, 64},
    {"char", 65, 4, 128, 4, 128},
    {"shake", 65, 6, 384, 6, 256},
};

const bench::decode_spec& decode_config(const std::string& name)
{
    for (const auto& s : all_decode_configs)
    {
        if (s.name == name)
        {
            return s;
        }
    }
    die("unknown decode config " + name + " (stories15M, nano, char, shake or none)");
}

// A field of /proc/self/status in kB.
long status_kb(const char* field)
{
    const std::string line = read_first_line("/proc/self/status", std::string(field) + ":");
    return std::atol(line.c_str());
}

// The child process of a load measurement (xgrad_bench --decode-load LIBRARY CONFIG PATH): its peak
// resident size reset (clear_refs), it loads PATH with LIBRARY, runs one token, and prints
// "load_ms first_token_ms peak_added_kB" (VmHWM after minus VmRSS before the load).
int decode_load_child(const std::string& library, const std::string& config, const std::string& path)
{
    const bench::decode_spec& spec = decode_config(config);
    const long before = status_kb("VmRSS");
    std::ofstream("/proc/self/clear_refs") << "5";
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<bench::decode_case> c =
        library == "xgrad" ? bench::xgrad_load_decode(path) : bench::torch_load_decode(spec, path);
    const auto t1 = std::chrono::steady_clock::now();
    c->step(0);
    const auto t2 = std::chrono::steady_clock::now();
    std::printf("%.3f %.3f %ld\n", std::chrono::duration<double, std::milli>(t1 - t0).count(),
                std::chrono::duration<double, std::milli>(t2 - t1).count(), status_kb("VmHWM") - before);
    return 0;
}

struct decode_load
{
    double load_ms = 0, first_ms = 0, peak_mb = 0;  // medians over the child runs
};

// Medians of `runs` fresh processes (this program again) loading `path`.
decode_load measure_load(const std::string& library, const std::string& config, const std::string& path, int runs)
{
    std::vector<double> load, first, peak;
    for (int r = 0; r < runs; ++r)
    {
        const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
        const std::string command =
            "'" + self + "' --decode-load " + library + " " + config + " '" + path + "' 2>/dev/null";
        FILE* child = ::popen(command.c_str(), "r");
        double l = 0, f = 0, p = 0;
        const bool read = child && std::fscanf(child, "%lf %lf %lf", &l, &f, &p) == 3;
        if (!child || ::pclose(child) != 0 || !read)
        {
            die("decode: the load of " + path + " by " + library + " failed");
        }
        load.push_back(l);
        first.push_back(f);
        peak.push_back(p / 1024.0);
    }
    return {median(load), median(first), median(peak)};
}

struct decode_row
{
    bench::decode_spec spec;
    int threads, rounds;
    double file_mb;                  // xgrad's checkpoint (parameters only)
    decode_load xgrad, libtorch;     // from fresh processes
    double xgrad_tps, libtorch_tps;  // tokens per second, medians of the rounds
    double agreement;                // the share of steps whose most likely token both give
};

// One round: the cache cleared, then `tokens` fed one at a time; the most likely next ids into `out`.
double decode_round(bench::decode_case& c, const std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& out)
{
    c.clear();
    out.clear();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::int32_t t : tokens)
    {
        out.push_back(c.step(t));
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

decode_row decode_step_row(const settings& opt, const bench::decode_spec& spec, int threads,
                           const std::string& folder)
{
    const std::string xgrad_path = folder + "/" + spec.name + ".safetensors";
    const std::string torch_path = folder + "/" + spec.name + ".pt";
    decode_row row{spec, threads, opt.decode_rounds, 0, {}, {}, 0, 0, 0};
    std::ifstream file(xgrad_path, std::ios::binary | std::ios::ate);
    row.file_mb = static_cast<double>(file.tellg()) / (1 << 20);
    std::unique_ptr<bench::decode_case> x = bench::xgrad_load_decode(xgrad_path);
    std::unique_ptr<bench::decode_case> t = bench::torch_load_decode(spec, torch_path);
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(spec.V) - 1);
    std::vector<std::int32_t> tokens(spec.block);
    for (auto& token : tokens)
    {
        token = id(rng);
    }
    std::vector<std::int32_t> xo, to;
    std::vector<double> xt, tt;
    bench::blas_threads(threads);
    for (int r = 0; r < opt.decode_rounds; ++r)
    {
        if (r % 2 == 0)  // alternate which goes first
        {
            xt.push_back(decode_round(*x, tokens, xo));
            tt.push_back(decode_round(*t, tokens, to));
        }
        else
        {
            tt.push_back(decode_round(*t, tokens, to));
            xt.push_back(decode_round(*x, tokens, xo));
        }
    }
    bench::blas_threads(1);
    std::size_t same = 0;
    for (std::size_t i = 0; i < xo.size(); ++i)
    {
        same += xo[i] == to[i];
    }
    row.agreement = static_cast<double>(same) / static_cast<double>(xo.size());
    row.xgrad_tps = static_cast<double>(tokens.size()) / median(xt);
    row.libtorch_tps = static_cast<double>(tokens.size()) / median(tt);
    std::cerr << "  decode " << spec.name << " threads=" << threads << ": " << fixed(row.xgrad_tps, 0) << " vs "
              << fixed(row.libtorch_tps, 0) << " tokens/s\n";
    return row;
}

// The weights of every decode config written in both formats into `folder`, then each loaded by fresh
// processes (load time, first token, peak memory).
std::vector<std::pair<decode_load, decode_load>> prepare_decode(const settings& opt, const std::string& folder)
{
    std::vector<std::pair<decode_load, decode_load>> loads;
    for (const auto& name : opt.decode_configs)
    {
        const bench::decode_spec& spec = decode_config(name);
        {
            const bench::decode_weights w = bench::make_decode_weights(spec, 42);
            bench::xgrad_save_decode(w, folder + "/" + name + ".safetensors");
            bench::torch_save_decode(w, folder + "/" + name + ".pt");
        }
        loads.push_back({measure_load("xgrad", name, folder + "/" + name + ".safetensors", opt.decode_load_runs),
                         measure_load("LibTorch", name, folder + "/" + name + ".pt", opt.decode_load_runs)});
    }
    return loads;
}

void print_decode_table(std::ostream& out, const std::vector<decode_row>& rows)
{
    if (rows.empty())
    {
        return;
    }
    out << "\n=== float32 — decoding one sequence through a KV cache, one token at a time, same weights ===\n"
        << "load: a fresh process reads the file (xgrad: io::checkpoint_reader into models::decoder, as xgrad-sample;\n"
        << "LibTorch: torch::load of the same tensors) and runs one token; peak: VmHWM minus VmRSS before the\n"
        << "load. tokens/s: block_size tokens fed one at a time from an empty cache (LibTorch: the same loop\n"
        << "under torch::NoGradGuard), median of the rounds; agree: the steps whose most likely token both give.\n";
    out << pad("model", 10, true) << pad("V", 5) << pad("L", 3) << pad("d", 5) << pad("block", 6)
        << pad("file MB", 8) << pad("load ms x/T", 14) << pad("1st tok ms x/T", 16)
        << pad("peak MB x/T", 14) << pad("thr", 4) << pad("tok/s xgrad", 12)
        << pad("LibTorch", 10) << pad("ratio", 7) << pad("agree", 7) << "\n";
    for (const auto& r : rows)
    {
        out << pad(r.spec.name, 10, true) << pad(std::to_string(r.spec.V), 5)
            << pad(std::to_string(r.spec.L), 3) << pad(std::to_string(r.spec.d), 5)
            << pad(std::to_string(r.spec.block), 6) << pad(fixed(r.file_mb, 1), 8)
            << pad(fixed(r.xgrad.load_ms, 1) + " / " + fixed(r.libtorch.load_ms, 1), 14)
            << pad(fixed(r.xgrad.first_ms, 2) + " / " + fixed(r.libtorch.first_ms, 2), 16)
            << pad(fixed(r.xgrad.peak_mb, 1) + " / " + fixed(r.libtorch.peak_mb, 1), 14)
            << pad(std::to_string(r.threads), 4) << pad(fixed(r.xgrad_tps, 0), 12)
            << pad(fixed(r.libtorch_tps, 0), 10) << pad(fixed(r.xgrad_tps / r.libtorch_tps, 2), 7)
            << pad(fixed(100 * r.agreement, 0) + "%", 7) << "\n";
    }
}

void print_window_table(std::ostream& out, const std::vector<window_row>& rows)
{
    if (rows.empty())
    {
        return;
    }
    out << "\n=== float32 — fused attention (ops::attention) forward+backward, causal: sliding window "
           "w = T/8 against full causal attention; medians ===\n"
        << "speed-up = full ms / window ms; work ratio = the forward multiply-adds the op counts "
           "(full / window); cpu = the calling thread's CPU time (1 thread)\n"
        << "thr | (B,H,T,dh)       |    w | full ms | window ms | speed-up | work ratio | cpu: full ms | "
           "window ms | speed-up | reps\n"
        << "----|------------------|------|---------|-----------|----------|------------|--------------|-"
           "----------|----------|-----\n";
    for (const auto& r : rows)
    {
        const std::string shape = "(" + std::to_string(r.B) + "," + std::to_string(r.H) + "," +
                                  std::to_string(r.T) + "," + std::to_string(r.dh) + ")";
        const double work =
            static_cast<double>(r.full_multiply_adds) / static_cast<double>(r.window_multiply_adds);
        out << pad(std::to_string(r.threads), 3) << " | " << pad(shape, 16, true) << " | "
            << pad(std::to_string(r.window), 4) << " | " << pad(fixed(r.full_ms, 2), 7) << " | "
            << pad(fixed(r.window_ms, 2), 9) << " | " << pad(fixed(r.full_ms / r.window_ms, 2), 8) << " | "
            << pad(fixed(work, 2), 10) << " | ";
        if (r.threads == 1)
        {
            out << pad(fixed(r.full_cpu_ms, 2), 12) << " | " << pad(fixed(r.window_cpu_ms, 2), 9) << " | "
                << pad(fixed(r.full_cpu_ms / r.window_cpu_ms, 2), 8) << " | ";
        }
        else
        {
            out << pad("-", 12) << " | " << pad("-", 9) << " | " << pad("-", 8) << " | ";
        }
        out << r.reps << "\n";
    }
}

void print_gpt_table(std::ostream& out, const std::vector<gpt_row>& rows)
{
    if (rows.empty())
    {
        return;
    }
    out << "\n=== float32 — GPT training step (forward + cross-entropy + backward + AdamW), same model, batch "
           "and optimiser in LibTorch; medians ===\n"
        << "ratio = xgrad / LibTorch; GFLOP/s = 2 x 3 x forward multiply-adds / xgrad time; % FMA = of the "
           "in-run FMA peak at that thread count;\nLT % FMA = LibTorch's share of it, also the lowest ratio xgrad "
           "could reach (at 100% of the peak) against this LibTorch\n";
    out << "config | thr | (V,L,d,H,T,B)          |  xgrad ms | LibTorch ms | ratio | tokens/s | GFLOP/s | % FMA | "
           "LT % FMA | cpu: xgrad ms | LibTorch ms | ratio | % FMA | loss 1, 2        | reps\n";
    out << "-------|-----|------------------------|-----------|-------------|-------|----------|---------|-------|-"
           "---------|---------------|-------------|-------|-------|------------------|-----\n";
    for (const auto& r : rows)
    {
        const auto& s = r.spec;
        const std::string shape = "(" + std::to_string(s.V) + "," + std::to_string(s.L) + "," + std::to_string(s.d) +
                                  "," + std::to_string(s.H) + "," + std::to_string(s.T) + "," + std::to_string(s.B) +
                                  ")";
        out << pad(s.name, 6, true) << " | " << pad(std::to_string(r.threads), 3) << " | " << pad(shape, 22, true)
            << " | " << pad(fixed(r.xgrad_ms, 2), 9) << " | " << pad(fixed(r.libtorch_ms, 2), 11) << " | "
            << pad(fixed(r.ratio, 2), 5) << " | " << pad(fixed(r.tokens_per_s, 0), 8) << " | "
            << pad(fixed(r.gflops, 1), 7) << " | " << pad(fixed(100.0 * r.gflops / r.fma_peak_gflops, 1), 5) << " | "
            << pad(fixed(100.0 * r.ratio * r.gflops / r.fma_peak_gflops, 1), 8) << " | ";
        if (r.threads == 1)
        {
            const double cpu_gflops = r.gflops * r.xgrad_ms / r.xgrad_cpu_ms;
            out << pad(fixed(r.xgrad_cpu_ms, 2), 13) << " | " << pad(fixed(r.libtorch_cpu_ms, 2), 11) << " | "
                << pad(fixed(r.xgrad_cpu_ms / r.libtorch_cpu_ms, 2), 5) << " | "
                << pad(fixed(100.0 * cpu_gflops / r.fma_peak_gflops, 1), 5) << " | ";
        }
        else
        {
            out << pad("-", 13) << " | " << pad("-", 11) << " | " << pad("-", 5) << " | " << pad("-", 5) << " | ";
        }
        out << pad(fixed(r.loss_first, 4) + ", " + fixed(r.loss_second, 4), 16, true) << " | " << r.reps << "\n";
    }
    if (!rows.front().has_bf16)
    {
        return;
    }
    out << "bfloat16: xgrad at bf16 matmul precision vs LibTorch's forward under CPU autocast to bfloat16 (backward "
           "and AdamW as a user runs them after it);\nbf16 ratio = xgrad bf16 / LibTorch bf16; speed-up = xgrad "
           "float32 / xgrad bf16 (same run); cpu = the calling thread's CPU time (1 thread)\n"
        << "config | thr | xgrad bf16 ms | LT bf16 ms | bf16 ratio | speed-up | tokens/s | cpu: xgrad bf16 ms | "
           "LT bf16 ms | ratio | loss 1\n"
        << "-------|-----|---------------|------------|------------|----------|----------|--------------------|-"
           "-----------|-------|-------\n";
    for (const auto& r : rows)
    {
        out << pad(r.spec.name, 6, true) << " | " << pad(std::to_string(r.threads), 3) << " | "
            << pad(fixed(r.xgrad_bf16_ms, 2), 13) << " | " << pad(fixed(r.libtorch_bf16_ms, 2), 10) << " | "
            << pad(fixed(r.xgrad_bf16_ms / r.libtorch_bf16_ms, 2), 10) << " | "
            << pad(fixed(r.xgrad_ms / r.xgrad_bf16_ms, 2), 8) << " | "
            << pad(fixed(static_cast<double>(r.spec.B * r.spec.T) / (r.xgrad_bf16_ms * 1e-3), 0), 8) << " | ";
        if (r.threads == 1)
        {
            out << pad(fixed(r.xgrad_bf16_cpu_ms, 2), 18) << " | " << pad(fixed(r.libtorch_bf16_cpu_ms, 2), 10) << " | "
                << pad(fixed(r.xgrad_bf16_cpu_ms / r.libtorch_bf16_cpu_ms, 2), 5) << " | ";
        }
        else
        {
            out << pad("-", 18) << " | " << pad("-", 10) << " | " << pad("-", 5) << " | ";
        }
        out << fixed(r.loss_bf16_first, 4) << "\n";
    }
}

std::string json_escape(const std::string& s)
{
    std::string out;
    for (char c : s)
    {
        if (c == '"' || c == '\\')
        {
            out += '\\';
        }
        out += (c == '\n' || c == '\t') ? ' ' : c;
    }
    return out;
}

void write_json(const std::string& path, const std::vector<std::pair<std::string, std::string>>& machine,
                const std::vector<row>& rows, const std::vector<peak_row>& peaks,
                const std::vector<overhead_row>& overheads, const std::vector<bench::gemm_row>& gemms,
                const std::vector<gpt_row>& gpt_rows,
                const settings& opt)
{
    std::ofstream out(path);
    if (!out)
    {
        die("cannot write " + path);
    }
    out << "{\n  \"machine\": {";
    for (std::size_t i = 0; i < machine.size(); ++i)
    {
        out << (i ? ", " : "") << "\"" << machine[i].first << "\": \"" << json_escape(machine[i].second) << "\"";
    }
    out << "},\n  \"units\": {\"time\": \"ms, median over interleaved rounds\", \"gflops\": \"FLOP = 2 x "
           "multiply-adds, fwd+bwd = 3 x fwd (eq. 20.5)\", \"ratio\": \"xgrad_ms / min(libtorch_ms, "
           "libtorch_nn_ms)\", \"tape_bytes\": \"xgrad tape.bytes_saved_for_backward(false) after forward (intermediates only)\", "
           "\"libtorch_forward_bytes\": \"LibTorch CPU-allocator bytes allocated by the composed forward and "
           "alive before backward\"},\n";
    out << "  \"rows\": [\n";
    for (std::size_t i = 0; i < rows.size(); ++i)
    {
        const row& r = rows[i];
        out << "    {\"model\": \"mha\", \"size\": \"" << r.size << "\", \"B\": " << r.B << ", \"T\": " << r.T << ", \"d\": " << r.d
            << ", \"H\": " << r.H << ", \"dtype\": \"" << (r.dtype == "f32" ? "float32" : "float64")
            << "\", \"threads\": " << r.threads << ", \"xgrad_ms\": " << fixed(r.xgrad_ms, 4)
            << ", \"libtorch_ms\": " << fixed(r.libtorch_ms, 4) << ", \"libtorch_nn_ms\": "
            << fixed(r.libtorch_nn_ms, 4) << ", \"ratio\": " << fixed(r.ratio, 4) << ", \"gflops\": "
            << fixed(r.gflops, 3) << ", \"peak_gflops\": " << fixed(r.peak_gflops, 3)
            << ", \"fma_peak_gflops\": " << fixed(r.fma_peak_gflops, 3)
            << ", \"fma_share\": " << fixed(r.gflops / r.fma_peak_gflops, 4)
            << ", \"xgrad_fused_ms\": " << fixed(r.fused_ms, 4) << ", \"fused_ratio\": " << fixed(r.fused_ratio, 4)
            << ", \"fused_gflops\": " << fixed(r.fused_gflops, 3)
            << ", \"fused_fma_share\": " << fixed(r.fused_gflops / r.fma_peak_gflops, 4)
            << ", \"fused_tape_bytes\": " << r.fused_tape_bytes;
        if (r.threads == 1)
        {
            out << ", \"xgrad_cpu_ms\": " << fixed(r.xgrad_cpu_ms, 4) << ", \"xgrad_fused_cpu_ms\": "
                << fixed(r.fused_cpu_ms, 4) << ", \"libtorch_cpu_ms\": " << fixed(r.libtorch_cpu_ms, 4);
        }
        if (r.has_bf16)
        {
            out << ", \"xgrad_bf16_ms\": " << fixed(r.xgrad_bf16_ms, 4) << ", \"libtorch_bf16_ms\": "
                << fixed(r.libtorch_bf16_ms, 4) << ", \"bf16_ratio\": " << fixed(r.xgrad_bf16_ms / r.libtorch_bf16_ms, 4);
            if (r.threads == 1)
            {
                out << ", \"xgrad_bf16_cpu_ms\": " << fixed(r.xgrad_bf16_cpu_ms, 4) << ", \"libtorch_bf16_cpu_ms\": "
                    << fixed(r.libtorch_bf16_cpu_ms, 4);
            }
        }
        out
            << ", \"tape_bytes\": " << r.tape_bytes << ", \"libtorch_gflops\": " << fixed(r.libtorch_gflops, 3)
            << ", \"libtorch_forward_bytes\": " << r.libtorch_bytes << ", \"repeats\": " << r.reps << "}"
            << (i + 1 < rows.size() || !gpt_rows.empty() ? "," : "") << "\n";
    }
    for (std::size_t i = 0; i < gpt_rows.size(); ++i)
    {
        const gpt_row& r = gpt_rows[i];
        const auto& s = r.spec;
        out << "    {\"model\": \"gpt\", \"config\": \"" << s.name << "\", \"V\": " << s.V << ", \"L\": " << s.L
            << ", \"d\": " << s.d << ", \"H\": " << s.H << ", \"T\": " << s.T << ", \"B\": " << s.B
            << ", \"threads\": " << r.threads << ", \"dtype\": \"float32\", \"xgrad_ms\": " << fixed(r.xgrad_ms, 4)
            << ", \"libtorch_ms\": " << fixed(r.libtorch_ms, 4) << ", \"ratio\": " << fixed(r.ratio, 4)
            << ", \"tokens_per_s\": " << fixed(r.tokens_per_s, 1) << ", \"gflops\": " << fixed(r.gflops, 3)
            << ", \"fma_peak_gflops\": " << fixed(r.fma_peak_gflops, 3) << ", \"fma_share\": "
            << fixed(r.gflops / r.fma_peak_gflops, 4) << ", \"loss_step1\": " << fixed(r.loss_first, 6)
            << ", \"loss_step2\": " << fixed(r.loss_second, 6) << ", \"repeats\": " << r.reps;
        if (r.threads == 1)
        {
            out << ", \"xgrad_cpu_ms\": " << fixed(r.xgrad_cpu_ms, 4) << ", \"libtorch_cpu_ms\": "
                << fixed(r.libtorch_cpu_ms, 4);
        }
        if (r.has_bf16)
        {
            out << ", \"xgrad_bf16_ms\": " << fixed(r.xgrad_bf16_ms, 4) << ", \"libtorch_bf16_ms\": "
                << fixed(r.libtorch_bf16_ms, 4) << ", \"bf16_ratio\": " << fixed(r.xgrad_bf16_ms / r.libtorch_bf16_ms, 4)
                << ", \"bf16_speedup\": " << fixed(r.xgrad_ms / r.xgrad_bf16_ms, 4) << ", \"loss_bf16_step1\": "
                << fixed(r.loss_bf16_first, 6);
            if (r.threads == 1)
            {
                out << ", \"xgrad_bf16_cpu_ms\": " << fixed(r.xgrad_bf16_cpu_ms, 4) << ", \"libtorch_bf16_cpu_ms\": "
                    << fixed(r.libtorch_bf16_cpu_ms, 4);
            }
        }
        out << "}"
            << (i + 1 < gpt_rows.size() ? "," : "") << "\n";
    }
    out << "  ],\n  \"gemm_peak\": [";
    for (std::size_t i = 0; i < peaks.size(); ++i)
    {
        out << (i ? ", " : "") << "{\"dtype\": \"" << (peaks[i].dtype == "f32" ? "float32" : "float64")
            << "\", \"threads\": " << peaks[i].threads << ", \"n\": " << opt.gemm_n
            << ", \"gflops\": " << fixed(peaks[i].gflops, 3) << ", \"best_gflops\": " << fixed(peaks[i].best_gflops, 3)
            << ", \"fma_peak_gflops\": " << fixed(peaks[i].fma_gflops, 3)
            << "}";
    }
    out << "],\n  \"per_op_overhead\": [";
    for (std::size_t i = 0; i < overheads.size(); ++i)
    {
        const auto& o = overheads[i];
        out << (i ? ", " : "") << "{\"dtype\": \"" << (o.dtype == "f32" ? "float32" : "float64")
            << "\", \"threads\": " << o.threads << ", \"chain_length\": " << opt.chain_length
            << ", \"width\": " << opt.chain_width << ", \"xgrad_us_per_op\": " << fixed(o.xgrad_us, 4)
            << ", \"xgrad_cpu_us_per_op\": " << fixed(o.xgrad_cpu_us, 4)
            << ", \"libtorch_cpu_us_per_op\": " << fixed(o.libtorch_cpu_us, 4)
            << ", \"libtorch_us_per_op\": " << fixed(o.libtorch_us, 4) << "}";
    }
    out << "],\n  \"gemm_backends\": [\n";
    for (std::size_t i = 0; i < gemms.size(); ++i)
    {
        const auto& r = gemms[i];
        const double fma = one_thread_fma(peaks, r.dtype);
        out << "    {\"dtype\": \"" << r.dtype << "\", \"product\": \"" << json_escape(r.shape.label)
            << "\", \"transpose_a\": " << (r.shape.ta ? "true" : "false") << ", \"transpose_b\": "
            << (r.shape.tb ? "true" : "false") << ", \"m\": " << r.shape.m << ", \"n\": " << r.shape.n
            << ", \"k\": " << r.shape.k << ", \"chosen\": \"" << r.chosen << "\", \"gflops\": "
            << fixed(r.door_gflops, 3) << ", \"bf16_gflops\": " << fixed(r.door_bf16_gflops, 3)
            << ", \"fma_peak_gflops\": " << fixed(fma, 3) << ", \"backends\": {";
        for (std::size_t j = 0; j < r.backends.size(); ++j)
        {
            out << (j ? ", " : "") << "\"" << r.backends[j].first << "\": " << fixed(r.backends[j].second, 3);
        }
        out << "}}" << (i + 1 < gemms.size() ? "," : "") << "\n";
    }
    out << "  ]\n}\n";
}

std::vector<std::string> split(const std::string& s)
{
    std::vector<std::string> out;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, ','))
    {
        out.push_back(item);
    }
    return out;
}

std::string join(const std::vector<std::string>& items)
{
    std::string out;
    for (const std::string& item : items)
    {
        out += (out.empty() ? "" : ",") + item;
    }
    return out;
}

// A comma-separated list; "none" is the empty list.
std::vector<std::string> list_or_none(const std::string& s)
{
    return s == "none" ? std::vector<std::string>{} : split(s);
}

settings parse(int argc, char** argv)
{
    settings opt;
    CLI::App app{"xgrad vs LibTorch: MHA and GPT steps, the GEMM backends and the FMA peak, in one run "
                 "(docs/performance.md)", "xgrad_bench"};
    std::string sizes = join(opt.sizes), dtypes = join(opt.dtypes), threads = "1,2", gpt = join(opt.gpt_configs),
                decode = join(opt.decode_configs);
    int min_reps = opt.min_reps;
    bool quick = false, no_bf16 = false;
    app.add_option("--json", opt.json_path, "where the rows go as JSON")->capture_default_str();
    app.add_option("--sizes", sizes, "MHA sizes: tiny,small,medium,large,xl or none")->capture_default_str();
    app.add_option("--dtypes", dtypes, "f32,f64")->capture_default_str();
    app.add_option("--threads", threads, "thread counts, e.g. 1,2")->capture_default_str();
    app.add_option("--gpt", gpt, "GPT configs: nano,char,shake or none")->capture_default_str();
    app.add_option("--decode", decode, "decode configs: stories15M,nano,char,shake or none")->capture_default_str();
    std::string window_lengths = "1024";
    app.add_option("--window-T", window_lengths,
                   "sliding-window attention rows: lengths T (w = T/8), or none")
        ->capture_default_str();
    app.add_option("--budget", opt.budget_s, "seconds of timed rounds per row, before the clamps")
        ->capture_default_str();
    app.add_option("--min-reps", min_reps, "at least this many rounds per row")->capture_default_str();
    app.add_option("--max-reps", opt.max_reps, "at most this many rounds per row")->capture_default_str();
    app.add_flag("--no-bf16", no_bf16, "no bfloat16 columns");
    app.add_flag("--quick", quick, "a smoke run of a few seconds");
    try
    {
        app.parse(argc, argv);
    }
    catch (const CLI::CallForHelp&)
    {
        std::fputs(app.help().c_str(), stdout);
        std::exit(0);
    }
    catch (const CLI::ParseError& e)
    {
        const std::string what = e.what();
        die(what.substr(0, what.find('\n')) + " (see --help)");
    }
    opt.sizes = list_or_none(sizes);
    opt.dtypes = split(dtypes);
    opt.gpt_configs = list_or_none(gpt);
    opt.decode_configs = list_or_none(decode);
    opt.window_lengths.clear();
    for (const std::string& t : list_or_none(window_lengths))
    {
        if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 6 ||
            std::stoi(t) < 8)
        {
            die("--window-T: '" + t + "' is not a length of at least 8 (see --help)");
        }
        opt.window_lengths.push_back(static_cast<std::size_t>(std::stoi(t)));
    }
    opt.threads.clear();
    for (const std::string& t : split(threads))
    {
        if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 3 || std::stoi(t) < 1)
        {
            die("--threads: '" + t + "' is not a thread count (see --help)");
        }
        opt.threads.push_back(std::stoi(t));
    }
    opt.min_reps = opt.min_reps_slow = min_reps;
    opt.bf16 = !no_bf16 && bench::xgrad_bf16_supported();
    if (quick)
    {
        opt.budget_s = 0.2;
        opt.min_reps = opt.min_reps_slow = 1;
        opt.max_reps = 5;
        opt.chain_reps = 5;
        opt.gemm_reps = 3;
        opt.decode_rounds = 1;
        opt.decode_load_runs = 1;
    }
    return opt;
}
}  // namespace

int main(int argc, char** argv)
{
    if (argc == 5 && std::string(argv[1]) == "--decode-load")
    {
        return decode_load_child(argv[2], argv[3], argv[4]);
    }
    const settings opt = parse(argc, argv);
    {
        // Fire xgrad's one-time "BLAS single-threaded" switch now, so that it cannot later undo a thread
        // count this harness set for LibTorch or for the GEMM peak.
        float a = 1, b = 1, c = 0;
        bench::xgrad_gemm<float>(1, &a, &b, &c);
    }
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
    const char* mmap_threshold = std::getenv("MALLOC_MMAP_THRESHOLD_");
    const char* trim_threshold = std::getenv("MALLOC_TRIM_THRESHOLD_");
    std::vector<std::pair<std::string, std::string>> machine = {
        {"cpu", read_first_line("/proc/cpuinfo", "model name")},
        {"openblas_core", bench::openblas_core()},
        {"openblas_coretype_env", coretype ? coretype : "(unset)"},
        {"libtorch", bench::torch_version()},
        {"libtorch_config", bench::torch_blas_info()},
        {"loadavg_start", read_first_line("/proc/loadavg")},
        {"omp_wait_policy_env", wait_policy ? wait_policy : "(unset)"},
        {"busy_cores_at_start", fixed(busy_cores(), 2)},
        {"malloc_mmap_threshold_env", mmap_threshold ? mmap_threshold : "(unset)"},
        {"malloc_trim_threshold_env", trim_threshold ? trim_threshold : "(unset)"},
        {"bf16_products", bench::xgrad_bf16_supported() ? "yes" : "no (no bf16 columns)"},
        {"xgrad_gemm_backends", bench::xgrad_gemm_backends()},
        {"xgrad_gemm_rule", bench::xgrad_gemm_rule()},
    };
    std::cout << "xgrad vs LibTorch: MHA self-attention forward+backward (bench/)\n"
              << "CPU: " << machine[0].second << "\n"
              << "OpenBLAS core in use (LibTorch's GEMMs run on it): " << machine[1].second
              << "; OPENBLAS_CORETYPE=" << machine[2].second << "\n"
              << "xgrad GEMM backends built: " << machine[11].second << "; door rule: " << machine[12].second << "\n"
              << "LibTorch " << machine[3].second << ": " << machine[4].second
              << "; OMP_WAIT_POLICY=" << machine[6].second << "\n"
              << "load average at start: " << machine[5].second << "; cores busy with other work: "
              << machine[7].second << "\n"
              << (std::atof(machine[7].second.c_str()) > 0.25
                      ? "WARNING: other processes are using the CPUs; timings (above all at 2 threads) will be noisy\n"
                      : "")
              << "glibc malloc: MALLOC_MMAP_THRESHOLD_=" << machine[8].second << ", MALLOC_TRIM_THRESHOLD_="
              << machine[9].second << "; CPU bfloat16 dot products (AVX512_BF16 or AMX-BF16): " << machine[10].second
              << "\n"
              << "threads: at::set_num_threads(n) and xgrad::set_num_threads(n); OpenBLAS set to n around\n"
              << "LibTorch steps and to 1 around xgrad steps (xgrad keeps its BLAS single-threaded by design).\n"
              << std::flush;

    std::vector<row> rows;
    std::vector<peak_row> peaks;
    std::vector<overhead_row> overheads;
    std::vector<gpt_row> gpt_rows;
    std::vector<decode_row> decode_rows;
    std::vector<window_row> window_rows;
    std::string decode_folder = (std::filesystem::temp_directory_path() / "xgrad-bench-decode-XXXXXX").string();
    if (!opt.decode_configs.empty() && !::mkdtemp(decode_folder.data()))
    {
        die("decode: cannot make a temporary folder");
    }
    const auto decode_loads =
        opt.decode_configs.empty() ? std::vector<std::pair<decode_load, decode_load>>{} : prepare_decode(opt, decode_folder);
    const auto start = std::chrono::steady_clock::now();
    for (const auto& dtype : opt.dtypes)
    {
        if (dtype != "f32" && dtype != "f64")
        {
            die("unknown dtype " + dtype + " (f32 or f64)");
        }
    }
    int xgrad_pool = 0;
    for (int threads : opt.threads)
    {
        bench::torch_threads(threads);
        // Resize xgrad's pool only when the count changes, and never down then up again: in this xgrad,
        // a pool re-grown after it has run parallel work starts workers that replay the last (dangling)
        // job (ops/parallel.cpp, pool::resize), so the thread counts are the outer loop.
        if (threads != xgrad_pool)
        {
            bench::xgrad_threads(threads);
            xgrad_pool = threads;
        }
        for (const auto& dtype : opt.dtypes)
        {
            const auto [peak, best] =
                dtype == "f32" ? gemm_peak<float>(opt, threads) : gemm_peak<double>(opt, threads);
            const double fma = dtype == "f32" ? bench::fma_peak_gflops<float>(threads)
                                              : bench::fma_peak_gflops<double>(threads);
            peaks.push_back({dtype, threads, peak, best, fma});
            overheads.push_back(dtype == "f32" ? chain_overhead<float>(opt, dtype, threads)
                                               : chain_overhead<double>(opt, dtype, threads));
            std::cerr << dtype << " threads=" << threads << ": FMA peak " << fixed(fma, 1) << " GFLOP/s, GEMM 512^3 "
                      << fixed(peak, 1) << " GFLOP/s, add chain "
                      << fixed(overheads.back().xgrad_us, 2) << " vs " << fixed(overheads.back().libtorch_us, 2)
                      << " us/op\n";
            for (const auto& name : opt.sizes)
            {
                auto it = std::find_if(all_sizes.begin(), all_sizes.end(),
                                       [&](const size_spec& s) { return s.name == name; });
                if (it == all_sizes.end())
                {
                    die("unknown size " + name + " (tiny, small, medium, large, xl)");
                }
                rows.push_back(dtype == "f32" ? mha_row<float>(opt, *it, dtype, threads, peak, fma)
                                              : mha_row<double>(opt, *it, dtype, threads, peak, fma));
            }
            if (dtype != "f32")
            {
                continue;
            }
            for (const auto& name : opt.gpt_configs)
            {
                auto it = std::find_if(all_gpt_configs.begin(), all_gpt_configs.end(),
                                       [&](const bench::gpt_spec& s) { return s.name == name; });
                if (it == all_gpt_configs.end())
                {
                    die("unknown GPT config " + name + " (nano, char, shake or none)");
                }
                gpt_rows.push_back(gpt_step_row(opt, *it, threads, fma));
            }
            for (std::size_t T : opt.window_lengths)
            {
                window_rows.push_back(attention_window_row(opt, T, threads));
                const auto& w = window_rows.back();
                std::cerr << "window T=" << T << " threads=" << threads << ": full " << fixed(w.full_ms, 2)
                          << " ms, w=" << w.window << " " << fixed(w.window_ms, 2) << " ms\n";
            }
            for (std::size_t k = 0; k < opt.decode_configs.size(); ++k)
            {
                decode_rows.push_back(
                    decode_step_row(opt, decode_config(opt.decode_configs[k]), threads, decode_folder));
                decode_rows.back().xgrad = decode_loads[k].first;
                decode_rows.back().libtorch = decode_loads[k].second;
            }
        }
    }
    const std::vector<bench::gemm_row> gemms = gemm_table(opt);
    const double minutes =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 60.0;
    machine.push_back({"busy_cores_at_end", fixed(busy_cores(), 2)});
    machine.push_back({"loadavg_end", read_first_line("/proc/loadavg")});
    machine.push_back({"wall_minutes", fixed(minutes, 2)});
    for (const auto& dtype : opt.dtypes)
    {
        print_table(std::cout, dtype, rows, peaks, overheads);
    }
    print_gpt_table(std::cout, gpt_rows);
    print_window_table(std::cout, window_rows);
    print_decode_table(std::cout, decode_rows);
    if (!opt.decode_configs.empty())
    {
        std::filesystem::remove_all(decode_folder);
    }
    print_gemm_tables(std::cout, gemms, peaks);
    write_json(opt.json_path, machine, rows, peaks, overheads, gemms, gpt_rows, opt);
    std::cout << "\nload average at end: " << machine[machine.size() - 2].second << "; cores busy with other work: "
              << machine[machine.size() - 3].second << "  (wall " << fixed(minutes, 1)
              << " min)\nJSON: " << opt.json_path << "\n";
    return 0;
}
