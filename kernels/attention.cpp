// Fused attention, tile by tile (see kernels/attention.hpp). For one query tile Q_t and the key/value
// tiles K_u, V_u it may see:
//
//   forward   S = Q_t K_u^T                    (GEMM)
//             m' = max(m, scale max_j S_ij)     over visible keys only
//             P = exp(scale S - m')             masked entries are -inf before the exp, so exactly 0;
//                                               past the causal limit P = 0 is written, no exp taken
//             l = l exp(m - m') + sum_j P_ij,   O = O exp(m - m') + P V_u   (GEMM)
//   at the end O /= l and lse = m + log l: softmax(scale S) V without ever holding a whole row of S.
//
//   backward  D_i = sum_c dO_ic O_ic            (the softmax backward's row sum, from O instead of P)
//             P = exp(scale S - lse)            recomputed, exactly the forward's probabilities
//             dV_u += P^T dO_t,  dP = dO_t V_u^T,  dS = scale P (dP - D)
//             dQ_t += dS K_u,    dK_u += dS^T Q_t
//
// Only the key tiles between a query tile's first row's first visible key and its last row's last one are
// touched, forward or backward: with a causal mask about half the work when Tq = Tk; with a sliding window
// w, about Tq (w + tile_q) key visits instead of Tq Tk / 2. A row with no visible key never enters the sums:
// output 0, lse -inf, and no gradient. The forward splits (batch, head, query tile) across threads; the
// backward splits (batch, key/value head), so each thread owns the dK and dV it accumulates into.
//
// At bf16 matmul precision (kernels/precision.hpp) every tile product takes bfloat16 operands: Q, K, V
// and dO are rounded once per call, each P and dS tile once where it is made, and the tile products then
// run in float32 on the rounded values (exact products, float32 sums: what the GEMM door's own rounding
// computes, without rounding each key/value tile again for every query tile).
#include "kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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
// Below this many multiply-adds, waking threads costs more than it saves.
constexpr std::uint64_t parallel_threshold = 1 << 21;

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

    std::size_t query_tiles() const { return (Tq + tile_q - 1) / tile_q; }
    // The keys a query tile of `rows` rows from i0 visits: from its first row's first visible key to its
    // last row's last (both ends grow with i). Key tiles outside are never touched.
    key_range tile_keys(std::size_t i0, std::size_t rows) const
    {
        return {keys(i0).begin, keys(i0 + rows - 1).end};
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
// them rounded to bfloat16 once, and then the P and dS tiles are rounded too (round_tile).
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

    // Rounds the first `cols` entries of each of a tile's `rows` rows (row stride tile_k) in place.
    void round_tile(T* tile, std::size_t rows, std::size_t cols) const
    {
        if constexpr (std::is_same_v<T, float>)
        {
            if (!rounds_to_bf16)
            {
                return;
            }
            for (std::size_t r = 0; r < rows; ++r)
            {
                bf16::round_to_bf16_values(tile + r * tile_k, cols, tile + r * tile_k);
            }
        }
    }
};

template <class T>
void forward_tile(const visibility& vis, const product_operands<T>& in, T* out, T* lse, std::size_t item)
{
    const std::size_t tiles = vis.query_tiles();
    const std::size_t bh = item / tiles, i0 = (item % tiles) * tile_q;
    const std::size_t b = bh / vis.H, h = bh % vis.H, g = h / (vis.H / vis.G), dh = vis.dh;
    const std::size_t rows = std::min(tile_q, vis.Tq - i0);
    const T scale = T(1) / std::sqrt(static_cast<T>(dh));
    const std::size_t qs = vis.q_stride(), ks = vis.kv_stride();
    const T* q_tile = in.q + vis.q_offset(b, h, i0);
    const T* k_head = in.k + vis.kv_offset(b, g, 0);
    const T* v_head = in.v + vis.kv_offset(b, g, 0);
    T* o_tile = out + vis.q_offset(b, h, i0);

    thread_local std::vector<T> s_buffer, stats;
    thread_local std::vector<char> seen_buffer;
    T* s = grown(s_buffer, tile_q * tile_k);
    T* m = grown(stats, 2 * tile_q);  // running maximum (scaled), then running sum
    T* l = m + tile_q;
    char* seen = grown(seen_buffer, tile_q);  // the row has had a visible key
    std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
    std::fill(l, l + rows, T(0));
    std::fill(seen, seen + rows, char(0));
    for (std::size_t r = 0; r < rows; ++r)
    {
        std::fill(o_tile + r * qs, o_tile + r * qs + dh, T(0));
    }

    const key_range keys = vis.tile_keys(i0, rows);
    for (std::size_t j0 = keys.begin; j0 < keys.end; j0 += tile_k)
    {
        const std::size_t cols = std::min(tile_k, keys.end - j0);
        gemm(false, true, rows, cols, dh, q_tile, qs, k_head + j0 * ks, ks, T(0), s, tile_k);  // S = Q K^T
        for (std::size_t r = 0; r < rows; ++r)
        {
            T* row = s + r * tile_k;
            const std::size_t i = i0 + r;
            const key_range visible = vis.visible_columns(row, cols, j0, i, vis.mask_row(b, h, i));
            if (visible.empty())
            {
                std::fill(row, row + cols, T(0));  // nothing visible here: P = 0, the row's state unchanged
                continue;
            }
            seen[r] = 1;
            T* p_visible = row + visible.begin;
            const T new_max = std::max(m[r], scale * simd::max_of(p_visible, visible.size()));
            const T shrink = std::exp(m[r] - new_max);  // 0 on the row's first visible tile
            const T sum = simd::exp_sum(p_visible, visible.size(), scale, new_max);
            l[r] = l[r] * shrink + sum;
            m[r] = new_max;
            if (shrink != T(1))
            {
                simd::scale_in_place(o_tile + r * qs, dh, shrink);
            }
        }
        in.round_tile(s, rows, cols);
        gemm(false, false, rows, dh, cols, s, tile_k, v_head + j0 * ks, ks, T(1), o_tile, qs);  // O += P V
    }
    for (std::size_t r = 0; r < rows; ++r)
    {
        T& row_lse = lse[bh * vis.Tq + i0 + r];
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

// The backward of every query head of one (batch, key/value head) pair.
template <class T>
void backward_group(const visibility& vis, const product_operands<T>& in, const T* out, const T* lse,
                    const T* grad_out, T* dq, T* dk, T* dv, std::size_t item)
{
    const std::size_t b = item / vis.G, g = item % vis.G, dh = vis.dh, per_group = vis.H / vis.G;
    const T scale = T(1) / std::sqrt(static_cast<T>(dh));
    const std::size_t qs = vis.q_stride(), ks = vis.kv_stride();
    const T* k_head = in.k + vis.kv_offset(b, g, 0);
    const T* v_head = in.v + vis.kv_offset(b, g, 0);
    T* dk_head = dk + vis.kv_offset(b, g, 0);
    T* dv_head = dv + vis.kv_offset(b, g, 0);

    thread_local std::vector<T> p_buffer, dp_buffer, d_buffer;
    T* p = grown(p_buffer, tile_q * tile_k);
    T* dp = grown(dp_buffer, tile_q * tile_k);
    T* d = grown(d_buffer, tile_q);
    for (std::size_t h = g * per_group; h < (g + 1) * per_group; ++h)
    {
        const std::size_t bh = b * vis.H + h;
        for (std::size_t i0 = 0; i0 < vis.Tq; i0 += tile_q)
        {
            const std::size_t rows = std::min(tile_q, vis.Tq - i0);
            const std::size_t offset = vis.q_offset(b, h, i0);
            const T* q_tile = in.q + offset;
            const T* do_tile = in.grad_out + offset;  // dO as the products read it
            T* dq_tile = dq + offset;
            for (std::size_t r = 0; r < rows; ++r)
            {
                d[r] = simd::dot(grad_out + offset + r * qs, out + offset + r * qs, dh);  // D_i = dO_i . O_i
            }
            const key_range keys = vis.tile_keys(i0, rows);
            for (std::size_t j0 = keys.begin; j0 < keys.end; j0 += tile_k)
            {
                const std::size_t cols = std::min(tile_k, keys.end - j0);
                gemm(false, true, rows, cols, dh, q_tile, qs, k_head + j0 * ks, ks, T(0), p, tile_k);  // S = Q K^T
                gemm(false, true, rows, cols, dh, do_tile, qs, v_head + j0 * ks, ks, T(0), dp, tile_k);  // dP = dO V^T
                for (std::size_t r = 0; r < rows; ++r)
                {
                    T* p_row = p + r * tile_k;
                    T* ds_row = dp + r * tile_k;
                    const std::size_t i = i0 + r;
                    const key_range visible = vis.visible_columns(p_row, cols, j0, i, vis.mask_row(b, h, i));
                    if (visible.empty())
                    {
                        std::fill(p_row, p_row + cols, T(0));  // P = 0 and dS = 0 on the whole row
                        std::fill(ds_row, ds_row + cols, T(0));
                        continue;
                    }
                    std::fill(ds_row, ds_row + visible.begin, T(0));
                    std::fill(ds_row + visible.end, ds_row + cols, T(0));
                    // P = exp(scale S - lse)
                    simd::exp_sum(p_row + visible.begin, visible.size(), scale, lse[bh * vis.Tq + i]);
                    for (std::size_t c = visible.begin; c < visible.end; ++c)
                    {
                        ds_row[c] = scale * p_row[c] * (ds_row[c] - d[r]);  // dS = scale P (dP - D)
                    }
                }
                in.round_tile(p, rows, cols);
                in.round_tile(dp, rows, cols);
                gemm(true, false, cols, dh, rows, p, tile_k, do_tile, qs, T(1), dv_head + j0 * ks, ks);  // dV += P^T dO
                gemm(false, false, rows, dh, cols, dp, tile_k, k_head + j0 * ks, ks, T(1), dq_tile, qs);  // dQ += dS K
                gemm(true, false, cols, dh, rows, dp, tile_k, q_tile, qs, T(1), dk_head + j0 * ks, ks);  // dK += dS^T Q
            }
        }
    }
}

std::uint64_t visited_multiply_adds(const visibility& vis)
{
    std::uint64_t keys = 0;  // sum over query tiles of rows x visited keys
    for (std::size_t i0 = 0; i0 < vis.Tq; i0 += tile_q)
    {
        const std::size_t rows = std::min(tile_q, vis.Tq - i0);
        keys += static_cast<std::uint64_t>(rows) * vis.tile_keys(i0, rows).size();
    }
    return 2 * keys * vis.dh * vis.B * vis.H;  // S = Q K^T and P V
}

void run_items(std::size_t count, std::uint64_t work, const std::function<void(std::size_t)>& body)
{
    if (work < parallel_threshold || num_threads() == 1)
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
    run_items(vis.B * vis.H * vis.query_tiles(), result.multiply_adds, [&](std::size_t item) {
        forward_tile(vis, in, out, lse, item);
    });
    return result;
}

template <class T>
attention_gradients<T> backward_with(const visibility& vis, const array<T>& q, const array<T>& k, const array<T>& v,
                                     const array<T>& output, const array<T>& log_sum_exp,
                                     const array<T>& grad_output)
{
    attention_gradients<T> grads;
    grads.q = xt::zeros<T>(to_shape(q.shape()));
    grads.k = xt::zeros<T>(to_shape(k.shape()));
    grads.v = xt::zeros<T>(to_shape(k.shape()));
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
