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
}  // namespace kernels
}  // namespace xgrad
