// Batched matrix product on top of one BLAS GEMM per matrix pair. Transposes are GEMM flags, never
// copies, and two common layouts fold a whole batch into a single large GEMM:
//   X (B,T,d) @ W (d,e)        -> one (B*T, d) x (d, e) product;
//   sum_b X_b^T G_b  (dW)      -> one (d, B*T) x (B*T, e) product.
#include "autodiff/instantiate.hpp"
#include "kernels/gemm.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"

namespace xgrad
{
namespace kernels
{
namespace
{
shape_t batch_of(const shape_t& s)
{
    return shape_t(s.begin(), s.end() - 2);
}

// Offset, in whole matrices, of batch entry `flat` of `batch` inside an operand whose own batch shape
// broadcasts to it (strides from broadcast_strides).
std::size_t matrix_offset(std::size_t flat, const shape_t& batch, const std::vector<std::size_t>& strides)
{
    std::size_t offset = 0;
    for (std::size_t ax = batch.size(); ax-- > 0;)
    {
        offset += (flat % batch[ax]) * strides[ax];
        flat /= batch[ax];
    }
    return offset;
}
// Waking a thread costs microseconds: below this many multiply-adds a product stays on one thread.
constexpr std::uint64_t parallel_threshold = 1 << 21;

// Splits [0, extent) into one contiguous block per thread (a single block with one thread or little
// work), keeping block edges on multiples of 16 so that every GEMM call gets well-shaped panels.
void parallel_blocks(std::size_t extent, std::uint64_t work,
                     const std::function<void(std::size_t, std::size_t)>& block)
{
    const std::size_t threads = work < parallel_threshold
                                    ? 1
                                    : std::min<std::size_t>(num_threads(), std::max<std::size_t>(1, extent / 64));
    if (threads <= 1)
    {
        block(0, extent);
        return;
    }
    parallel_for(threads, [&](std::size_t t) {
        const std::size_t begin = extent * t / threads / 16 * 16;
        const std::size_t end = t + 1 == threads ? extent : extent * (t + 1) / threads / 16 * 16;
        if (end > begin)
        {
            block(begin, end);
        }
    });
}
}  // namespace

std::uint64_t matmul_multiply_adds(const shape_t& batch, std::size_t m, std::size_t n, std::size_t k)
{
    return static_cast<std::uint64_t>(element_count(batch)) * m * n * k;
}

template <class T>
void matmul_into(const array<T>& a, bool ta, const array<T>& b, bool tb, array<T>& c)
{
    const shape_t sa = to_shape(a.shape()), sb = to_shape(b.shape()), sc = to_shape(c.shape());
    const shape_t batch_a = batch_of(sa), batch_b = batch_of(sb), batch_c = batch_of(sc);
    const shape_t batch = broadcast_shapes("matmul", broadcast_shapes("matmul", batch_a, batch_b), batch_c);
    const std::size_t a_rows = sa[sa.size() - 2], a_cols = sa.back();
    const std::size_t b_rows = sb[sb.size() - 2], b_cols = sb.back();
    const std::size_t m = ta ? a_cols : a_rows, k = ta ? a_rows : a_cols, n = tb ? b_rows : b_cols;
    const std::size_t count = element_count(batch);
    const bool summed = element_count(batch_c) < count;  // C's batch is broadcast: accumulate into it
    if (c.size() == 0)
    {
        return;
    }
    if (k == 0 || summed || count == 0)
    {
        std::fill(c.begin(), c.end(), T(0));
        if (k == 0 || count == 0)
        {
            return;
        }
    }
    const bool full_a = batch_a == batch, full_b = batch_b == batch;
    const std::uint64_t work = matmul_multiply_adds(batch, m, n, k);
    if (!summed && !ta && element_count(batch_b) == 1 && full_a)
    {
        // one (count*m, k) x (k, n) product, its rows split across threads
        parallel_blocks(count * m, work, [&](std::size_t r0, std::size_t r1) {
            gemm(false, tb, r1 - r0, n, k, a.data() + r0 * a_cols, a_cols, b.data(), b_cols, T(0), c.data() + r0 * n,
                 n);
        });
        return;
    }
    if (element_count(batch_c) == 1 && ta && !tb && full_a && full_b)
    {
        // one (m, count*k) x (count*k, n) product, its columns split across threads
        parallel_blocks(n, work, [&](std::size_t c0, std::size_t c1) {
            gemm(true, false, m, c1 - c0, count * k, a.data(), a_cols, b.data() + c0, b_cols, T(0), c.data() + c0, n);
        });
        return;
    }
    const std::size_t rank = batch.size();
    const auto stride_a = broadcast_strides(batch_a, rank), stride_b = broadcast_strides(batch_b, rank),
               stride_c = broadcast_strides(batch_c, rank);
    auto one_product = [&](std::size_t i) {
        const T* pa = a.data() + matrix_offset(i, batch, stride_a) * a_rows * a_cols;
        const T* pb = b.data() + matrix_offset(i, batch, stride_b) * b_rows * b_cols;
        T* pc = c.data() + matrix_offset(i, batch, stride_c) * m * n;
        gemm(ta, tb, m, n, k, pa, a_cols, pb, b_cols, summed ? T(1) : T(0), pc, n);
    };
    if (summed || work < parallel_threshold)
    {
        for (std::size_t i = 0; i < count; ++i)
        {
            one_product(i);  // serial when several products land in the same C, or when there is little work
        }
    }
    else
    {
        parallel_for(count, one_product);
    }
}
template void matmul_into(const array<float>&, bool, const array<float>&, bool, array<float>&);
template void matmul_into(const array<double>&, bool, const array<double>&, bool, array<double>&);
}  // namespace kernels
}  // namespace xgrad
