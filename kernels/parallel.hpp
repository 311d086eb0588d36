// Work split across threads: independent matrices of a batch, rows of a softmax.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace xgrad
{
// Threads xgrad uses for independent work (default 1). The BLAS itself always runs single-threaded.
void set_num_threads(int n);
int num_threads();

namespace kernels
{
// Waking a thread costs microseconds: below this many multiply-adds a product or an attention stays on the
// calling thread.
constexpr std::uint64_t min_parallel_multiply_adds = 1 << 21;

// Calls body(i) for i in [0, count), split into contiguous chunks across num_threads() threads.
void parallel_for(std::size_t count, const std::function<void(std::size_t)>& body);

// Calls body(r) for each of `rows` rows of `row_length` elements: on the calling thread when there are
// fewer than 2^16 elements in all (waking the pool would cost more than the work), else by parallel_for.
void for_rows(std::size_t rows, std::size_t row_length, const std::function<void(std::size_t)>& body);

// For per-block partial sums over rows (a bias's or a norm weight's gradient): how many blocks of whole
// rows `rows` rows of `row_length` elements split into. It depends on the sizes alone, not on the
// thread count, so partial sums reduced in block order give the same bits on any number of threads.
std::size_t row_block_count(std::size_t rows, std::size_t row_length);

// Calls body(block, begin, end) for each of `blocks` contiguous blocks of [0, rows), across threads.
void for_row_blocks(std::size_t rows, std::size_t blocks,
                    const std::function<void(std::size_t, std::size_t, std::size_t)>& body);

// One partial sum of n entries per block of rows, each written by one thread only, then added into a
// total in block order.
template <class T>
class block_sums
{
public:
    block_sums(std::size_t blocks, std::size_t n) : n_(n), partial_(blocks * n, T(0)) {}
    T* of(std::size_t block) { return partial_.data() + block * n_; }
    // out_j += the partial sums' j-th entries, block after block.
    void add_to(T* out) const
    {
        for (std::size_t k = 0; k < partial_.size(); ++k)
        {
            out[k % n_] += partial_[k];
        }
    }

private:
    std::size_t n_;
    std::vector<T> partial_;
};
}  // namespace kernels
}  // namespace xgrad
