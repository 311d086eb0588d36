// Rounding to bfloat16 and the product on rounded operands (kernels/bf16.hpp).
#include "kernels/bf16.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/gemm_backends.hpp"
#include "kernels/parallel.hpp"

namespace xgrad::kernels::bf16
{
namespace
{
// x rounded to the nearest bfloat16, ties to even: add 0x7fff plus the lowest kept bit, keep the upper
// half. A NaN keeps its sign and upper payload with the quiet bit set (the addition could carry it into
// an infinity).
std::uint16_t round_one(float x)
{
    std::uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
    {
        return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
    }
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<std::uint16_t>(bits >> 16);
}

// Every lane. The zero-masking forms of the intrinsics below avoid GCC 12's false "may be used
// uninitialized" on the unmasked ones.
constexpr __mmask16 all = 0xffff;

// round_one on 16 lanes: the same integer rule, NaN lanes blended in.
__attribute__((target("avx512f,avx512bw"))) inline __m512i round_lanes(__m512i bits)
{
    const __m512i upper = _mm512_maskz_srli_epi32(all, bits, 16);
    const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(upper, _mm512_set1_epi32(1)));
    const __m512i rounded = _mm512_maskz_srli_epi32(all, _mm512_add_epi32(bits, bias), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(rounded, nan, upper, _mm512_set1_epi32(0x40));
}

// round_lanes over x, stored as bfloat16 bits (the 32-bit lanes narrowed) or as float32 values.
template <class U>
__attribute__((target("avx512f,avx512bw"))) void round_avx512(const float* x, std::size_t n, U* out)
{
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16)
    {
        const __m512i result = round_lanes(_mm512_loadu_si512(x + i));
        if constexpr (sizeof(U) == 2)
        {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_maskz_cvtepi32_epi16(all, result));
        }
        else
        {
            _mm512_storeu_si512(out + i, _mm512_maskz_slli_epi32(all, result, 16));
        }
    }
    for (; i < n; ++i)
    {
        if constexpr (sizeof(U) == 2)
        {
            out[i] = round_one(x[i]);
        }
        else
        {
            out[i] = widen(round_one(x[i]));
        }
    }
}

bool has_avx512bw()
{
    static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    return has;
}

#if XGRAD_HAVE_ONEDNN
int checked(std::size_t n)
{
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    {
        throw std::invalid_argument("gemm: size " + std::to_string(n) + " exceeds the largest int");
    }
    return static_cast<int>(n);
}
#endif

// The rounding of x[0, n) into out, on the calling thread.
template <class U>
void round_serially(const float* x, std::size_t n, U* out)
{
    if (has_avx512bw())
    {
        return round_avx512(x, n, out);
    }
    for (std::size_t i = 0; i < n; ++i)
    {
        if constexpr (sizeof(U) == 2)
        {
            out[i] = round_one(x[i]);
        }
        else
        {
            out[i] = widen(round_one(x[i]));
        }
    }
}

// The same in chunks across xgrad's threads, from 2^18 values (~30 us of rounding; below that, waking
// the pool costs as much as it saves). Each value is rounded alone, so the result does not depend on the
// thread count.
template <class U>
void round_in_chunks(const float* x, std::size_t n, U* out)
{
    constexpr std::size_t chunk = std::size_t(1) << 15;
    if (n < 8 * chunk || num_threads() == 1)
    {
        return round_serially(x, n, out);
    }
    for_rows((n + chunk - 1) / chunk, chunk, [&](std::size_t c) {
        const std::size_t begin = c * chunk;
        round_serially(x + begin, std::min(chunk, n - begin), out + begin);
    });
}
}  // namespace

void round_to_bf16(const float* x, std::size_t n, std::uint16_t* out)
{
    round_in_chunks(x, n, out);
}

void round_to_bf16_values(const float* x, std::size_t n, float* out)
{
    round_in_chunks(x, n, out);
}

float widen(std::uint16_t bits)
{
    const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
    float x;
    std::memcpy(&x, &wide, sizeof x);
    return x;
}

bf16_copy rounded_copy(const array<float>& x)
{
    bf16_copy out(x.size());
    round_to_bf16(x.data(), x.size(), out.data());
    return out;
}

void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const std::uint16_t* a, std::size_t lda,
          const std::uint16_t* b, std::size_t ldb, float beta, float* c, std::size_t ldc)
{
    if (m == 0 || n == 0 || k == 0)
    {
        throw std::invalid_argument("gemm: bf16 operands need every side at least 1, got " + std::to_string(m) +
                                    " x " + std::to_string(n) + " x " + std::to_string(k));
    }
#if XGRAD_HAVE_ONEDNN
    const backends::product p{ta, tb, checked(m), checked(n), checked(k), checked(lda), checked(ldb), checked(ldc)};
    backends::onednn_bf16_rounded(p, a, b, beta, c);
#else
    (void)ta, (void)tb, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    throw std::logic_error("gemm: bf16 operands need oneDNN, which this build lacks (a bf16 precision scope "
                           "runs float32 there, so nothing should reach this)");
#endif
}
}  // namespace xgrad::kernels::bf16
