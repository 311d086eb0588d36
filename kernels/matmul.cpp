// Batched matrix product on top of one BLAS GEMM per matrix pair. Transposes are GEMM flags, never
// copies, and two common layouts fold a whole batch into a single large GEMM:
//   X (B,T,d) @ W (d,e)        -> one (B*T, d) x (d, e) product;
//   sum_b X_b^T G_b  (dW)      -> one (d, B*T) x (B*T, e) product.
#include "autodiff/instantiate.hpp"
#include "kernels/gemm.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"
#include "kernels/precision.hpp"
#include "kernels/bf16.hpp"

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

// The threads parallel_blocks splits `extent` over: at least 32 rows or columns of C each (a small
// model's d = 64 splits in two).
std::size_t block_threads(std::size_t extent, std::uint64_t work)
{
    return work < min_parallel_multiply_adds ? 1
                                     : std::min<std::size_t>(num_threads(), std::max<std::size_t>(1, extent / 32));
}

// Splits [0, extent) into one contiguous block per thread (a single block with one thread or little
// work), keeping block edges on multiples of 16 so that every GEMM call gets well-shaped panels.
void parallel_blocks(std::size_t extent, std::uint64_t work,
                     const std::function<void(std::size_t, std::size_t)>& block)
{
    const std::size_t threads = block_threads(extent, work);
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
// One GEMM call of a batched product, operands and result given as element offsets into A, B and C.
struct gemm_call
{
    bool ta, tb;
    std::size_t m, n, k;
    std::size_t a, lda, b, ldb;
    bool accumulate;
    std::size_t c, ldc;

    std::uint64_t work() const { return static_cast<std::uint64_t>(m) * n * k; }
};

// The shape of a product, as matmul_into splits it into GEMM calls.
struct product_plan
{
    shape_t batch;
    std::size_t a_rows, a_cols, b_rows, b_cols, m, n, k, count;
    bool summed;  // C's batch is broadcast: products accumulate into it
    bool rows_folded, columns_folded;  // one (count*m, k) x (k, n) or one (m, count*k) x (count*k, n) GEMM
    std::vector<std::size_t> stride_a, stride_b, stride_c;

    product_plan(const shape_t& sa, bool ta, const shape_t& sb, bool tb, const shape_t& sc)
    {
        const shape_t batch_a = batch_of(sa), batch_b = batch_of(sb), batch_c = batch_of(sc);
        batch = broadcast_shapes("matmul", broadcast_shapes("matmul", batch_a, batch_b), batch_c);
        a_rows = sa[sa.size() - 2];
        a_cols = sa.back();
        b_rows = sb[sb.size() - 2];
        b_cols = sb.back();
        m = ta ? a_cols : a_rows;
        k = ta ? a_rows : a_cols;
        n = tb ? b_rows : b_cols;
        count = element_count(batch);
        summed = element_count(batch_c) < count;
        const bool full_a = batch_a == batch, full_b = batch_b == batch;
        rows_folded = !summed && !ta && element_count(batch_b) == 1 && full_a;
        columns_folded = !rows_folded && element_count(batch_c) == 1 && ta && !tb && full_a && full_b;
        const std::size_t rank = batch.size();
        stride_a = broadcast_strides(batch_a, rank);
        stride_b = broadcast_strides(batch_b, rank);
        stride_c = broadcast_strides(batch_c, rank);
    }

    std::uint64_t work() const { return matmul_multiply_adds(batch, m, n, k); }

    // A folded weight gradient (m, count*k) x (count*k, n) splits across threads along the side of C
    // with room for more blocks: a projection onto a narrow output (n < 64) still splits, by rows.
    bool columns_split_by_rows() const { return block_threads(m, work()) > block_threads(n, work()); }

    // The multiply-adds of one GEMM call (about: a folded product's blocks end on multiples of 16 rows).
    std::uint64_t call_work() const
    {
        if (rows_folded)
        {
            return work() / block_threads(count * m, work());
        }
        if (columns_folded)
        {
            return work() / std::max(block_threads(m, work()), block_threads(n, work()));
        }
        return std::uint64_t(m) * n * k;
    }
};

// Runs the product through `run(gemm_call)`, split into calls as the file's header says. C is already
// the right size and non-empty.
template <class T, class Run>
void run_product(const product_plan& q, bool ta, bool tb, array<T>& c, Run&& run)
{
    if (q.k == 0 || q.summed || q.count == 0)
    {
        std::fill(c.begin(), c.end(), T(0));
        if (q.k == 0 || q.count == 0)
        {
            return;
        }
    }
    const std::uint64_t work = q.work();
    if (q.rows_folded)
    {
        // one (count*m, k) x (k, n) product, its rows split across threads
        parallel_blocks(q.count * q.m, work, [&](std::size_t r0, std::size_t r1) {
            run(gemm_call{false, tb, r1 - r0, q.n, q.k, r0 * q.a_cols, q.a_cols, 0, q.b_cols, false, r0 * q.n, q.n});
        });
        return;
    }
    if (q.columns_folded)
    {
        // one (m, count*k) x (count*k, n) product, its rows (A's columns) or its columns split across threads
        const bool by_rows = q.columns_split_by_rows();
        parallel_blocks(by_rows ? q.m : q.n, work, [&](std::size_t b0, std::size_t b1) {
            const std::size_t rows = by_rows ? b1 - b0 : q.m, cols = by_rows ? q.n : b1 - b0;
            const std::size_t a = by_rows ? b0 : 0, b = by_rows ? 0 : b0, c = by_rows ? b0 * q.n : b0;
            run(gemm_call{true, false, rows, cols, q.count * q.k, a, q.a_cols, b, q.b_cols, false, c, q.n});
        });
        return;
    }
    auto one_product = [&](std::size_t i) {
        run(gemm_call{ta, tb, q.m, q.n, q.k, matrix_offset(i, q.batch, q.stride_a) * q.a_rows * q.a_cols, q.a_cols,
                      matrix_offset(i, q.batch, q.stride_b) * q.b_rows * q.b_cols, q.b_cols, q.summed,
                      matrix_offset(i, q.batch, q.stride_c) * q.m * q.n, q.n});
    };
    if (q.summed || work < min_parallel_multiply_adds)
    {
        for (std::size_t i = 0; i < q.count; ++i)
        {
            one_product(i);  // serial when several products land in the same C, or when there is little work
        }
    }
    else
    {
        parallel_for(q.count, one_product);
    }
}
}  // namespace

std::uint64_t matmul_multiply_adds(const shape_t& batch, std::size_t m, std::size_t n, std::size_t k)
{
    return static_cast<std::uint64_t>(element_count(batch)) * m * n * k;
}

template <class T>
void matmul_into(const array<T>& a, bool ta, const array<T>& b, bool tb, array<T>& c)
{
    if (c.size() == 0)
    {
        return;
    }
    const product_plan q(to_shape(a.shape()), ta, to_shape(b.shape()), tb, to_shape(c.shape()));
    run_product(q, ta, tb, c, [&](const gemm_call& g) {
        gemm(g.ta, g.tb, g.m, g.n, g.k, a.data() + g.a, g.lda, b.data() + g.b, g.ldb, g.accumulate ? T(1) : T(0),
             c.data() + g.c, g.ldc);
    });
}
template void matmul_into(const array<float>&, bool, const array<float>&, bool, array<float>&);
template void matmul_into(const array<double>&, bool, const array<double>&, bool, array<double>&);

namespace bf16
{
bool matmul_takes_rounded(const array<float>& a, bool ta, const array<float>& b, bool tb)
{
    if (current_matmul_precision() != matmul_precision::bf16 || a.size() == 0 || b.size() == 0)
    {
        return false;
    }
    const shape_t sa = to_shape(a.shape()), sb = to_shape(b.shape());
    shape_t sc = broadcast_shapes("matmul", batch_of(sa), batch_of(sb));
    sc.push_back(ta ? sa.back() : sa[sa.size() - 2]);
    sc.push_back(tb ? sb[sb.size() - 2] : sb.back());
    return product_plan(sa, ta, sb, tb, sc).call_work() >= library_work;
}

void matmul_into(const array<float>& a, const bf16_copy& a16, bool ta, const array<float>& b, const bf16_copy& b16,
                 bool tb, array<float>& c)
{
    if (c.size() == 0)
    {
        return;
    }
    const product_plan q(to_shape(a.shape()), ta, to_shape(b.shape()), tb, to_shape(c.shape()));
    run_product(q, ta, tb, c, [&](const gemm_call& g) {
        const float beta = g.accumulate ? 1.0f : 0.0f;
        if (g.work() >= library_work)
        {
            gemm(g.ta, g.tb, g.m, g.n, g.k, a16.data() + g.a, g.lda, b16.data() + g.b, g.ldb, beta, c.data() + g.c,
                 g.ldc);
        }
        else
        {
            kernels::gemm(g.ta, g.tb, g.m, g.n, g.k, a.data() + g.a, g.lda, b.data() + g.b, g.ldb, beta,
                          c.data() + g.c, g.ldc);  // the door rounds a small call's operands itself
        }
    });
}
}  // namespace bf16
}  // namespace kernels
}  // namespace xgrad
