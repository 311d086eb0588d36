// Work split across threads: independent matrices of a batch, rows of a softmax.
#pragma once

#include <cstddef>
#include <functional>

namespace xgrad
{
// Threads xgrad uses for independent work (default 1). The BLAS itself always runs single-threaded.
void set_num_threads(int n);
int num_threads();

namespace kernels
{
// Calls body(i) for i in [0, count), split into contiguous chunks across num_threads() threads.
void parallel_for(std::size_t count, const std::function<void(std::size_t)>& body);

// Calls body(r) for each of `rows` rows of `row_length` elements: on the calling thread when there are
// fewer than 2^16 elements in all (waking the pool would cost more than the work), else by parallel_for.
void for_rows(std::size_t rows, std::size_t row_length, const std::function<void(std::size_t)>& body);
}  // namespace kernels
}  // namespace xgrad
