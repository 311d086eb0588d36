// The FMA peak of this machine, measured: a loop of independent fused multiply-adds on the widest vector
// registers xsimd targets here (this file is always compiled with -march=native, so AVX-512 where the
// CPU has it, else AVX2, ...). Twelve independent accumulators cover the FMA latency (4 cycles) times the
// FMA ports (2) on current x86 cores. Time is the thread's CPU time, so other processes on a shared
// machine do not lower it; the best of several runs is the peak.
#include <time.h>

#include <algorithm>
#include <thread>
#include <vector>
#include <xsimd/xsimd.hpp>

#include "bench/bench.hpp"

namespace bench
{
namespace
{
double thread_seconds()
{
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

constexpr int chains = 12;

// FLOP per second of one thread running `iterations` rounds of `chains` vector FMAs. The twelve
// accumulators are separate variables tied to registers by one empty asm statement per round, so the
// compiler neither spills them nor folds the loop away.
template <class T>
double fma_loop(long iterations)
{
    using batch = xsimd::batch<T>;
    batch a0(T(1)), a1(T(1.1)), a2(T(1.2)), a3(T(1.3)), a4(T(1.4)), a5(T(1.5)), a6(T(1.6)), a7(T(1.7)),
        a8(T(1.8)), a9(T(1.9)), a10(T(2.0)), a11(T(2.1));
    const batch x(T(0.9999999)), y(T(1e-7));
    const double start = thread_seconds();
    for (long i = 0; i < iterations; ++i)
    {
        a0 = xsimd::fma(a0, x, y);
        a1 = xsimd::fma(a1, x, y);
        a2 = xsimd::fma(a2, x, y);
        a3 = xsimd::fma(a3, x, y);
        a4 = xsimd::fma(a4, x, y);
        a5 = xsimd::fma(a5, x, y);
        a6 = xsimd::fma(a6, x, y);
        a7 = xsimd::fma(a7, x, y);
        a8 = xsimd::fma(a8, x, y);
        a9 = xsimd::fma(a9, x, y);
        a10 = xsimd::fma(a10, x, y);
        a11 = xsimd::fma(a11, x, y);
        asm volatile(""
                     : "+v"(a0.data), "+v"(a1.data), "+v"(a2.data), "+v"(a3.data), "+v"(a4.data), "+v"(a5.data),
                       "+v"(a6.data), "+v"(a7.data), "+v"(a8.data), "+v"(a9.data), "+v"(a10.data), "+v"(a11.data));
    }
    const double seconds = thread_seconds() - start;
    volatile T sink = xsimd::hadd(a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11);
    (void)sink;
    return 2.0 * chains * batch::size * static_cast<double>(iterations) / seconds;
}

// Best of `runs` runs of ~5 ms each on one thread.
template <class T>
double best_rate(int runs)
{
    const long iterations = 2'000'000 / static_cast<long>(xsimd::batch<T>::size);
    fma_loop<T>(iterations / 10);  // wakes the core up
    double best = 0;
    for (int r = 0; r < runs; ++r)
    {
        best = std::max(best, fma_loop<T>(iterations));
    }
    return best;
}
}  // namespace

template <class T>
double fma_peak_gflops(int threads)
{
    std::vector<double> rates(static_cast<std::size_t>(threads));
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
    {
        workers.emplace_back([&rates, t] { rates[static_cast<std::size_t>(t)] = best_rate<T>(15); });
    }
    for (auto& w : workers)
    {
        w.join();
    }
    double total = 0;
    for (double r : rates)
    {
        total += r;
    }
    return total * 1e-9;
}

std::string fma_isa()
{
    return std::string(xsimd::default_arch::name()) + ", " + std::to_string(xsimd::batch<float>::size) +
           " floats / " + std::to_string(xsimd::batch<double>::size) + " doubles per register";
}

template double fma_peak_gflops<float>(int);
template double fma_peak_gflops<double>(int);
}  // namespace bench
