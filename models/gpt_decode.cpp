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
    return (c.tied_head ? ops::matmul(h, wte, false, true) : ops::matmul(h, t.param(params.lm_head))).value();
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

// out = w^T for w (rows, columns) row-major, in tiles that stay in cache.
template <class T>
void transpose(const T* w, std::size_t rows, std::size_t columns, T* out)
{
    constexpr std::size_t tile = 16;  // rows of out written contiguously (1.6x the 32 x 32 tiles of w's rows)
    for (std::size_t i0 = 0; i0 < rows; i0 += tile)
    {
        for (std::size_t j0 = 0; j0 < columns; j0 += tile)
        {
            const std::size_t i1 = std::min(rows, i0 + tile), j1 = std::min(columns, j0 + tile);
            for (std::size_t j = j0; j < j1; ++j)
            {
                for (std::size_t i = i0; i < i1; ++i)
                {
                    out[j * rows + i] = w[i * columns + j];
                }
            }
        }
    }
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

// A parameter's values, or null for the empty handle of a tensor the variant lacks.
template <class T>
const T* data_or_null(const parameter<T>& p)
{
    return p.value().dimension() > 0 ? p.value().data() : nullptr;
}
}  // namespace

namespace
{
// The number of values of the model's matrices (those the decoder keeps transposed).
template <class T>
std::size_t matrix_values(const gpt_parameters<T>& params)
{
    std::size_t n = params.config.tied_head ? 0 : params.lm_head.value().size();
    for (const gpt_block_parameters<T>& b : params.blocks)
    {
        for (const parameter<T>* m :
             {&b.W_Q, &b.W_K, &b.W_V, &b.W_O, &b.W_fc, &b.W_proj, &b.W_gate, &b.W_up, &b.W_down})
        {
            n += m->value().dimension() == 2 ? m->value().size() : 0;
        }
    }
    return n;
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

// The matrix (in, out) copied into transposed_ as (out, in); this decoder's handle to it let go.
template <class T>
const T* decoder<T>::take_transposed(parameter<T>& matrix)
{
    if (matrix.value().dimension() != 2)
    {
        return nullptr;  // a matrix the variant lacks
    }
    const std::size_t rows = matrix.value().shape()[0], columns = matrix.value().shape()[1];
    T* out = transposed_.get() + filled_;
    transpose(matrix.value().data(), rows, columns, out);
    filled_ += rows * columns;
    matrix = parameter<T>();
    release_cached_buffers();  // the original's memory back to the system, not kept by the pool
    return out;
}

template <class T>
decoder<T>::decoder(gpt_parameters<T> params)
    : params_(std::move(params)), c_(params_.config), d_(c_.d_model), dh_(c_.d_model / c_.heads),
      kv_dim_(c_.kv_head_count() * dh_), hidden_(c_.hidden_width()),
      transposed_(huge_page_buffer<T>(matrix_values(params_))), zeros_(std::max(d_, hidden_), T(0)),
      x_(d_), xn_(d_), q_(d_), heads_(d_), out_(d_), hidden_a_(hidden_), hidden_b_(hidden_),
      scores_(c_.heads * c_.block_size), logits_(c_.vocab_size),
      keys_(new T[c_.layers * c_.block_size * kv_dim_]), values_(new T[c_.layers * c_.block_size * kv_dim_])
{
    const bool swiglu = c_.mlp == mlp_kind::swiglu;
    for (gpt_block_parameters<T>& b : params_.blocks)
    {
        layer_weights w{};
        w.ln_1_weight = data_or_null(b.ln_1_weight);
        w.ln_1_bias = data_or_null(b.ln_1_bias);
        w.ln_2_weight = data_or_null(b.ln_2_weight);
        w.ln_2_bias = data_or_null(b.ln_2_bias);
        w.W_Q = take_transposed(b.W_Q);
        w.W_K = take_transposed(b.W_K);
        w.W_V = take_transposed(b.W_V);
        w.W_O = take_transposed(b.W_O);
        w.b_Q = data_or_null(b.b_Q);
        w.b_K = data_or_null(b.b_K);
        w.b_V = data_or_null(b.b_V);
        w.b_O = data_or_null(b.b_O);
        w.W_in = take_transposed(swiglu ? b.W_up : b.W_fc);
        w.b_in = data_or_null(swiglu ? b.b_up : b.b_fc);
        w.W_gate = swiglu ? take_transposed(b.W_gate) : nullptr;
        w.b_gate = swiglu ? data_or_null(b.b_gate) : nullptr;
        w.W_out = take_transposed(swiglu ? b.W_down : b.W_proj);
        w.b_out = data_or_null(swiglu ? b.b_down : b.b_proj);
        layers_.push_back(w);
    }
    head_ = c_.tied_head ? params_.wte.value().data() : take_transposed(params_.lm_head);
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

// Causal attention of the new position's queries (q_) over the cached positions 0 .. length_, into
// heads_: for head h (key/value head g = h / (H / G)), s_t = q . k_t / sqrt(dh), a = softmax(s),
// y = sum_t a_t v_t.
template <class T>
void decoder<T>::attend(std::size_t layer)
{
    const std::size_t positions = length_ + 1, group = c_.heads / c_.kv_head_count();
    const T* keys = keys_.get() + layer * c_.block_size * kv_dim_;
    const T* values = values_.get() + layer * c_.block_size * kv_dim_;
    const T scale = T(1) / std::sqrt(static_cast<T>(dh_));
    const auto heads = [&](std::size_t begin, std::size_t end)
    {
        for (std::size_t h = begin; h < end; ++h)
        {
            const T* q = q_.data() + h * dh_;
            const std::size_t g = (h / group) * dh_;
            T* s = scores_.data() + h * c_.block_size;
            T largest = -std::numeric_limits<T>::infinity();
            for (std::size_t t = 0; t < positions; ++t)
            {
                s[t] = dot(q, keys + t * kv_dim_ + g, dh_) * scale;
                largest = std::max(largest, s[t]);
            }
            T total = 0;
            for (std::size_t t = 0; t < positions; ++t)
            {
                s[t] = std::exp(s[t] - largest);
                total += s[t];
            }
            T* y = heads_.data() + h * dh_;
            std::fill(y, y + dh_, T(0));
            for (std::size_t t = 0; t < positions; ++t)
            {
                add_scaled(y, s[t] / total, values + t * kv_dim_ + g, dh_);
            }
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

// x += MLP(xn) for xn = N(x; ln_2): GELU(xn W_fc + b_fc) W_proj + b_proj, or
// (silu(xn W_gate + b_gate) * (xn W_up + b_up)) W_down + b_down.
template <class T>
void decoder<T>::feed_forward(const layer_weights& w)
{
    T* a = hidden_a_.data();
    matvec(xn_.data(), w.W_in, w.b_in, a, hidden_, d_);
    if (c_.mlp == mlp_kind::swiglu)
    {
        T* gate = hidden_b_.data();
        matvec(xn_.data(), w.W_gate, w.b_gate, gate, hidden_, d_);
        swiglu_in_place(gate, a, hidden_);
        a = gate;
    }
    else if (c_.mlp == mlp_kind::gelu)
    {
        kernels::gelu::bias_gelu_row<kernels::gelu::exact_form>(a, zeros_.data(), a, static_cast<T*>(nullptr),
                                                                hidden_);
    }
    else
    {
        kernels::gelu::bias_gelu_row<kernels::gelu::tanh_form>(a, zeros_.data(), a, static_cast<T*>(nullptr),
                                                               hidden_);
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
        T* k = keys_.get() + (l * c_.block_size + pos) * kv_dim_;
        T* v = values_.get() + (l * c_.block_size + pos) * kv_dim_;
        matvec(xn_.data(), w.W_Q, w.b_Q, q_.data(), d_, d_);
        matvec(xn_.data(), w.W_K, w.b_K, k, kv_dim_, d_);
        matvec(xn_.data(), w.W_V, w.b_V, v, kv_dim_, d_);
        if (c_.position == position_kind::rope)
        {
            const T* cos = rope_cos_.data() + pos * (dh_ / 2);
            const T* sin = rope_sin_.data() + pos * (dh_ / 2);
            rotate_heads(q_.data(), c_.heads, dh_, cos, sin);
            rotate_heads(k, c_.kv_head_count(), dh_, cos, sin);
        }
        attend(l);
        matvec(heads_.data(), w.W_O, w.b_O, out_.data(), d_, d_);
        add_scaled(x_.data(), T(1), out_.data(), d_);
        // x = x + MLP(N(x; ln_2))
        norm_row(x_.data(), w.ln_2_weight, w.ln_2_bias ? w.ln_2_bias : no_bias, xn_.data(), d_, c_.norm);
        feed_forward(w);
    }
    // logits = N(x; ln_f) wte^T, or N(x; ln_f) lm_head
    const T* ln_f_bias = c_.norm_has_bias() ? params_.ln_f_bias.value().data() : no_bias;
    norm_row(x_.data(), params_.ln_f_weight.value().data(), ln_f_bias, xn_.data(), d_, c_.norm);
    matvec(xn_.data(), head_, static_cast<const T*>(nullptr), logits_.data(), c_.vocab_size, d_);
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
