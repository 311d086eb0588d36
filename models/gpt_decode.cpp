#include "models/gpt_decode.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>

#include "autodiff/instantiate.hpp"
#include "autodiff/memory.hpp"
#include "kernels/gelu.hpp"
#include "kernels/kernels.hpp"
#include "kernels/norm.hpp"
#include "kernels/parallel.hpp"

namespace xgrad::models
{
namespace
{
template <class T>
void check_decode(const gpt_parameters<T>& params, const ids_t& tokens, const kv_cache<T>& cache)
{
    const gpt_config& c = params.config;
    if (tokens.dimension() != 2 || tokens.shape()[1] == 0)
    {
        fail("gpt_decode", "tokens must be (B, Tn) with Tn >= 1, got " + shape_str(to_shape(tokens.shape())));
    }
    if (cache.length() + tokens.shape()[1] > c.block_size)
    {
        fail("gpt_decode", std::to_string(cache.length()) + " cached + " + std::to_string(tokens.shape()[1]) +
                               " new positions pass block_size " + std::to_string(c.block_size));
    }
    if (cache.length() > 0 && cache.batch() != tokens.shape()[0])
    {
        fail("gpt_decode", "tokens " + shape_str(to_shape(tokens.shape())) +
                               " do not match the cache's batch of " + std::to_string(cache.batch()));
    }
}
}  // namespace

template <class T>
array<T> gpt_decode(const gpt_parameters<T>& params, const ids_t& tokens, kv_cache<T>& cache,
                    std::vector<array<T>>* attention)
{
    check_decode(params, tokens, cache);
    const gpt_config& c = params.config;
    const std::size_t start = cache.length(), tn = tokens.shape()[1];
    cache.layers.resize(c.layers);
    if (attention)
    {
        attention->clear();
    }
    tape<T> t;
    auto guard = t.no_grad();
    block_options o;
    o.position_offset = start;
    o.attention_weights = attention != nullptr;
    // x = wte[tokens] (+ wpe[start .. start + Tn - 1])
    const var<T> wte = t.param(params.wte);
    var<T> x = ops::embedding(wte, tokens);
    if (c.position == position_kind::learned)
    {
        x = x + ops::slice(t.param(params.wpe), 0, start, start + tn);
    }
    for (std::size_t i = 0; i < c.layers; ++i)
    {
        const block_result<T> b = transformer_block(x, bind(t, params.blocks[i], c), c, o, &cache.layers[i]);
        if (attention)
        {
            attention->push_back(b.weights.value());
        }
        x = b.res_2;
    }
    const var<T> ln_f_bias = c.norm_has_bias() ? t.param(params.ln_f_bias) : var<T>();
    const var<T> h = norm(x, {t.param(params.ln_f_weight), ln_f_bias}, c.norm);
    const var<T> head =
        c.tied_head ? ops::matmul(h, wte, false, true) : ops::matmul(h, t.param(params.lm_head));
    return soft_capped(head, c.logit_softcap).value();
}

namespace
{
// ---- sampling -------------------------------------------------------------------------------------

// draw_token's rule on `logits` (V values), with `order` (V entries) and `weights` (V entries) as scratch.
template <class T>
std::int32_t draw_with(const T* logits, std::size_t vocab, double temperature, std::size_t top_k,
                       std::mt19937_64& rng, std::uint32_t* order, double* weights)
{
    if (temperature <= 0)
    {
        return static_cast<std::int32_t>(std::max_element(logits, logits + vocab) - logits);
    }
    std::iota(order, order + vocab, 0u);
    const std::size_t k = top_k == 0 ? vocab : std::min(top_k, vocab);
    if (k < vocab)
    {
        std::partial_sort(order, order + k, order + vocab,
                          [&](std::uint32_t a, std::uint32_t b) { return logits[a] > logits[b]; });
    }
    // p_i ∝ exp((l_i - l_max) / temperature) over the k candidates
    double largest = logits[order[0]];
    for (std::size_t i = 0; i < k; ++i)
    {
        largest = std::max(largest, static_cast<double>(logits[order[i]]));
    }
    double total = 0;
    for (std::size_t i = 0; i < k; ++i)
    {
        weights[i] = std::exp((static_cast<double>(logits[order[i]]) - largest) / temperature);
        total += weights[i];
    }
    double u = std::generate_canonical<double, 53>(rng) * total;
    for (std::size_t i = 0; i < k; ++i)
    {
        u -= weights[i];
        if (u < 0)
        {
            return static_cast<std::int32_t>(order[i]);
        }
    }
    return static_cast<std::int32_t>(order[k - 1]);
}
}  // namespace

std::int32_t draw_token(const std::vector<double>& logits, double temperature, std::size_t top_k,
                        std::mt19937_64& rng)
{
    std::vector<std::uint32_t> order(logits.size());
    std::vector<double> weights(logits.size());
    return draw_with(logits.data(), logits.size(), temperature, top_k, rng, order.data(), weights.data());
}

token_sampler::token_sampler(std::size_t vocab, double temperature, std::size_t top_k, std::uint64_t seed)
    : temperature_(temperature), top_k_(top_k), rng_(seed), order_(vocab), weights_(vocab)
{
}

template <class T>
std::int32_t token_sampler::draw(const T* logits)
{
    return draw_with(logits, order_.size(), temperature_, top_k_, rng_, order_.data(), weights_.data());
}

// ---- the decoder ----------------------------------------------------------------------------------

namespace
{
template <class T>
using batch = xsimd::batch<T>;

// sum_i a[i] b[i], in batches.
template <class T>
T dot(const T* a, const T* b, std::size_t n)
{
    constexpr std::size_t width = batch<T>::size;
    batch<T> acc0(T(0)), acc1(T(0));
    std::size_t i = 0;
    for (; i + 2 * width <= n; i += 2 * width)
    {
        acc0 = xsimd::fma(batch<T>::load_unaligned(a + i), batch<T>::load_unaligned(b + i), acc0);
        acc1 = xsimd::fma(batch<T>::load_unaligned(a + i + width), batch<T>::load_unaligned(b + i + width),
                          acc1);
    }
    for (; i + width <= n; i += width)
    {
        acc0 = xsimd::fma(batch<T>::load_unaligned(a + i), batch<T>::load_unaligned(b + i), acc0);
    }
    T sum = xsimd::hadd(acc0 + acc1);
    for (; i < n; ++i)
    {
        sum += a[i] * b[i];
    }
    return sum;
}

// y += a x over n entries.
template <class T>
void add_scaled(T* y, T a, const T* x, std::size_t n)
{
    constexpr std::size_t width = batch<T>::size;
    const batch<T> va(a);
    std::size_t i = 0;
    for (; i + width <= n; i += width)
    {
        xsimd::fma(va, batch<T>::load_unaligned(x + i), batch<T>::load_unaligned(y + i))
            .store_unaligned(y + i);
    }
    for (; i < n; ++i)
    {
        y[i] += a * x[i];
    }
}

// Runs body(begin, end) over [0, n) split into num_threads() contiguous ranges (starting on multiples of
// 16), or on this thread alone when the work, `cost` multiply-adds, would not pay for waking the pool.
template <class F>
void split_range(std::size_t n, std::size_t cost, const F& body)
{
    const std::size_t threads = static_cast<std::size_t>(num_threads());
    if (threads <= 1 || cost < (std::size_t(1) << 15))
    {
        body(std::size_t(0), n);
        return;
    }
    const auto boundary = [&](std::size_t c) { return std::min(n, (n * c / threads + 15) / 16 * 16); };
    const auto chunk = [&](std::size_t c) { body(boundary(c), c + 1 == threads ? n : boundary(c + 1)); };
    kernels::parallel_for(threads, std::cref(chunk));
}

// y[r] = x . w[r] (+ b[r]) for the rows r of w (rows, k), b possibly null: x W (+ b) for w = W^T.
template <class T>
void matvec(const T* x, const T* w, const T* b, T* y, std::size_t rows, std::size_t k)
{
    split_range(rows, rows * k,
                [&](std::size_t begin, std::size_t end)
                {
                    for (std::size_t r = begin; r < end; ++r)
                    {
                        y[r] = dot(x, w + r * k, k) + (b ? b[r] : T(0));
                    }
                });
}

// The norm of one row of n entries: LayerNorm (weight, bias) or RMSNorm (weight), eps 1e-5 as layers.hpp.
template <class T>
void norm_row(const T* x, const T* weight, const T* bias, T* y, std::size_t n, norm_kind kind)
{
    const T eps = T(1e-5);
    if (kind == norm_kind::layernorm)
    {
        kernels::norm::layer_norm_row(x, weight, bias, y, n, kernels::norm::layer_norm_stats(x, n, eps));
    }
    else
    {
        kernels::norm::rms_norm_row(x, weight, y, n, kernels::norm::rms_norm_rstd(x, n, eps));
    }
}

// Each pair (2i, 2i+1) of each of `heads` heads of dh entries turned by the angle whose cos and sin are
// cos[i], sin[i] (docs/spec.md, "Architecture variants").
template <class T>
void rotate_heads(T* x, std::size_t heads, std::size_t dh, const T* cos, const T* sin)
{
    for (std::size_t h = 0; h < heads; ++h)
    {
        T* head = x + h * dh;
        for (std::size_t i = 0; i < dh / 2; ++i)
        {
            const T a = head[2 * i], b = head[2 * i + 1];
            head[2 * i] = a * cos[i] - b * sin[i];
            head[2 * i + 1] = a * sin[i] + b * cos[i];
        }
    }
}

// Each of `heads` heads of dh entries divided by its root mean square: h / sqrt(mean(h^2) + 1e-5) (QK-norm).
template <class T>
void normalise_heads(T* x, std::size_t heads, std::size_t dh)
{
    for (std::size_t h = 0; h < heads; ++h)
    {
        T* head = x + h * dh;
        const T scale = T(1) / std::sqrt(dot(head, head, dh) / static_cast<T>(dh) + T(1e-5));
        std::transform(head, head + dh, head, [scale](T v) { return v * scale; });
    }
}

// a := relu(a)^2 over n entries.
template <class T>
void relu_squared_in_place(T* a, std::size_t n)
{
    std::transform(a, a + n, a, [](T v) { return v > 0 ? v * v : T(0); });
}

// y := c tanh(y / c) over n entries (the logits' soft cap, c > 0).
template <class T>
void soft_cap_in_place(T* y, std::size_t n, T c)
{
    std::transform(y, y + n, y, [c](T v) { return c * std::tanh(v / c); });
}

// a := silu(a) b over n entries, silu(z) = z sigmoid(z): the SwiGLU's product.
template <class T>
void swiglu_in_place(T* a, const T* b, std::size_t n)
{
    constexpr std::size_t width = batch<T>::size;
    std::size_t i = 0;
    for (; i + width <= n; i += width)
    {
        const batch<T> z = batch<T>::load_unaligned(a + i);
        (z / (T(1) + xsimd::exp(-z)) * batch<T>::load_unaligned(b + i)).store_unaligned(a + i);
    }
    for (; i < n; ++i)
    {
        a[i] = a[i] / (T(1) + std::exp(-a[i])) * b[i];
    }
}

// The positions of one tile of the key cache: two batches.
template <class T>
constexpr std::size_t key_tile = 2 * batch<T>::size;

// s[t] = q . k_t for the key_tile positions t of one tile of keys stored transposed: row i (stride
// key_tile) holds entry i of every key. Four accumulators (two batches, even and odd i) hide the
// multiply-add's latency.
template <class T>
void tile_scores(const T* q, const T* keys, std::size_t dh, T* s)
{
    constexpr std::size_t width = batch<T>::size, tile = key_tile<T>;
    batch<T> even0(T(0)), even1(T(0)), odd0(T(0)), odd1(T(0));
    std::size_t i = 0;
    for (; i + 2 <= dh; i += 2)
    {
        const T* row = keys + i * tile;
        even0 = xsimd::fma(batch<T>(q[i]), batch<T>::load_unaligned(row), even0);
        even1 = xsimd::fma(batch<T>(q[i]), batch<T>::load_unaligned(row + width), even1);
        odd0 = xsimd::fma(batch<T>(q[i + 1]), batch<T>::load_unaligned(row + tile), odd0);
        odd1 = xsimd::fma(batch<T>(q[i + 1]), batch<T>::load_unaligned(row + tile + width), odd1);
    }
    if (i < dh)
    {
        even0 = xsimd::fma(batch<T>(q[i]), batch<T>::load_unaligned(keys + i * tile), even0);
        even1 = xsimd::fma(batch<T>(q[i]), batch<T>::load_unaligned(keys + i * tile + width), even1);
    }
    (even0 + odd0).store_unaligned(s);
    (even1 + odd1).store_unaligned(s + width);
}

// s := exp(s - max(s)) over n entries; returns their sum.
template <class T>
T exp_shifted(T* s, std::size_t n)
{
    constexpr std::size_t width = batch<T>::size;
    const T largest = *std::max_element(s, s + n);
    T total = 0;
    std::size_t t = 0;
    for (; t + width <= n; t += width)
    {
        const batch<T> e = xsimd::exp(batch<T>::load_unaligned(s + t) - batch<T>(largest));
        e.store_unaligned(s + t);
        total += xsimd::hadd(e);
    }
    for (; t < n; ++t)
    {
        s[t] = std::exp(s[t] - largest);
        total += s[t];
    }
    return total;
}

// y[j] = sum_t a[t] rows[t stride + j] for j in [0, Nb width): N batches of y held in registers over
// every t.
template <std::size_t N, class T>
void weighted_batches(const T* a, const T* rows, std::size_t stride, std::size_t count, T* y)
{
    constexpr std::size_t width = batch<T>::size;
    batch<T> acc[N];
    for (batch<T>& b : acc)
    {
        b = batch<T>(T(0));
    }
    for (std::size_t t = 0; t < count; ++t)
    {
        const batch<T> at(a[t]);
        for (std::size_t b = 0; b < N; ++b)
        {
            acc[b] = xsimd::fma(at, batch<T>::load_unaligned(rows + t * stride + b * width), acc[b]);
        }
    }
    for (std::size_t b = 0; b < N; ++b)
    {
        acc[b].store_unaligned(y + b * width);
    }
}

// y[j] = sum_t a[t] rows[t stride + j] for j < n: the attention-weighted sum of `count` value rows.
template <class T>
void weighted_sum(const T* a, const T* rows, std::size_t stride, std::size_t count, std::size_t n, T* y)
{
    constexpr std::size_t width = batch<T>::size;
    std::size_t j = 0;
    for (; j + 4 * width <= n; j += 4 * width)
    {
        weighted_batches<4>(a, rows + j, stride, count, y + j);
    }
    switch ((n - j) / width)
    {
    case 3: weighted_batches<3>(a, rows + j, stride, count, y + j); break;
    case 2: weighted_batches<2>(a, rows + j, stride, count, y + j); break;
    case 1: weighted_batches<1>(a, rows + j, stride, count, y + j); break;
    default: break;
    }
    for (j += (n - j) / width * width; j < n; ++j)
    {
        y[j] = 0;
        for (std::size_t t = 0; t < count; ++t)
        {
            y[j] += a[t] * rows[t * stride + j];
        }
    }
}

// A parameter's values, or null for the empty handle of a tensor the variant lacks.
template <class T>
const T* data_or_null(const parameter<T>& p)
{
    return p.value().dimension() > 0 ? p.value().data() : nullptr;
}
}  // namespace

namespace
{
// Whether the decoder keeps a parameter transposed, (out, in): the blocks' matrices and the head.
bool kept_transposed(const declaration& d)
{
    return d.shape.size() == 2 && (d.role == parameter_role::matrix || d.role == parameter_role::head);
}

// The config, once the cache and the scores for block_size positions are known to be countable in
// std::size_t: each holds at most L x (block_size + key_tile) x max(H, G dh) values. Throws
// std::invalid_argument naming "decoder" otherwise (a block_size no real model has).
template <class T>
const gpt_config& countable_cache(const gpt_config& c)
{
    const std::size_t kv_width = c.kv_head_count() * (c.d_model / c.heads);
    std::size_t positions = 0, per_layer = 0, all = 0;
    const bool overflow = __builtin_add_overflow(c.block_size, key_tile<T>, &positions) ||
                          __builtin_mul_overflow(positions, std::max(c.heads, kv_width), &per_layer) ||
                          __builtin_mul_overflow(per_layer, std::max<std::size_t>(c.layers, 1), &all) ||
                          all > std::numeric_limits<std::size_t>::max() / sizeof(T);
    if (overflow)
    {
        fail("decoder", "a cache of block_size " + std::to_string(c.block_size) + " positions for " +
                            std::to_string(c.layers) + " layers is past what memory can address");
    }
    return c;
}

// The number of values of the matrices the decoder keeps transposed, and of the largest of them.
template <class T>
std::pair<std::size_t, std::size_t> matrix_values(gpt_parameters<T>& params)
{
    std::size_t all = 0, largest = 0;
    params.visit([&](const std::string&, const parameter<T>&, const declaration& d) {
        const std::size_t n = kept_transposed(d) ? element_count(d.shape) : 0;
        all += n;
        largest = std::max(largest, n);
    });
    return {all, largest};
}

constexpr std::size_t huge_page = std::size_t(2) << 20;

// Memory for n values on 2 MiB boundaries, marked for transparent huge pages (a hint the kernel may
// ignore); untouched until written.
template <class T>
T* huge_page_buffer(std::size_t n)
{
    const std::size_t pages = std::max<std::size_t>(1, (n * sizeof(T) + huge_page - 1) / huge_page);
    const std::size_t bytes = pages * huge_page;
    void* p = std::aligned_alloc(huge_page, bytes);
    if (!p)
    {
        throw std::bad_alloc();
    }
    ::madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<T*>(p);
}

}  // namespace

template <class T>
void decoder<T>::free_memory::operator()(T* p) const
{
    std::free(p);
}

// The matrix (rows, columns) copied into transposed_ as (columns, rows).
template <class T>
const T* decoder<T>::keep_transposed(const T* matrix, std::size_t rows, std::size_t columns)
{
    T* out = transposed_.get() + filled_;
    kernels::transpose(matrix, rows, columns, out);
    filled_ += rows * columns;
    return out;
}

template <class T>
decoder<T>::decoder(gpt_parameters<T> params) : decoder(std::move(params), nullptr)
{
}

template <class T>
decoder<T>::decoder(const gpt_config& config, const parameter_source<T>& read)
    : decoder(gpt_parameters<T>::declare(config), &read)
{
}

// With `read`, `params` is declared only (empty handles) and each parameter comes from `read`; without,
// each matrix comes from its handle, which is let go once copied.
template <class T>
decoder<T>::decoder(gpt_parameters<T> params, const parameter_source<T>* read)
    : params_(std::move(params)), c_(countable_cache<T>(params_.config)), d_(c_.d_model),
      dh_(c_.d_model / c_.heads), kv_dim_(c_.kv_head_count() * dh_), hidden_(c_.hidden_width()),
      transposed_(huge_page_buffer<T>(matrix_values(params_).first)), zeros_(std::max(d_, hidden_), T(0)),
      x_(d_), xn_(d_), q_(d_), k_(kv_dim_), heads_(d_), out_(d_), hidden_a_(hidden_), hidden_b_(hidden_),
      scores_(c_.heads * (c_.block_size + key_tile<T>)), logits_(c_.vocab_size),
      key_tiles_((c_.block_size + key_tile<T> - 1) / key_tile<T>),
      keys_(new T[c_.layers * key_tiles_ * kv_dim_ * key_tile<T>]),
      values_(new T[c_.layers * c_.block_size * kv_dim_])
{
    std::vector<T> scratch(read ? matrix_values(params_).second : 0);
    std::map<const parameter<T>*, const T*> transposed;
    params_.visit([&](const std::string& name, parameter<T>& p, const declaration& d) {
        if (!read && to_shape(p.value().shape()) != d.shape)
        {
            fail("decoder", "parameter " + name + " is " + shape_str(to_shape(p.value().shape())) +
                                ", the model's config declares " + shape_str(d.shape));
        }
        if (!kept_transposed(d))
        {
            if (read)
            {
                array<T> values = array<T>::from_shape(d.shape);
                (*read)(name, values.data());
                p = parameter<T>(std::move(values), name);
            }
            return;
        }
        if (read)
        {
            (*read)(name, scratch.data());
            transposed[&p] = keep_transposed(scratch.data(), d.shape[0], d.shape[1]);
            return;
        }
        transposed[&p] = keep_transposed(p.value().data(), d.shape[0], d.shape[1]);
        p = parameter<T>();
        release_cached_buffers();  // the original's memory back to the system, not kept by the pool
    });
    bind_layers(transposed);
    if (c_.position == position_kind::rope)  // angle[t][i] = t base^(-2i/dh), as ops::rope computes it
    {
        const std::size_t pairs = dh_ / 2;
        rope_cos_.resize(c_.block_size * pairs);
        rope_sin_.resize(c_.block_size * pairs);
        for (std::size_t i = 0; i < pairs; ++i)
        {
            const double frequency =
                std::pow(c_.rope_base, -static_cast<double>(2 * i) / static_cast<double>(dh_));
            for (std::size_t t = 0; t < c_.block_size; ++t)
            {
                const double angle = static_cast<double>(t) * frequency;
                rope_cos_[t * pairs + i] = static_cast<T>(std::cos(angle));
                rope_sin_[t * pairs + i] = static_cast<T>(std::sin(angle));
            }
        }
    }
}

// Each block's raw rows: the norms and biases from params_, the matrices from `transposed` (by handle).
template <class T>
void decoder<T>::bind_layers(const std::map<const parameter<T>*, const T*>& transposed)
{
    const auto matrix = [&](const parameter<T>& m) {
        const auto found = transposed.find(&m);
        return found == transposed.end() ? nullptr : found->second;  // null: a matrix the variant lacks
    };
    const bool swiglu = c_.mlp == mlp_kind::swiglu;
    for (gpt_block_parameters<T>& b : params_.blocks)
    {
        layer_weights w{};
        w.ln_1_weight = data_or_null(b.ln_1_weight);
        w.ln_1_bias = data_or_null(b.ln_1_bias);
        w.ln_2_weight = data_or_null(b.ln_2_weight);
        w.ln_2_bias = data_or_null(b.ln_2_bias);
        w.W_Q = matrix(b.W_Q);
        w.W_K = matrix(b.W_K);
        w.W_V = matrix(b.W_V);
        w.W_O = matrix(b.W_O);
        w.b_Q = data_or_null(b.b_Q);
        w.b_K = data_or_null(b.b_K);
        w.b_V = data_or_null(b.b_V);
        w.b_O = data_or_null(b.b_O);
        w.W_in = matrix(swiglu ? b.W_up : b.W_fc);
        w.b_in = data_or_null(swiglu ? b.b_up : b.b_fc);
        w.W_gate = swiglu ? matrix(b.W_gate) : nullptr;
        w.b_gate = swiglu ? data_or_null(b.b_gate) : nullptr;
        w.W_out = matrix(swiglu ? b.W_down : b.W_proj);
        w.b_out = data_or_null(swiglu ? b.b_down : b.b_proj);
        layers_.push_back(w);
    }
    head_ = c_.tied_head ? params_.wte.value().data() : matrix(params_.lm_head);
}

// k_ written into the key cache at position `pos` of `layer`: entry r of the key goes to row r of the
// position's tile, zeroed first when the position is the tile's first (the scores read whole tiles).
template <class T>
void decoder<T>::append_key(std::size_t layer, std::size_t pos)
{
    constexpr std::size_t tile = key_tile<T>;
    T* keys = keys_.get() + (layer * key_tiles_ + pos / tile) * kv_dim_ * tile;
    if (pos % tile == 0)
    {
        std::fill(keys, keys + kv_dim_ * tile, T(0));
    }
    for (std::size_t r = 0; r < kv_dim_; ++r)
    {
        keys[r * tile + pos % tile] = k_[r];
    }
}

// Causal attention of the new position's queries (q_) over the cached positions 0 .. length_ (with an
// attention window w, only the last w of them: the keys that left the window are not read), into
// heads_: for head h (key/value head g = h / (H / G)), s_t = q . k_t / sqrt(dh), a = softmax(s),
// y = sum_t a_t v_t. The scores are computed for whole tiles of keys, those outside the positions
// dropped.
template <class T>
void decoder<T>::attend(std::size_t layer)
{
    constexpr std::size_t tile = key_tile<T>;
    const std::size_t window = c_.attention_window, group = c_.heads / c_.kv_head_count();
    const std::size_t first = window && length_ + 1 > window ? length_ + 1 - window : 0;
    const std::size_t positions = length_ + 1 - first;
    const std::size_t first_tile = first / tile, last_tile = length_ / tile;
    const T* key_tiles = keys_.get() + layer * key_tiles_ * kv_dim_ * tile;
    const T* values = values_.get() + (layer * c_.block_size + first) * kv_dim_;
    const T scale = T(1) / std::sqrt(static_cast<T>(dh_));
    const auto heads = [&](std::size_t begin, std::size_t end)
    {
        for (std::size_t h = begin; h < end; ++h)
        {
            const std::size_t g = (h / group) * dh_;
            T* tiles = scores_.data() + h * (c_.block_size + tile);
            for (std::size_t k = first_tile; k <= last_tile; ++k)
            {
                tile_scores(q_.data() + h * dh_, key_tiles + (k * kv_dim_ + g) * tile, dh_,
                            tiles + (k - first_tile) * tile);
            }
            T* s = tiles + first % tile;  // s[t]: position first + t
            std::transform(s, s + positions, s, [scale](T v) { return v * scale; });
            const T total = exp_shifted(s, positions);
            std::transform(s, s + positions, s, [total](T v) { return v / total; });
            weighted_sum(s, values + g, kv_dim_, positions, dh_, heads_.data() + h * dh_);
        }
    };
    const std::size_t threads = std::min<std::size_t>(static_cast<std::size_t>(num_threads()), c_.heads);
    if (threads <= 1 || positions * d_ < (std::size_t(1) << 14))
    {
        heads(0, c_.heads);
        return;
    }
    const auto chunk = [&](std::size_t c) { heads(c_.heads * c / threads, c_.heads * (c + 1) / threads); };
    kernels::parallel_for(threads, std::cref(chunk));
}

// x += MLP(xn) for xn = N(x; ln_2): act(xn W_fc + b_fc) W_proj + b_proj (GELU or relu^2), or
// (silu(xn W_gate + b_gate) * (xn W_up + b_up)) W_down + b_down.
template <class T>
void decoder<T>::feed_forward(const layer_weights& w)
{
    T* a = hidden_a_.data();
    matvec(xn_.data(), w.W_in, w.b_in, a, hidden_, d_);
    switch (c_.mlp)
    {
    case mlp_kind::swiglu:
    {
        T* gate = hidden_b_.data();
        matvec(xn_.data(), w.W_gate, w.b_gate, gate, hidden_, d_);
        swiglu_in_place(gate, a, hidden_);
        a = gate;
        break;
    }
    case mlp_kind::gelu:
        kernels::gelu::bias_gelu_row<kernels::gelu::exact_form>(a, zeros_.data(), a, static_cast<T*>(nullptr),
                                                                hidden_);
        break;
    case mlp_kind::gelu_tanh:
        kernels::gelu::bias_gelu_row<kernels::gelu::tanh_form>(a, zeros_.data(), a, static_cast<T*>(nullptr),
                                                               hidden_);
        break;
    case mlp_kind::relu2:
        relu_squared_in_place(a, hidden_);
        break;
    }
    matvec(a, w.W_out, w.b_out, out_.data(), d_, hidden_);
    add_scaled(x_.data(), T(1), out_.data(), d_);
}

template <class T>
const T* decoder<T>::step(std::int32_t token)
{
    if (length_ >= c_.block_size)
    {
        fail("decoder", "the cache is full: " + std::to_string(length_) + " positions, block_size " +
                            std::to_string(c_.block_size));
    }
    if (token < 0 || static_cast<std::size_t>(token) >= c_.vocab_size)
    {
        fail("decoder",
             "token id " + std::to_string(token) + " is outside [0, " + std::to_string(c_.vocab_size) + ")");
    }
    const std::size_t pos = length_;
    // x = wte[token] (+ wpe[pos])
    const T* embedding = params_.wte.value().data() + static_cast<std::size_t>(token) * d_;
    std::copy(embedding, embedding + d_, x_.begin());
    if (c_.position == position_kind::learned)
    {
        add_scaled(x_.data(), T(1), params_.wpe.value().data() + pos * d_, d_);
    }
    const T* no_bias = zeros_.data();
    for (std::size_t l = 0; l < c_.layers; ++l)
    {
        const layer_weights& w = layers_[l];
        // x = x + attention(q, K, V) W_O + b_O, with q, k, v from N(x; ln_1); k and v appended to the cache
        norm_row(x_.data(), w.ln_1_weight, w.ln_1_bias ? w.ln_1_bias : no_bias, xn_.data(), d_, c_.norm);
        T* k = k_.data();
        T* v = values_.get() + (l * c_.block_size + pos) * kv_dim_;
        matvec(xn_.data(), w.W_Q, w.b_Q, q_.data(), d_, d_);
        matvec(xn_.data(), w.W_K, w.b_K, k, kv_dim_, d_);
        matvec(xn_.data(), w.W_V, w.b_V, v, kv_dim_, d_);
        if (c_.qk_norm == qk_norm_kind::rms)
        {
            normalise_heads(q_.data(), c_.heads, dh_);
            normalise_heads(k, c_.kv_head_count(), dh_);
        }
        if (c_.position == position_kind::rope)
        {
            const T* cos = rope_cos_.data() + pos * (dh_ / 2);
            const T* sin = rope_sin_.data() + pos * (dh_ / 2);
            rotate_heads(q_.data(), c_.heads, dh_, cos, sin);
            rotate_heads(k, c_.kv_head_count(), dh_, cos, sin);
        }
        append_key(l, pos);
        attend(l);
        matvec(heads_.data(), w.W_O, w.b_O, out_.data(), d_, d_);
        add_scaled(x_.data(), T(1), out_.data(), d_);
        // x = x + MLP(N(x; ln_2))
        norm_row(x_.data(), w.ln_2_weight, w.ln_2_bias ? w.ln_2_bias : no_bias, xn_.data(), d_, c_.norm);
        feed_forward(w);
    }
    // logits = N(x; ln_f) wte^T, or N(x; ln_f) lm_head, soft-capped when logit_softcap > 0
    const T* ln_f_bias = c_.norm_has_bias() ? params_.ln_f_bias.value().data() : no_bias;
    norm_row(x_.data(), params_.ln_f_weight.value().data(), ln_f_bias, xn_.data(), d_, c_.norm);
    matvec(xn_.data(), head_, static_cast<const T*>(nullptr), logits_.data(), c_.vocab_size, d_);
    if (c_.logit_softcap.on())  // logits = c tanh(logits / c)
    {
        soft_cap_in_place(logits_.data(), c_.vocab_size, static_cast<T>(c_.logit_softcap.value));
    }
    ++length_;
    return logits_.data();
}

template <class T>
std::vector<std::int32_t> sample(decoder<T>& model, const std::vector<std::int32_t>& prompt,
                                 const sampling_options& options)
{
    if (prompt.empty())
    {
        fail("sample", "the prompt needs at least one token");
    }
    const std::size_t block = model.config().block_size;
    token_sampler sampler(model.config().vocab_size, options.temperature, options.top_k, options.seed);
    model.clear();
    // The ids the cache holds; when it is full, its last half refills it.
    std::vector<std::int32_t> context(
        prompt.end() - static_cast<std::ptrdiff_t>(std::min(prompt.size(), block)), prompt.end());
    context.reserve(block + 1);
    const T* logits = nullptr;
    for (const std::int32_t id : context)
    {
        logits = model.step(id);
    }
    std::vector<std::int32_t> out;
    out.reserve(options.tokens);
    for (std::size_t n = 0; n < options.tokens; ++n)
    {
        const std::int32_t next = sampler.draw(logits);
        out.push_back(next);
        context.push_back(next);
        if (n + 1 == options.tokens)
        {
            break;  // no logits wanted after the last token
        }
        if (model.length() == block)
        {
            const std::size_t keep = std::max<std::size_t>(1, block / 2);
            context.erase(context.begin(), context.end() - static_cast<std::ptrdiff_t>(keep));
            model.clear();
            for (const std::int32_t id : context)
            {
                logits = model.step(id);
            }
        }
        else
        {
            logits = model.step(next);
        }
    }
    return out;
}

template <class T>
std::vector<std::int32_t> sample(const gpt_parameters<T>& params, const std::vector<std::int32_t>& prompt,
                                 const sampling_options& options)
{
    if (prompt.empty())
    {
        fail("sample", "the prompt needs at least one token");
    }
    decoder<T> model(params);
    return sample(model, prompt, options);
}

#define XGRAD_GPT_DECODE(T)                                                                                  \
    template array<T> gpt_decode(const gpt_parameters<T>&, const ids_t&, kv_cache<T>&,                       \
                                 std::vector<array<T>>*);                                                    \
    template std::vector<std::int32_t> sample(const gpt_parameters<T>&, const std::vector<std::int32_t>&,    \
                                              const sampling_options&);                                      \
    template std::vector<std::int32_t> sample(decoder<T>&, const std::vector<std::int32_t>&,                 \
                                              const sampling_options&);                                      \
    template class decoder<T>;                                                                               \
    template std::int32_t token_sampler::draw(const T*);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_GPT_DECODE)
}  // namespace xgrad::models
