// GEMM: every product goes to the backend measured fastest on this machine for its shape class.
//
// Which library is fastest depends on the CPU and on the shape, and neither is known when xgrad is built:
// on one machine OpenBLAS detects its best kernels, on another (a CPU newer than the library) it falls
// back to SSE3 ones and runs at a tenth of the FMA peak; oneDNN has no double GEMM; LIBXSMM's single
// JIT kernel wins at per-head attention sizes and loses to packed blocks on large products. So the door
// measures instead of guessing: the first product of each shape class is timed once on every backend
// that can run it, and the class keeps the fastest from then on (within one process the choice never
// changes, so results are reproducible run to run within it).
//
// A shape class is (dtype, transpose flags, and a size bucket for each of m, n, k: up to 16, 32, 64,
// 128, 256, or more). The probe is the class's first product itself, each side capped at 256 (a larger
// product is timed on its leading 256 x 256 x 256 block), written into a scratch C. Time is the calling
// thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so a machine shared with other processes does not skew
// it; each backend gets one untimed run (JIT code generation), then three rounds of timed runs with the
// backends interleaved (the best of its runs counts), and a backend three times slower than the best
// after the first round is not timed again. An MHA training step meets 20-30 classes; calibrating them
// all added 130 ms (float32) and 170 ms (float64) to the first step on the project's machine.
#include "kernels/gemm.hpp"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/gemm_backends.hpp"

namespace xgrad::kernels
{
namespace
{
constexpr int probe_side = 256;   // calibration times products of at most this side
constexpr int bucket_count = 6;   // sides up to 16, 32, 64, 128, 256, more

int bucket(std::size_t side)
{
    int b = 0;
    for (std::size_t limit = 16; b + 1 < bucket_count && side > limit; limit *= 2)
    {
        ++b;
    }
    return b;
}

std::string bucket_range(int b)
{
    const std::size_t upper = std::size_t(16) << b;
    if (b + 1 == bucket_count)
    {
        return std::to_string(upper / 2 + 1) + "+";
    }
    return (b == 0 ? std::string("1") : std::to_string(upper / 2 + 1)) + "-" + std::to_string(upper);
}

// CBLAS, LIBXSMM and oneDNN's signatures take int sizes: refuse anything that would wrap.
int checked(std::size_t n)
{
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    {
        throw std::invalid_argument("matmul: size " + std::to_string(n) + " exceeds the GEMM limit of " +
                                    std::to_string(std::numeric_limits<int>::max()));
    }
    return static_cast<int>(n);
}

template <class T>
void run(gemm_backend backend, const backends::product& p, const T* a, const T* b, T beta, T* c)
{
    switch (backend)
    {
    case gemm_backend::openblas:
        return backends::openblas(p, a, b, beta, c);
    case gemm_backend::onednn:
        if constexpr (std::is_same_v<T, float>)
        {
            return backends::onednn(p, a, b, beta, c);
        }
        break;
    case gemm_backend::libxsmm:
        return backends::libxsmm_whole(p, a, b, beta, c);
    case gemm_backend::libxsmm_tiled:
        return backends::libxsmm_tiled(p, a, b, beta, c);
    }
    throw std::logic_error("gemm: backend " + std::string(name(backend)) + " cannot run this product");
}

// ---- calibration ----------------------------------------------------------------------------------

double thread_seconds()
{
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Per class: 0 until measured, else 1 + the chosen backend. Index: dtype, ta, tb, then the three buckets.
constexpr std::size_t class_count = 2 * 2 * 2 * bucket_count * bucket_count * bucket_count;
std::atomic<unsigned char> choices[class_count];  // static storage: starts at 0
std::mutex calibration_mutex;
std::vector<gemm_class_report> reports;  // guarded by calibration_mutex

template <class T>
std::size_t class_of(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k)
{
    std::size_t index = std::is_same_v<T, double> ? 1 : 0;
    index = (index * 2 + ta) * 2 + tb;
    return ((index * bucket_count + bucket(m)) * bucket_count + bucket(n)) * bucket_count + bucket(k);
}

// Seconds per product of `backend` on p for one timed run that repeats the product `repeats` times.
template <class T>
double seconds_per_product(gemm_backend backend, const backends::product& p, const T* a, const T* b, T beta, T* c,
                           int repeats)
{
    const double start = thread_seconds();
    for (int r = 0; r < repeats; ++r)
    {
        run(backend, p, a, b, beta, c);
    }
    return (thread_seconds() - start) / repeats;
}

template <class T>
gemm_backend calibrate(std::size_t index, const backends::product& p, const T* a, const T* b, T beta)
{
    std::lock_guard<std::mutex> lock(calibration_mutex);
    const unsigned char known = choices[index].load(std::memory_order_acquire);
    if (known != 0)
    {
        return static_cast<gemm_backend>(known - 1);  // another thread measured it meanwhile
    }
    backends::product probe = p;
    probe.m = std::min(p.m, probe_side);
    probe.n = std::min(p.n, probe_side);
    probe.k = std::min(p.k, probe_side);
    probe.ldc = probe.n;
    std::vector<T> scratch(static_cast<std::size_t>(probe.m) * probe.n, T(0));

    struct candidate
    {
        gemm_backend backend;
        int repeats;
        double best;
    };
    std::vector<candidate> candidates;
    for (gemm_backend backend : all_gemm_backends)
    {
        if (gemm_backend_supports(backend, std::is_same_v<T, double>, p.m, p.n, p.k))
        {
            // An untimed run first (JIT code generation, caches); its time sets the repeats of a timed run
            // (~20 us, so the clock's resolution does not matter).
            const double first = seconds_per_product(backend, probe, a, b, beta, scratch.data(), 1);
            const int repeats = static_cast<int>(std::clamp(20e-6 / std::max(first, 1e-9), 1.0, 200.0));
            candidates.push_back({backend, repeats, std::numeric_limits<double>::infinity()});
        }
    }
    // Three rounds, the candidates interleaved within each, so that a burst of other work on a shared
    // machine does not land on one backend's runs only; a backend three times slower than the best after
    // the first round is not timed again.
    double best = std::numeric_limits<double>::infinity();
    for (int round = 0; round < 3; ++round)
    {
        for (candidate& c : candidates)
        {
            if (round > 0 && c.best > 3 * best)
            {
                continue;
            }
            c.best = std::min(c.best, seconds_per_product(c.backend, probe, a, b, beta, scratch.data(), c.repeats));
            best = std::min(best, c.best);
        }
    }

    gemm_class_report report;
    report.dtype = std::is_same_v<T, double> ? "float64" : "float32";
    report.transpose_a = p.ta;
    report.transpose_b = p.tb;
    report.m = bucket_range(bucket(static_cast<std::size_t>(p.m)));
    report.n = bucket_range(bucket(static_cast<std::size_t>(p.n)));
    report.k = bucket_range(bucket(static_cast<std::size_t>(p.k)));
    report.probe_m = probe.m;
    report.probe_n = probe.n;
    report.probe_k = probe.k;
    const double flop = 2.0 * probe.m * probe.n * probe.k;
    for (const candidate& c : candidates)
    {
        report.gflops.emplace_back(c.backend, flop / c.best * 1e-9);
        if (c.best == best)
        {
            report.chosen = c.backend;
        }
    }
    reports.push_back(report);
    choices[index].store(static_cast<unsigned char>(1 + static_cast<int>(report.chosen)), std::memory_order_release);
    return report.chosen;
}

// What every entry point shares: empty products, k = 0, any beta, the int limits. Then `body` runs the
// product with beta 0 or 1.
template <class T, class Body>
void with_checked_product(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, std::size_t lda,
                          std::size_t ldb, T beta, T* c, std::size_t ldc, Body&& body)
{
    if (m == 0 || n == 0)
    {
        return;
    }
    if (beta != T(0) && beta != T(1))
    {
        for (std::size_t i = 0; i < m; ++i)
        {
            for (std::size_t j = 0; j < n; ++j)
            {
                c[i * ldc + j] *= beta;
            }
        }
        beta = T(1);
    }
    if (k == 0)
    {
        if (beta == T(0))
        {
            for (std::size_t i = 0; i < m; ++i)
            {
                std::fill(c + i * ldc, c + i * ldc + n, T(0));
            }
        }
        return;
    }
    const backends::product p{ta, tb, checked(m), checked(n), checked(k), checked(lda), checked(ldb), checked(ldc)};
    body(p, beta);
}

template <class T>
void gemm_any(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda,
              const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc)
{
    with_checked_product(ta, tb, m, n, k, lda, ldb, beta, c, ldc, [&](const backends::product& p, T b01) {
        const std::size_t index = class_of<T>(ta, tb, m, n, k);
        const unsigned char known = choices[index].load(std::memory_order_acquire);
        const gemm_backend backend = known != 0 ? static_cast<gemm_backend>(known - 1) : calibrate(index, p, a, b, b01);
        run(backend, p, a, b, b01, c);
    });
}

template <class T>
void gemm_with_any(gemm_backend backend, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a,
                   std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc)
{
    if (!gemm_backend_supports(backend, std::is_same_v<T, double>, m, n, k))
    {
        throw std::invalid_argument(std::string("gemm: backend ") + name(backend) + " cannot run a " +
                                    std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k) +
                                    (std::is_same_v<T, double> ? " float64" : " float32") + " product");
    }
    with_checked_product(ta, tb, m, n, k, lda, ldb, beta, c, ldc,
                         [&](const backends::product& p, T b01) { run(backend, p, a, b, b01, c); });
}
}  // namespace

const char* name(gemm_backend backend)
{
    switch (backend)
    {
    case gemm_backend::openblas:
        return "openblas";
    case gemm_backend::onednn:
        return "onednn";
    case gemm_backend::libxsmm:
        return "libxsmm";
    case gemm_backend::libxsmm_tiled:
        return "libxsmm_tiled";
    }
    return "?";
}

bool gemm_backend_supports(gemm_backend backend, bool double_precision, std::size_t m, std::size_t n, std::size_t k)
{
    switch (backend)
    {
    case gemm_backend::onednn:
        return !double_precision;
    case gemm_backend::libxsmm:
    {
        const auto side = static_cast<std::size_t>(backends::libxsmm_whole_side);
        return m <= side && n <= side && k <= side;
    }
    default:
        return true;
    }
}

void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
          const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc)
{
    gemm_any(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const double* a, std::size_t lda,
          const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc)
{
    gemm_any(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm_with(gemm_backend backend, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a,
               std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc)
{
    gemm_with_any(backend, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm_with(gemm_backend backend, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const double* a,
               std::size_t lda, const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc)
{
    gemm_with_any(backend, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

std::vector<gemm_class_report> gemm_calibration()
{
    std::lock_guard<std::mutex> lock(calibration_mutex);
    return reports;
}

std::optional<gemm_backend> gemm_choice(bool double_precision, bool ta, bool tb, std::size_t m, std::size_t n,
                                        std::size_t k)
{
    const std::size_t index = double_precision ? class_of<double>(ta, tb, m, n, k) : class_of<float>(ta, tb, m, n, k);
    const unsigned char known = choices[index].load(std::memory_order_acquire);
    if (known == 0)
    {
        return std::nullopt;
    }
    return static_cast<gemm_backend>(known - 1);
}

const char* openblas_core()
{
    return backends::openblas_core();
}
}  // namespace xgrad::kernels
