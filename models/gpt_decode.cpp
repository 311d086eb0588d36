#include "models/gpt_decode.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autodiff/instantiate.hpp"

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
        fail("gpt_decode", "tokens " + shape_str(to_shape(tokens.shape())) + " do not match the cache's batch of " +
                               std::to_string(cache.batch()));
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

std::int32_t draw_token(const std::vector<double>& logits, double temperature, std::size_t top_k, std::mt19937_64& rng)
{
    std::vector<std::size_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    const std::size_t k = top_k == 0 ? order.size() : std::min(top_k, order.size());
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](std::size_t a, std::size_t b) { return logits[a] > logits[b]; });
    if (temperature <= 0)
    {
        return static_cast<std::int32_t>(order.front());
    }
    // p_i ∝ exp((l_i - l_max) / temperature) over the k candidates
    std::vector<double> weights(k);
    for (std::size_t i = 0; i < k; ++i)
    {
        weights[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
    }
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
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

namespace
{
template <class T>
array<T> decode_ids(const gpt_parameters<T>& params, const std::vector<std::int32_t>& ids, kv_cache<T>& cache)
{
    ids_t tokens = ids_t::from_shape({1, ids.size()});
    std::copy(ids.begin(), ids.end(), tokens.begin());
    return gpt_decode(params, tokens, cache);
}

template <class T>
std::vector<double> last_row(const array<T>& logits)
{
    const std::size_t t = logits.shape()[1], v = logits.shape()[2];
    return std::vector<double>(logits.data() + (t - 1) * v, logits.data() + t * v);
}
}  // namespace

template <class T>
std::vector<std::int32_t> sample(const gpt_parameters<T>& params, const std::vector<std::int32_t>& prompt,
                                 const sampling_options& options)
{
    if (prompt.empty())
    {
        fail("sample", "the prompt needs at least one token");
    }
    const std::size_t block = params.config.block_size;
    std::mt19937_64 rng(options.seed);
    std::vector<std::int32_t> context(prompt.end() - static_cast<std::ptrdiff_t>(std::min(prompt.size(), block)),
                                      prompt.end());
    kv_cache<T> cache;
    std::vector<double> logits = last_row(decode_ids(params, context, cache));
    std::vector<std::int32_t> out;
    for (std::size_t n = 0; n < options.tokens; ++n)
    {
        const std::int32_t next = draw_token(logits, options.temperature, options.top_k, rng);
        out.push_back(next);
        context.push_back(next);
        if (cache.length() == block)  // full: keep the last half of the context and refill the cache
        {
            context.erase(context.begin(), context.end() - static_cast<std::ptrdiff_t>(std::max<std::size_t>(1, block / 2)));
            cache.clear();
            logits = last_row(decode_ids(params, context, cache));
        }
        else
        {
            logits = last_row(decode_ids(params, {next}, cache));
        }
    }
    return out;
}

#define XGRAD_GPT_DECODE(T)                                                                    \
    template array<T> gpt_decode(const gpt_parameters<T>&, const ids_t&, kv_cache<T>&, std::vector<array<T>>*); \
    template std::vector<std::int32_t> sample(const gpt_parameters<T>&, const std::vector<std::int32_t>&, \
                                              const sampling_options&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_GPT_DECODE)
}  // namespace xgrad::models
