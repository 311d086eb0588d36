// oneDNN's matmul primitive as a GEMM backend, in two precisions:
//   onednn_matmul  float32 operands and result (oneDNN's brgemm kernels for the CPU's vector ISA)
//   onednn_bf16    operands rounded to bfloat16 (round to nearest even) into per-thread buffers, float32
//                  result; oneDNN runs AMX tiles or AVX512_BF16 dot products, whichever the CPU has
//   round_operands_to_bf16  the same rounding, kept in float32 buffers, for small products that the door
//                  then sends to its float32 backend (a product of two bfloat16 numbers is exact in
//                  float32, so the result is the same bf16-operand, float32-accumulated product)
// A primitive is made for one shape (sizes, transposes, leading dimensions, beta), so each thread keeps
// the ones it made. Transposes are strides of the memory descriptors, beta = 1 a sum post-op. Like
// dnnl_sgemm (kernels/gemm_onednn.cpp), every primitive is made and run with one OpenMP thread: the call
// stays on the calling thread.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/gemm_backends.hpp"

namespace xgrad::kernels::backends
{
namespace
{
using dt = dnnl::memory::data_type;

// The calling thread's OpenMP thread count is 1 while it lives.
class one_openmp_thread
{
public:
    one_openmp_thread() : threads_(omp_get_max_threads())
    {
        if (threads_ != 1)
        {
            omp_set_num_threads(1);
        }
    }
    ~one_openmp_thread()
    {
        if (threads_ != 1)
        {
            omp_set_num_threads(threads_);
        }
    }
    one_openmp_thread(const one_openmp_thread&) = delete;
    one_openmp_thread& operator=(const one_openmp_thread&) = delete;

private:
    int threads_;
};

const dnnl::engine& cpu_engine()
{
    static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

// Row-major op(X) of rows x cols, stored transposed or not with leading dimension ld, as strides.
dnnl::memory::desc operand(dt type, int rows, int cols, bool transposed, int ld)
{
    const dnnl::memory::dims strides = transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
    return dnnl::memory::desc({rows, cols}, type, strides);
}

using shape_key = std::tuple<bool, bool, bool, int, int, int, int, int, int, bool>;

// The primitive for this product, made on first use by this thread.
const dnnl::matmul& primitive_for(const product& p, dt type, int lda, int ldb, float beta)
{
    constexpr std::size_t most_shapes = 512;  // a bound for callers that try endless shapes
    thread_local std::map<shape_key, dnnl::matmul> made;
    const shape_key key{type == dt::bf16, p.ta, p.tb, p.m, p.n, p.k, lda, ldb, p.ldc, beta != 0.0f};
    auto found = made.find(key);
    if (found != made.end())
    {
        return found->second;
    }
    if (made.size() >= most_shapes)
    {
        made.clear();
    }
    dnnl::primitive_attr attr;
    if (beta != 0.0f)
    {
        dnnl::post_ops sum;
        sum.append_sum(1.0f);  // C = op(A) op(B) + C
        attr.set_post_ops(sum);
    }
    const dnnl::memory::desc a = operand(type, p.m, p.k, p.ta, lda), b = operand(type, p.k, p.n, p.tb, ldb),
                             c = operand(dt::f32, p.m, p.n, false, p.ldc);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
    return made.emplace(key, dnnl::matmul(pd)).first->second;
}

void execute(const dnnl::matmul& matmul, const product& p, dt type, int lda, int ldb, const void* a, const void* b,
             float* c)
{
    thread_local dnnl::stream stream(cpu_engine());
    const dnnl::engine& engine = cpu_engine();
    dnnl::memory am(operand(type, p.m, p.k, p.ta, lda), engine, const_cast<void*>(a));
    dnnl::memory bm(operand(type, p.k, p.n, p.tb, ldb), engine, const_cast<void*>(b));
    dnnl::memory cm(operand(dt::f32, p.m, p.n, false, p.ldc), engine, c);
    matmul.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
}

// n floats rounded to bfloat16: as their bits, or as bfloat16 values held as float32.
void round_block(const float* x, std::size_t n, std::uint16_t* out) { bf16::round_to_bf16(x, n, out); }
void round_block(const float* x, std::size_t n, float* out) { bf16::round_to_bf16_values(x, n, out); }

// The rows x cols block at `x` (leading dimension ld) rounded to bfloat16 in `out`, packed (ld = cols).
template <class Out>
void round_rows(const float* x, int rows, int cols, int ld, std::vector<Out>& out)
{
    const auto width = static_cast<std::size_t>(cols);
    out.resize(static_cast<std::size_t>(rows) * width);
    if (ld == cols)
    {
        return round_block(x, out.size(), out.data());
    }
    for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r)
    {
        round_block(x + r * static_cast<std::size_t>(ld), width, out.data() + r * width);
    }
}

// Stored blocks: op(A) is m x k, so A is k x m when transposed; likewise B.
struct stored
{
    int a_rows, a_cols, b_rows, b_cols;
    explicit stored(const product& p)
        : a_rows(p.ta ? p.k : p.m), a_cols(p.ta ? p.m : p.k), b_rows(p.tb ? p.n : p.k), b_cols(p.tb ? p.k : p.n)
    {
    }
};

// oneDNN's errors as the library's: naming gemm, the precision and the shape.
[[noreturn]] void fail(const product& p, const char* precision, const dnnl::error& e)
{
    throw std::runtime_error(std::string("gemm: oneDNN's ") + precision + " matmul failed on a " + std::to_string(p.m) +
                             " x " + std::to_string(p.n) + " x " + std::to_string(p.k) + " product: " + e.what());
}
}  // namespace

void onednn_matmul(const product& p, const float* a, const float* b, float beta, float* c)
{
    const one_openmp_thread one;
    try
    {
        const dnnl::matmul& matmul = primitive_for(p, dt::f32, p.lda, p.ldb, beta);
        execute(matmul, p, dt::f32, p.lda, p.ldb, a, b, c);
    }
    catch (const dnnl::error& e)
    {
        fail(p, "float32", e);
    }
}

void onednn_bf16(const product& p, const float* a, const float* b, float beta, float* c)
{
    thread_local std::vector<std::uint16_t> a16, b16;
    const stored s(p);
    round_rows(a, s.a_rows, s.a_cols, p.lda, a16);
    round_rows(b, s.b_rows, s.b_cols, p.ldb, b16);
    product packed = p;
    packed.lda = s.a_cols;
    packed.ldb = s.b_cols;
    onednn_bf16_rounded(packed, a16.data(), b16.data(), beta, c);
}

void onednn_bf16_rounded(const product& p, const std::uint16_t* a, const std::uint16_t* b, float beta, float* c)
{
    const one_openmp_thread one;
    try
    {
        const dnnl::matmul& matmul = primitive_for(p, dt::bf16, p.lda, p.ldb, beta);
        execute(matmul, p, dt::bf16, p.lda, p.ldb, a, b, c);
    }
    catch (const dnnl::error& e)
    {
        fail(p, "bf16", e);
    }
}

rounded_operands round_operands_to_bf16(const product& p, const float* a, const float* b)
{
    thread_local std::vector<float> a_rounded, b_rounded;
    const stored s(p);
    round_rows(a, s.a_rows, s.a_cols, p.lda, a_rounded);
    round_rows(b, s.b_rows, s.b_cols, p.ldb, b_rounded);
    product packed = p;
    packed.lda = s.a_cols;
    packed.ldb = s.b_cols;
    return {packed, a_rounded.data(), b_rounded.data()};
}
}  // namespace xgrad::kernels::backends
