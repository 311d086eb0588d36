// Fused attention, tile by tile (see kernels/attention.hpp). For one query tile Q_t and a panel of the
// key/value tiles K_u, V_u it may see (up to panel_keys keys; a sliding window's band is one panel):
//
//   forward   S = Q_t K_u^T                    (GEMM, every tile u of the panel first)
//             m' = max(m, scale max_j S_ij)     over the row's visible keys in the panel, in one pass
//             P = exp(scale S - m')             masked entries are -inf before the exp, so exactly 0;
//                                               past the causal limit P = 0 (the exp taken on whole
//                                               vector batches around the visible keys only)
//             l = l exp(m - m') + sum_j P_ij,   O = O exp(m - m') + P V_u   (GEMM, every u of the panel)
//   at the end O /= l and lse = m + log l: softmax(scale S) V without ever holding a whole row of S.
//
//   backward  D_i = sum_c dO_ic O_ic            (the softmax backward's row sum, from O instead of P)
//             P = exp(scale S - lse)            recomputed, exactly the forward's probabilities
//             dV_u += P^T dO_t,  dP = dO_t V_u^T,  dS = scale P (dP - D)
//             dQ_t += dS K_u,    dK_u += dS^T Q_t
//
// Only the keys between a query tile's first row's first visible key and its last row's last one are
// touched, forward or backward, and the band's edges (the triangles on the causal diagonal, and on the
// window's far side) in row strips with their own key ranges (visibility::for_each_block): with a causal
// mask about half the work when Tq = Tk; with a sliding window w, about Tq (w + strip_rows) key visits
// instead of Tq Tk / 2. A row with no visible key never enters the sums: output 0, lse -inf, and no
// gradient. The forward splits (batch, head) across threads; the backward splits (batch, key/value
// head), so each thread owns the dK and dV it accumulates into. Each work item transposes its key/value
// head once (K^T for S = Q K^T, V^T for dP = dO V^T), so that every product reads plain operands.
//
// At bf16 matmul precision (kernels/precision.hpp) every tile product takes bfloat16 operands: Q, K, V
// and dO are rounded once per call, each P and dS tile once where it is made, and the tile products then
// run in float32 on the rounded values (exact products, float32 sums: what the GEMM door's own rounding
// computes, without rounding each key/value tile again for every query tile).
#include "kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/quiet_intrinsics.hpp"
#if defined(__AVX512F__)
XGRAD_INTRINSIC_HEADERS_BEGIN
#include <immintrin.h>
XGRAD_INTRINSIC_HEADERS_END
#endif

#include "autodiff/instantiate.hpp"
#include "kernels/bf16.hpp"
#include "kernels/gemm.hpp"
#include "kernels/parallel.hpp"
#include "kernels/precision.hpp"
#include "kernels/simd.hpp"

namespace xgrad::kernels
{
namespace
{
constexpr std::size_t tile_q = 64, tile_k = 64;
// The rows of the strips that cover a causal band's edges, and the narrowest chunk of keys worth a product
// of a whole tile's rows (for_each_block). Strips of 8 rows visit fewer keys but ran slower (w = 128).
constexpr std::size_t strip_rows = 16, min_chunk = 16;
// The keys of a core's chunks that share one buffer of scores (for_each_panel).
constexpr std::size_t panel_keys = 512;

// Which keys each query may see (the causal band of visible_keys() and the (broadcast) mask), and where
// the rows of q, k, v and the output live: heads-major (B, H, T, dh), row stride dh, or token-major
// (B, T, H dh), the projections' own layout, row stride H dh (G dh for k and v).
struct visibility
{
    std::size_t B, H, G, Tq, Tk, dh;
    bool causal;
    std::size_t window;
    bool token_major = false;
    const bool* mask = nullptr;
    std::size_t stride_b = 0, stride_h = 0, stride_i = 0, stride_j = 0;  // 0 where the mask broadcasts

    visibility(const shape_t& qs, const shape_t& ks, const mask_t* m, bool c, std::size_t w)
        : visibility(qs[0], qs[1], ks[1], qs[2], ks[2], qs[3], m, c, w)
    {
    }

    visibility(std::size_t b, std::size_t h, std::size_t g, std::size_t tq, std::size_t tk, std::size_t width,
               const mask_t* m, bool c, std::size_t w)
        : B(b), H(h), G(g), Tq(tq), Tk(tk), dh(width), causal(c), window(w)
    {
        check_window("kernels::attention", causal, window);
        if (m)
        {
            const auto strides = broadcast_strides(to_shape(m->shape()), 4);
            mask = m->data();
            stride_b = strides[0];
            stride_h = strides[1];
            stride_i = strides[2];
            stride_j = strides[3];
        }
    }

    key_range keys(std::size_t i) const { return visible_keys(i, Tq, Tk, causal, window); }

    const bool* mask_row(std::size_t b, std::size_t h, std::size_t i) const
    {
        return mask ? mask + b * stride_b + h * stride_h + i * stride_i : nullptr;
    }

    // For the scores s[0, cols) of keys j0 .. j0 + cols of query i: the columns [begin, end) that the causal
    // band allows; the entries outside it are set to 0 (P = 0 there: the exp is never taken), the masked
    // ones inside it to -inf (exp -> 0). Returns those columns, or an empty range when none is visible.
    template <class T>
    key_range visible_columns(T* s, std::size_t cols, std::size_t j0, std::size_t i, const bool* row) const
    {
        const key_range band = keys(i);
        const std::size_t begin = std::clamp(band.begin, j0, j0 + cols) - j0;
        const std::size_t end = std::clamp(band.end, j0 + begin, j0 + cols) - j0;
        std::fill(s, s + begin, T(0));
        std::fill(s + end, s + cols, T(0));
        if (!row)
        {
            return {begin, end};
        }
        bool any = false;
        for (std::size_t c = begin; c < end; ++c)
        {
            const bool keep = row[(j0 + c) * stride_j];
            s[c] = keep ? s[c] : -std::numeric_limits<T>::infinity();
            any = any || keep;
        }
        return {begin, any ? end : begin};
    }

    // Offset of query row i of head h (the output's rows alike), and of key/value row j of head g.
    std::size_t q_offset(std::size_t b, std::size_t h, std::size_t i) const
    {
        return (token_major ? (b * Tq + i) * H + h : (b * H + h) * Tq + i) * dh;
    }
    std::size_t kv_offset(std::size_t b, std::size_t g, std::size_t j) const
    {
        return (token_major ? (b * Tk + j) * G + g : (b * G + g) * Tk + j) * dh;
    }
    std::size_t q_stride() const { return token_major ? H * dh : dh; }
    std::size_t kv_stride() const { return token_major ? G * dh : dh; }

    // The keys any query of a head may see: from the first query's first to the last one's last.
    key_range head_keys() const
    {
        return Tq == 0 ? key_range{0, 0} : key_range{keys(0).begin, keys(Tq - 1).end};
    }

    // The blocks of one query tile (`rows` rows from i0): each a product of some of its rows against a
    // range of at most tile_k keys, passed to visit(first row, rows, keys); together they hold every
    // visible (row, key) pair once. The keys that every row of the tile sees (the core; all of them
    // without a causal band) go in products of all its rows. The edges on either side, the band's
    // triangles, go in strips of strip_rows rows, each with its own key range, from its first row's first
    // visible key or to its last row's last: a row visits about as many keys as it sees, not w + 63.
    // A core's last chunk narrower than min_chunk joins the right edge's strips. Only the blocks whose
    // keys lie in `panel` (one of for_each_panel's) are visited; a panel never cuts a block.
    template <class F>
    void for_each_block(std::size_t i0, std::size_t rows, key_range panel, F&& visit) const
    {
        const key_range core = tile_core(i0, rows);
        if (core.empty())  // no key seen by every row (a band narrower than the tile): strips only
        {
            for_each_strip(rows, [&](std::size_t r0, std::size_t n) {
                chunked(r0, n, within(panel, {keys(i0 + r0).begin, keys(i0 + r0 + n - 1).end}), visit);
            });
            return;
        }
        const std::size_t cut = core_cut(i0, rows);
        chunked(0, rows, within(panel, {core.begin, cut}), visit);
        for_each_strip(rows, [&](std::size_t r0, std::size_t n) {
            chunked(r0, n, within(panel, {keys(i0 + r0).begin, core.begin}), visit);
            chunked(r0, n, within(panel, {cut, keys(i0 + r0 + n - 1).end}), visit);
        });
    }

    // The key ranges (panels) that a query tile's blocks are grouped into, in order, passed to
    // visit(panel): the scores of a whole panel are made before its rows' softmax, and its rows' P before
    // any product with it. Panels split the core every panel_keys keys (a multiple of tile_k, so no block
    // is cut); the first holds the left edge, the last the right one. A band as narrow as a sliding
    // window's (core up to panel_keys keys) is one panel: each row's softmax in one pass over its keys.
    template <class F>
    void for_each_panel(std::size_t i0, std::size_t rows, F&& visit) const
    {
        const key_range span = tile_keys(i0, rows), core = tile_core(i0, rows);
        std::size_t first = span.begin;
        if (!core.empty())
        {
            for (std::size_t end = core.begin + panel_keys; end < core_cut(i0, rows); end += panel_keys)
            {
                visit(key_range{first, end});
                first = end;
            }
        }
        visit(key_range{first, std::max(first, span.end)});
    }

    // The keys of tile row r's blocks (those of its strip's rows, all of them from one key on), in `panel`.
    key_range row_blocks_keys(std::size_t i0, std::size_t rows, std::size_t r, key_range panel) const
    {
        const std::size_t r0 = r / strip_rows * strip_rows, last = std::min(rows, r0 + strip_rows) - 1;
        return within(panel, {keys(i0 + r0).begin, keys(i0 + last).end});
    }

    // The widest panel of any query tile: the row length of a buffer that holds a panel's scores.
    std::size_t widest_panel() const
    {
        std::size_t widest = 0;
        for (std::size_t i0 = 0; i0 < Tq; i0 += tile_q)
        {
            for_each_panel(i0, std::min(tile_q, Tq - i0),
                           [&](key_range panel) { widest = std::max(widest, panel.size()); });
        }
        return widest;
    }

    // From the first row's first visible key to the last row's last, and the keys every row sees.
    key_range tile_keys(std::size_t i0, std::size_t rows) const
    {
        return {keys(i0).begin, keys(i0 + rows - 1).end};
    }
    key_range tile_core(std::size_t i0, std::size_t rows) const
    {
        return {keys(i0 + rows - 1).begin, keys(i0).end};
    }

    // Where the core's products of all rows stop: its end, or before its last chunk if that is narrower
    // than min_chunk and the tile has a right edge for it to join.
    std::size_t core_cut(std::size_t i0, std::size_t rows) const
    {
        const key_range core = tile_core(i0, rows);
        const bool right_edge = keys(i0 + rows - 1).end > core.end;
        return right_edge && core.size() % tile_k < min_chunk ? core.begin + core.size() / tile_k * tile_k
                                                                : core.end;
    }

    static key_range within(key_range panel, key_range keys)
    {
        return {std::max(panel.begin, keys.begin), std::min(panel.end, keys.end)};
    }

    template <class F>
    static void for_each_strip(std::size_t rows, F&& strip)
    {
        for (std::size_t r0 = 0; r0 < rows; r0 += strip_rows)
        {
            strip(r0, std::min(strip_rows, rows - r0));
        }
    }

    // visit(r0, rows, chunk) for the chunks of at most tile_k keys that `keys` splits into.
    template <class F>
    static void chunked(std::size_t r0, std::size_t rows, key_range keys, F&& visit)
    {
        for (std::size_t j0 = keys.begin; j0 < keys.end; j0 += tile_k)
        {
            visit(r0, rows, key_range{j0, std::min(keys.end, j0 + tile_k)});
        }
    }
};

template <class T>
T* grown(std::vector<T>& buffer, std::size_t size)
{
    if (buffer.size() < size)
    {
        buffer.resize(size);
    }
    return buffer.data();
}

// What the tile products read: q, k, v and, in the backward, dO; at bf16 precision (float32 only) copies of
// them rounded to bfloat16 once, and then the rows of P and dS are rounded too (round_row).
template <class T>
struct product_operands
{
    const T *q, *k, *v, *grad_out;
    bool rounds_to_bf16 = false;
    array<T> copies[4];

    product_operands(const array<T>& q_, const array<T>& k_, const array<T>& v_, const array<T>* grad_out_)
        : q(q_.data()), k(k_.data()), v(v_.data()), grad_out(grad_out_ ? grad_out_->data() : nullptr)
    {
        if constexpr (std::is_same_v<T, float>)
        {
            rounds_to_bf16 = current_matmul_precision() == matmul_precision::bf16;
            if (rounds_to_bf16)
            {
                q = rounded(0, q_);
                k = rounded(1, k_);
                v = rounded(2, v_);
                grad_out = grad_out_ ? rounded(3, *grad_out_) : nullptr;
            }
        }
    }

    const T* rounded(std::size_t slot, const array<T>& x)
    {
        copies[slot] = array<T>::from_shape(to_shape(x.shape()));
        bf16::round_to_bf16_values(x.data(), x.size(), copies[slot].data());
        return copies[slot].data();
    }

    // Rounds n entries of a row of P or dS in place.
    void round_row(T* row, std::size_t n) const
    {
        if constexpr (std::is_same_v<T, float>)
        {
            if (rounds_to_bf16)
            {
                bf16::round_to_bf16_values(row, n, row);
            }
        }
    }
};

#if defined(__AVX512F__)
// out(c, j) = x(j, c) for a 16 x 16 block of floats: x's rows `stride` apart, out's rows `ld` apart. The
// classic in-register transpose: pairs of rows interleaved at 1, 2, 4 and then 8 floats apart.
inline void transpose_16x16(const float* x, std::size_t stride, float* out, std::size_t ld)
{
    __m512 r[16], t[16];
    for (std::size_t i = 0; i < 16; ++i)
    {
        r[i] = _mm512_loadu_ps(x + i * stride);
    }
    for (std::size_t i = 0; i < 16; i += 2)
    {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (std::size_t i = 0; i < 16; i += 4)
    {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (std::size_t i = 0; i < 16; i += 8)
    {
        for (std::size_t a = 0; a < 4; ++a)
        {
            t[i + a] = _mm512_shuffle_f32x4(r[i + a], r[i + a + 4], 0x88);
            t[i + a + 4] = _mm512_shuffle_f32x4(r[i + a], r[i + a + 4], 0xdd);
        }
    }
    for (std::size_t a = 0; a < 8; ++a)
    {
        _mm512_storeu_ps(out + a * ld, _mm512_shuffle_f32x4(t[a], t[a + 8], 0x88));
        _mm512_storeu_ps(out + (a + 8) * ld, _mm512_shuffle_f32x4(t[a], t[a + 8], 0xdd));
    }
}
#endif

// X^T of one key/value head (its keys or its values), made once per work item in the thread's buffer, so
// that S = Q K^T and dP = dO V^T read plain operands instead of the GEMM transposing each key tile again for
// every query tile that visits it. Only the keys the head's queries may see are transposed (a window's w
// when decoding over a long cache): X^T(c, j) at c ld + j - keys.begin; ld is padded off a multiple of
// 4 KiB, so that a product's dh rows do not all fall into the same cache sets. With AVX-512, float heads go
// in 16 x 16 blocks transposed in registers, the rest entry by entry.
template <class T>
struct transposed_head
{
    std::vector<T> buffer;
    std::size_t ld = 0;

    // x: the head's rows of dh entries, row stride `stride`; the rows `keys` are transposed.
    const T* of(const T* x, std::size_t stride, key_range keys, std::size_t dh)
    {
        ld = (keys.size() + 15) / 16 * 16 + 16;
        T* out = grown(buffer, dh * ld);
        std::size_t blocked_keys = 0, blocked_columns = 0;  // the leading keys and columns done in blocks
#if defined(__AVX512F__)
        if constexpr (std::is_same_v<T, float>)
        {
            blocked_keys = keys.size() / 16 * 16;
            blocked_columns = dh / 16 * 16;
            for (std::size_t j = 0; j < blocked_keys; j += 16)
            {
                for (std::size_t c = 0; c < blocked_columns; c += 16)
                {
                    transpose_16x16(x + (keys.begin + j) * stride + c, stride, out + c * ld + j, ld);
                }
            }
        }
#endif
        for (std::size_t c = 0; c < dh; ++c)
        {
            const std::size_t first = c < blocked_columns ? blocked_keys : 0;
            for (std::size_t j = keys.begin + first; j < keys.end; ++j)
            {
                out[c * ld + j - keys.begin] = x[j * stride + c];
            }
        }
        return out;
    }
};

// One query head's operands: its batch b and head h, its key/value head's rows of K and V, and K^T (and
// V^T, in the backward) from key t_first on, with their row length; and the row length of the buffers that
// hold a panel's scores (or P, dP, dS).
template <class T>
struct head_operands
{
    std::size_t b, h;
    const T *k, *v;
    const T *k_t = nullptr, *v_t = nullptr;
    std::size_t t_first = 0, t_ld = 0, s_ld = 0;

    const T* k_t_from(std::size_t j) const { return k_t + (j - t_first); }  // K^T's column of key j
    const T* v_t_from(std::size_t j) const { return v_t + (j - t_first); }
};

// The columns of a row of scores s (`cols` of them a product's) that whole vector batches cover around its
// visible ones: from the batch holding the first visible column to the end of the batch holding the last.
// Those outside `visible` are set to -inf, so that the exp (and the max) run on whole batches, with no
// tail, and give exactly 0 there. Columns from `cols` on are not the products': their -inf only pads the
// last batch (a buffer's rows have room for it: score_row_length).
template <class T>
key_range whole_batches(T* s, std::size_t cols, key_range visible)
{
    constexpr std::size_t width = simd::batch<T>::size;
    const std::size_t padded = (cols + width - 1) / width * width;
    const key_range lanes{visible.begin / width * width,
                          std::min(padded, (visible.end + width - 1) / width * width)};
    std::fill(s + lanes.begin, s + visible.begin, -std::numeric_limits<T>::infinity());
    std::fill(s + visible.end, s + lanes.end, -std::numeric_limits<T>::infinity());
    return lanes;
}

// One query row's online softmax over the scores s[0, cols) of keys j0 .. j0 + cols (see the top of the
// file): m and l are its running maximum (scaled) and sum, o its output row, accumulated unnormalised.
// Leaves P in s (0 outside the visible columns). Returns whether the row saw a visible key here.
template <class T>
bool online_softmax_row(const visibility& vis, T* s, std::size_t cols, std::size_t j0, std::size_t i,
                        const bool* mask_row, T scale, T& m, T& l, T* o)
{
    const key_range visible = vis.visible_columns(s, cols, j0, i, mask_row);
    if (visible.empty())
    {
        std::fill(s, s + cols, T(0));  // nothing visible here: P = 0, the row's state unchanged
        return false;
    }
    const key_range lanes = whole_batches<T>(s, cols, visible);
    const T new_max = std::max(m, scale * simd::max_of(s + lanes.begin, lanes.size()));
    const T shrink = std::exp(m - new_max);  // 0 on the row's first visible chunk
    const T sum = simd::exp_sum(s + lanes.begin, lanes.size(), scale, new_max);
    const bool o_so_far = l > T(0);  // O holds earlier panels' P V (else it is still 0)
    l = l * shrink + sum;
    m = new_max;
    if (o_so_far && shrink != T(1))
    {
        simd::scale_in_place(o, vis.dh, shrink);
    }
    return true;
}

// The row length of a buffer of a panel's scores: the widest panel, rounded up to whole vector batches,
// with room for a last batch that starts at a row's last key (whole_batches), padded off a multiple of
// 4 KiB like the transposes.
std::size_t score_row_length(const visibility& vis)
{
    return (vis.widest_panel() + 15) / 16 * 16 + 16;
}

// Sets `rows` rows of dh entries, `stride` apart, to 0.
template <class T>
void zero_rows(T* first, std::size_t rows, std::size_t stride, std::size_t dh)
{
    for (std::size_t r = 0; r < rows; ++r)
    {
        std::fill(first + r * stride, first + r * stride + dh, T(0));
    }
}

// The rows of query tile i0 panel by panel: S = Q K^T for the panel's blocks, then each row's online
// softmax over its keys in the panel (one pass), then O += P V for the blocks.
template <class T>
void forward_tile(const visibility& vis, const product_operands<T>& in, const head_operands<T>& x,
                  std::size_t i0, T* out, T* lse)
{
    const std::size_t dh = vis.dh, rows = std::min(tile_q, vis.Tq - i0);
    const std::size_t qs = vis.q_stride(), ks = vis.kv_stride(), ld = x.s_ld;
    const T scale = T(1) / std::sqrt(static_cast<T>(dh));
    const T* q_tile = in.q + vis.q_offset(x.b, x.h, i0);
    T* o_tile = out + vis.q_offset(x.b, x.h, i0);

    thread_local std::vector<T> s_buffer, stats;
    thread_local std::vector<char> seen_buffer;
    T* s = grown(s_buffer, tile_q * ld);
    T* m = grown(stats, 2 * tile_q);  // running maximum (scaled), then running sum
    T* l = m + tile_q;
    char* seen = grown(seen_buffer, tile_q);  // the row has had a visible key
    std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
    std::fill(l, l + rows, T(0));
    std::fill(seen, seen + rows, char(0));
    zero_rows(o_tile, rows, qs, dh);

    vis.for_each_panel(i0, rows, [&](key_range panel) {
        const auto at = [&](std::size_t r, std::size_t j) { return s + r * ld + (j - panel.begin); };
        vis.for_each_block(i0, rows, panel, [&](std::size_t r0, std::size_t n, key_range keys) {
            gemm(false, false, n, keys.size(), dh, q_tile + r0 * qs, qs, x.k_t_from(keys.begin), x.t_ld, T(0),
                 at(r0, keys.begin), ld);  // S = Q K^T
        });
        for (std::size_t r = 0; r < rows; ++r)
        {
            const std::size_t i = i0 + r;
            const key_range row_keys = vis.row_blocks_keys(i0, rows, r, panel);
            if (row_keys.empty())
            {
                continue;
            }
            T* row = at(r, row_keys.begin);
            if (online_softmax_row(vis, row, row_keys.size(), row_keys.begin, i, vis.mask_row(x.b, x.h, i),
                                   scale, m[r], l[r], o_tile + r * qs))
            {
                seen[r] = 1;
            }
            in.round_row(row, row_keys.size());
        }
        vis.for_each_block(i0, rows, panel, [&](std::size_t r0, std::size_t n, key_range keys) {
            gemm(false, false, n, dh, keys.size(), at(r0, keys.begin), ld, x.v + keys.begin * ks, ks, T(1),
                 o_tile + r0 * qs, qs);  // O += P V
        });
    });
    for (std::size_t r = 0; r < rows; ++r)
    {
        T& row_lse = lse[(x.b * vis.H + x.h) * vis.Tq + i0 + r];
        if (!seen[r])
        {
            std::fill(o_tile + r * qs, o_tile + r * qs + dh, T(0));
            row_lse = -std::numeric_limits<T>::infinity();
            continue;
        }
        simd::scale_in_place(o_tile + r * qs, dh, T(1) / l[r]);
        row_lse = m[r] + std::log(l[r]);
    }
}

// Every query tile of one (batch, query head), item = b H + h.
template <class T>
void forward_head(const visibility& vis, const product_operands<T>& in, T* out, T* lse, std::size_t item)
{
    const std::size_t b = item / vis.H, h = item % vis.H, g = h / (vis.H / vis.G);
    thread_local transposed_head<T> k_t;
    head_operands<T> x{b, h, in.k + vis.kv_offset(b, g, 0), in.v + vis.kv_offset(b, g, 0)};
    x.t_first = vis.head_keys().begin;
    x.k_t = k_t.of(x.k, vis.kv_stride(), vis.head_keys(), vis.dh);
    x.t_ld = k_t.ld;
    x.s_ld = score_row_length(vis);
    for (std::size_t i0 = 0; i0 < vis.Tq; i0 += tile_q)
    {
        forward_tile(vis, in, x, i0, out, lse);
    }
}

// One row of a block's P and dS from its S (in p) and dP (in ds): P = exp(scale S - lse) on the visible
// columns, dS = scale P (dP - D) there; both 0 elsewhere. The softmax backward: dS_ij = P_ij (dP_ij - D_i)
// with D_i = sum_j P_ij dP_ij = dO_i . O_i, times the scale that S entered the softmax with.
template <class T>
void probabilities_and_score_gradients(const visibility& vis, T* p, T* ds, std::size_t cols, std::size_t j0,
                                       std::size_t i, const bool* mask_row, T scale, T row_lse, T d)
{
    const key_range visible = vis.visible_columns(p, cols, j0, i, mask_row);
    if (visible.empty())
    {
        std::fill(p, p + cols, T(0));  // P = 0 and dS = 0 on the whole row
        std::fill(ds, ds + cols, T(0));
        return;
    }
    const key_range lanes = whole_batches<T>(p, cols, visible);
    simd::exp_sum(p + lanes.begin, lanes.size(), scale, row_lse);  // P = exp(scale S - lse)
    for (std::size_t c = lanes.begin; c < lanes.end; ++c)
    {
        ds[c] = scale * p[c] * (ds[c] - d);  // dS = scale P (dP - D)
    }
    std::fill(ds, ds + visible.begin, T(0));
    std::fill(ds + visible.end, ds + cols, T(0));
}

// The backward rules of the top of the file for one query tile, block by block: adds its rows' dQ and
// its keys' dK and dV (the rows of x's key/value head) to what the other tiles gave.
template <class T>
void backward_tile(const visibility& vis, const product_operands<T>& in, const head_operands<T>& x,
                   std::size_t i0, const T* out, const T* lse, const T* grad_out, T* dq, T* dk_head,
                   T* dv_head)
{
    const std::size_t dh = vis.dh, rows = std::min(tile_q, vis.Tq - i0), bh = x.b * vis.H + x.h;
    const std::size_t qs = vis.q_stride(), ks = vis.kv_stride(), ld = x.s_ld;
    const std::size_t offset = vis.q_offset(x.b, x.h, i0);
    const T scale = T(1) / std::sqrt(static_cast<T>(dh));
    const T* q_tile = in.q + offset;
    const T* do_tile = in.grad_out + offset;  // dO as the products read it
    T* dq_tile = dq + offset;

    thread_local std::vector<T> p_buffer, dp_buffer, d_buffer;
    T* p = grown(p_buffer, tile_q * ld);
    T* dp = grown(dp_buffer, tile_q * ld);
    T* d = grown(d_buffer, tile_q);
    zero_rows(dq_tile, rows, qs, dh);  // the tile's dQ, just before the blocks add to it
    for (std::size_t r = 0; r < rows; ++r)
    {
        d[r] = simd::dot(grad_out + offset + r * qs, out + offset + r * qs, dh);  // D_i = dO_i . O_i
    }
    vis.for_each_panel(i0, rows, [&](key_range panel) {
        const auto at = [&](T* buffer, std::size_t r, std::size_t j) {
            return buffer + r * ld + (j - panel.begin);
        };
        vis.for_each_block(i0, rows, panel, [&](std::size_t r0, std::size_t n, key_range keys) {
            const std::size_t j0 = keys.begin, cols = keys.size();
            const T *q_rows = q_tile + r0 * qs, *do_rows = do_tile + r0 * qs;
            T *s_block = at(p, r0, j0), *dp_block = at(dp, r0, j0);
            const T *k_t = x.k_t_from(j0), *v_t = x.v_t_from(j0);
            gemm(false, false, n, cols, dh, q_rows, qs, k_t, x.t_ld, T(0), s_block, ld);    // S = Q K^T
            gemm(false, false, n, cols, dh, do_rows, qs, v_t, x.t_ld, T(0), dp_block, ld);  // dP = dO V^T
        });
        for (std::size_t r = 0; r < rows; ++r)
        {
            const std::size_t i = i0 + r;
            const key_range row_keys = vis.row_blocks_keys(i0, rows, r, panel);
            if (row_keys.empty())
            {
                continue;
            }
            T *p_row = at(p, r, row_keys.begin), *ds_row = at(dp, r, row_keys.begin);
            probabilities_and_score_gradients(vis, p_row, ds_row, row_keys.size(), row_keys.begin, i,
                                              vis.mask_row(x.b, x.h, i), scale, lse[bh * vis.Tq + i], d[r]);
            in.round_row(p_row, row_keys.size());
            in.round_row(ds_row, row_keys.size());
        }
        vis.for_each_block(i0, rows, panel, [&](std::size_t r0, std::size_t n, key_range keys) {
            const std::size_t j0 = keys.begin, cols = keys.size();
            const T *q_rows = q_tile + r0 * qs, *do_rows = do_tile + r0 * qs;
            const T *p_block = at(p, r0, j0), *ds_block = at(dp, r0, j0);
            const T* k_rows = x.k + j0 * ks;
            T *dq_rows = dq_tile + r0 * qs, *dk_rows = dk_head + j0 * ks, *dv_rows = dv_head + j0 * ks;
            gemm(true, false, cols, dh, n, p_block, ld, do_rows, qs, T(1), dv_rows, ks);    // dV += P^T dO
            gemm(false, false, n, dh, cols, ds_block, ld, k_rows, ks, T(1), dq_rows, qs);  // dQ += dS K
            gemm(true, false, cols, dh, n, ds_block, ld, q_rows, qs, T(1), dk_rows, ks);    // dK += dS^T Q
        });
    });
}

// The backward of every query head of one (batch, key/value head) pair, item = b G + g: the thread owns
// the dK and dV rows of that head.
template <class T>
void backward_group(const visibility& vis, const product_operands<T>& in, const T* out, const T* lse,
                    const T* grad_out, T* dq, T* dk, T* dv, std::size_t item)
{
    const std::size_t b = item / vis.G, g = item % vis.G, per_group = vis.H / vis.G;
    thread_local transposed_head<T> k_t, v_t;
    head_operands<T> x{b, 0, in.k + vis.kv_offset(b, g, 0), in.v + vis.kv_offset(b, g, 0)};
    x.t_first = vis.head_keys().begin;
    x.k_t = k_t.of(x.k, vis.kv_stride(), vis.head_keys(), vis.dh);
    x.v_t = v_t.of(x.v, vis.kv_stride(), vis.head_keys(), vis.dh);
    x.t_ld = k_t.ld;
    x.s_ld = score_row_length(vis);
    T* dk_head = dk + vis.kv_offset(b, g, 0);
    T* dv_head = dv + vis.kv_offset(b, g, 0);
    zero_rows(dk_head, vis.Tk, vis.kv_stride(), vis.dh);
    zero_rows(dv_head, vis.Tk, vis.kv_stride(), vis.dh);
    for (x.h = g * per_group; x.h < (g + 1) * per_group; ++x.h)
    {
        for (std::size_t i0 = 0; i0 < vis.Tq; i0 += tile_q)
        {
            backward_tile(vis, in, x, i0, out, lse, grad_out, dq, dk_head, dv_head);
        }
    }
}

std::uint64_t visited_multiply_adds(const visibility& vis)
{
    std::uint64_t pairs = 0;  // (query, key) pairs in the blocks of all query tiles of one head
    for (std::size_t i0 = 0; i0 < vis.Tq; i0 += tile_q)
    {
        const std::size_t rows = std::min(tile_q, vis.Tq - i0);
        vis.for_each_panel(i0, rows, [&](key_range panel) {
            vis.for_each_block(i0, rows, panel, [&](std::size_t, std::size_t n, key_range keys) {
                pairs += static_cast<std::uint64_t>(n) * keys.size();
            });
        });
    }
    return 2 * pairs * vis.dh * vis.B * vis.H;  // S = Q K^T and P V
}

void run_items(std::size_t count, std::uint64_t work, const std::function<void(std::size_t)>& body)
{
    if (work < min_parallel_multiply_adds || num_threads() == 1)
    {
        for (std::size_t i = 0; i < count; ++i)
        {
            body(i);
        }
        return;
    }
    parallel_for(count, body);
}
}  // namespace

void check_window(const char* op, bool causal, std::size_t window)
{
    if (window > 0 && !causal)
    {
        fail(op, "window = " + std::to_string(window) +
                     " needs causal = true (a sliding window is a band of the causal mask)");
    }
}

namespace
{
template <class T>
attention_forward_result<T> forward_with(const visibility& vis, const array<T>& q, const array<T>& k,
                                         const array<T>& v)
{
    attention_forward_result<T> result;
    result.output = array<T>::from_shape(to_shape(q.shape()));
    result.log_sum_exp = array<T>::from_shape({vis.B, vis.H, vis.Tq});
    result.multiply_adds = visited_multiply_adds(vis);
    T* out = result.output.data();
    T* lse = result.log_sum_exp.data();
    const product_operands<T> in(q, k, v, nullptr);
    const precision_scope tiles(matmul_precision::fp32);  // the operands are rounded already, if at all
    run_items(vis.B * vis.H, result.multiply_adds, [&](std::size_t item) {
        forward_head(vis, in, out, lse, item);
    });
    return result;
}

template <class T>
attention_gradients<T> backward_with(const visibility& vis, const array<T>& q, const array<T>& k, const array<T>& v,
                                     const array<T>& output, const array<T>& log_sum_exp,
                                     const array<T>& grad_output)
{
    attention_gradients<T> grads;
    grads.q = array<T>::from_shape(to_shape(q.shape()));  // zeroed by backward_group, head by head
    grads.k = array<T>::from_shape(to_shape(k.shape()));
    grads.v = array<T>::from_shape(to_shape(k.shape()));
    const product_operands<T> in(q, k, v, &grad_output);
    const precision_scope tiles(matmul_precision::fp32);  // the operands are rounded already, if at all
    run_items(vis.B * vis.G, 2 * visited_multiply_adds(vis), [&](std::size_t item) {
        backward_group(vis, in, output.data(), log_sum_exp.data(), grad_output.data(), grads.q.data(),
                       grads.k.data(), grads.v.data(), item);
    });
    return grads;
}

// q (B, Tq, H dh), k (B, Tk, G dh): the token-major view of H query heads and G key/value heads.
visibility token_major_visibility(const shape_t& qs, const shape_t& ks, std::size_t heads, std::size_t kv_heads,
                                  const mask_t* mask, bool causal, std::size_t window)
{
    visibility vis(qs[0], heads, kv_heads, qs[1], ks[1], qs[2] / heads, mask, causal, window);
    vis.token_major = true;
    return vis;
}
}  // namespace

template <class T>
attention_forward_result<T> attention_forward(const array<T>& q, const array<T>& k, const array<T>& v,
                                              const mask_t* mask, bool causal, std::size_t window)
{
    return forward_with(visibility(to_shape(q.shape()), to_shape(k.shape()), mask, causal, window), q, k, v);
}

template <class T>
attention_gradients<T> attention_backward(const array<T>& q, const array<T>& k, const array<T>& v,
                                          const array<T>& output, const array<T>& log_sum_exp,
                                          const array<T>& grad_output, const mask_t* mask, bool causal,
                                          std::size_t window)
{
    const visibility vis(to_shape(q.shape()), to_shape(k.shape()), mask, causal, window);
    return backward_with(vis, q, k, v, output, log_sum_exp, grad_output);
}

template <class T>
attention_forward_result<T> attention_forward_token_major(const array<T>& q, const array<T>& k, const array<T>& v,
                                                          std::size_t heads, std::size_t kv_heads,
                                                          const mask_t* mask, bool causal, std::size_t window)
{
    const auto vis = token_major_visibility(to_shape(q.shape()), to_shape(k.shape()), heads, kv_heads, mask,
                                            causal, window);
    return forward_with(vis, q, k, v);
}

template <class T>
attention_gradients<T> attention_backward_token_major(const array<T>& q, const array<T>& k, const array<T>& v,
                                                      const array<T>& output, const array<T>& log_sum_exp,
                                                      const array<T>& grad_output, std::size_t heads,
                                                      std::size_t kv_heads, const mask_t* mask, bool causal,
                                                      std::size_t window)
{
    const auto vis = token_major_visibility(to_shape(q.shape()), to_shape(k.shape()), heads, kv_heads, mask,
                                            causal, window);
    return backward_with(vis, q, k, v, output, log_sum_exp, grad_output);
}

#define XGRAD_ATTENTION_KERNELS(T)                                                                            \
    template attention_forward_result<T> attention_forward(const array<T>&, const array<T>&, const array<T>&, \
                                                           const mask_t*, bool, std::size_t);                 \
    template attention_gradients<T> attention_backward(const array<T>&, const array<T>&, const array<T>&,     \
                                                       const array<T>&, const array<T>&, const array<T>&,     \
                                                       const mask_t*, bool, std::size_t);                     \
    template attention_forward_result<T> attention_forward_token_major(                                       \
        const array<T>&, const array<T>&, const array<T>&, std::size_t, std::size_t, const mask_t*, bool,     \
        std::size_t);                                                                                         \
    template attention_gradients<T> attention_backward_token_major(                                           \
        const array<T>&, const array<T>&, const array<T>&, const array<T>&, const array<T>&, const array<T>&, \
        std::size_t, std::size_t, const mask_t*, bool, std::size_t);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_ATTENTION_KERNELS)
}  // namespace xgrad::kernels
