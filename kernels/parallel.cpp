// A small persistent thread pool for parallel_for: workers sleep on a condition variable between calls,
// so a call costs a wake-up, not a thread start. Before they sleep, workers (and the caller, waiting for
// them) spin for a few tens of microseconds: a training step of a small model runs a parallel region
// every few microseconds, and a wake-up through the kernel took longer than the work it brought (the
// `nano` step on 2 threads spent a third of its wall time waiting; docs/performance.md).
#include "kernels/parallel.hpp"

#include "kernels/precision.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace xgrad
{
namespace
{
// Tells the core this is a spin-wait loop (x86's PAUSE: saves power, leaves the pipeline to the other
// hardware thread); a no-op elsewhere.
inline void spin_pause()
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

// Spins until done() or until about `spin_time` has passed; returns done()'s last answer.
template <class Done>
bool spin_until(Done&& done)
{
    constexpr auto spin_time = std::chrono::microseconds(50);
    const auto start = std::chrono::steady_clock::now();
    for (unsigned i = 1;; ++i)
    {
        if (done())
        {
            return true;
        }
        spin_pause();
        if (i % 64 == 0 && std::chrono::steady_clock::now() - start > spin_time)
        {
            return done();
        }
    }
}

class pool
{
public:
    ~pool() { resize(1); }

    int size() const { return static_cast<int>(workers_.size()) + 1; }

    void resize(int n)
    {
        std::lock_guard<std::mutex> job(run_mutex_);  // never while a job runs
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        for (auto& w : workers_)
        {
            w.join();
        }
        workers_.clear();
        stopping_ = false;
        for (int i = 1; i < n; ++i)
        {
            workers_.emplace_back([this, i, first_round = round_.load()] { work(i, first_round); });
        }
    }

    // Thread t of size() takes chunk t of [0, count); the caller is thread 0. One job at a time: a caller
    // that finds the pool busy (another user thread, or a parallel_for inside a body) runs serially.
    void run(std::size_t count, const std::function<void(std::size_t)>& body)
    {
        std::unique_lock<std::mutex> job(run_mutex_, std::try_to_lock);
        const int threads = static_cast<int>(std::min<std::size_t>(size(), count));
        if (threads <= 1 || !job.owns_lock())
        {
            for (std::size_t i = 0; i < count; ++i)
            {
                body(i);
            }
            return;
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            body_ = &body;
            count_ = count;
            active_ = threads;
            pending_ = threads - 1;
            error_ = nullptr;
            ++round_;
        }
        wake_.notify_all();
        std::exception_ptr mine;
        try
        {
            run_chunk(0);
        }
        catch (...)
        {
            mine = std::current_exception();
        }
        spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; });
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return pending_ == 0; });  // workers still read body_ until then
        if (mine || error_)
        {
            std::rethrow_exception(mine ? mine : error_);
        }
    }

private:
    void run_chunk(int t)
    {
        const std::size_t begin = count_ * t / active_, end = count_ * (t + 1) / active_;
        for (std::size_t i = begin; i < end; ++i)
        {
            (*body_)(i);
        }
    }

    // `seen` starts at the round current when the worker was made: it must never replay an old job.
    void work(int t, std::size_t seen)
    {
        for (;;)
        {
            spin_until([&] { return round_.load(std::memory_order_acquire) != seen; });
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || round_ != seen; });
            if (stopping_)
            {
                return;
            }
            seen = round_;
            if (t >= active_)
            {
                continue;
            }
            lock.unlock();
            std::exception_ptr error;
            try
            {
                run_chunk(t);
            }
            catch (...)
            {
                error = std::current_exception();
            }
            lock.lock();
            if (error)
            {
                error_ = error;
            }
            if (--pending_ == 0)
            {
                done_.notify_one();
            }
        }
    }

    std::vector<std::thread> workers_;
    std::mutex run_mutex_;  // held for a whole job (and by resize)
    std::mutex mutex_;      // guards the job's fields below
    std::condition_variable wake_, done_;
    const std::function<void(std::size_t)>* body_ = nullptr;
    std::size_t count_ = 0;
    std::atomic<std::size_t> round_{0};  // written under mutex_; read without it only to spin
    int active_ = 0;
    std::atomic<int> pending_{0};
    bool stopping_ = false;  // resize's stop reaches a worker through the condition variable, after its spin
    std::exception_ptr error_;
};

pool& the_pool()
{
    static pool p;
    return p;
}
}  // namespace

void set_num_threads(int n)
{
    if (n < 1)
    {
        throw std::invalid_argument("set_num_threads: need at least 1 thread, got " + std::to_string(n));
    }
    the_pool().resize(n);
}

int num_threads()
{
    return the_pool().size();
}

namespace kernels
{
void parallel_for(std::size_t count, const std::function<void(std::size_t)>& body)
{
    // Workers run the body at the caller's matmul precision (kernels/precision.hpp).
    const matmul_precision precision = current_matmul_precision();
    if (precision == matmul_precision::fp32)
    {
        the_pool().run(count, body);
        return;
    }
    const std::function<void(std::size_t)> at_precision = [&](std::size_t i) {
        const precision_scope scope(precision);
        body(i);
    };
    the_pool().run(count, at_precision);
}

void for_rows(std::size_t rows, std::size_t row_length, const std::function<void(std::size_t)>& body)
{
    constexpr std::size_t parallel_threshold = 1 << 16;  // elements in all
    if (rows * row_length < parallel_threshold)
    {
        for (std::size_t r = 0; r < rows; ++r)
        {
            body(r);
        }
        return;
    }
    parallel_for(rows, body);
}

std::size_t row_block_count(std::size_t rows, std::size_t row_length)
{
    constexpr std::size_t block_elements = 1 << 15;  // 128 KiB of float32: an L2-sized piece of work
    constexpr std::size_t most_blocks = 64;          // the partial sums stay small beside the rows
    const std::size_t by_size = rows * row_length / block_elements;
    return std::max<std::size_t>(1, std::min({rows, by_size, most_blocks}));
}

void for_row_blocks(std::size_t rows, std::size_t blocks,
                    const std::function<void(std::size_t, std::size_t, std::size_t)>& body)
{
    parallel_for(blocks, [&](std::size_t b) { body(b, rows * b / blocks, rows * (b + 1) / blocks); });
}
}  // namespace kernels
}  // namespace xgrad
