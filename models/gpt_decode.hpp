// Decoding with a key/value cache: each new token runs the model on itself only, attending to the keys
// and values of every earlier position kept from before. It runs the training forward's own block
// (models/layers.hpp, transformer_block), so every variant decodes; RoPE rotates at absolute positions. With docs/spec.md's bottom-right causal alignment the
// same code runs a prompt of Tn tokens over Tp cached ones (query i sees keys j <= i + Tp), so the full
// forward pass is the special case of an empty cache; a test checks the two give equal logits.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "models/gpt.hpp"
#include "models/layers.hpp"

namespace xgrad::models
{
// Per layer, the keys and values of every position seen so far: (B, G, t, dh) each, after RoPE.
template <class T>
struct kv_cache
{
    std::vector<kv_cache_layer<T>> layers;
    std::size_t length() const { return layers.empty() ? 0 : layers.front().length(); }
    std::size_t batch() const { return length() == 0 ? 0 : layers.front().keys.shape()[0]; }
    void clear() { layers.clear(); }
};

// Logits (B, Tn, V) for `tokens` (B, Tn) at positions length() .. length() + Tn - 1, extending the cache.
// Records no backward (values only). With `attention`, also returns each layer's attention weights
// (B, H, Tn, length() + Tn): what the attention maps show. Throws std::invalid_argument naming
// "gpt_decode" when the positions would pass block_size, an id is outside [0, V), or B differs from the
// cache's.
template <class T>
array<T> gpt_decode(const gpt_parameters<T>& params, const ids_t& tokens, kv_cache<T>& cache,
                    std::vector<array<T>>* attention = nullptr);

struct sampling_options
{
    std::size_t tokens = 200;   // how many to generate
    double temperature = 1.0;   // 0: always the most likely token
    std::size_t top_k = 0;      // 0: every token competes
    std::uint64_t seed = 1;
};

// Continues `prompt` (at least one id) by options.tokens ids, one sequence. When the context reaches
// block_size it keeps the last block_size / 2 tokens, refills the cache from them and goes on.
template <class T>
std::vector<std::int32_t> sample(const gpt_parameters<T>& params, const std::vector<std::int32_t>& prompt,
                                 const sampling_options& options);

// Draws one id from logits (V,) divided by the temperature, among the top_k largest (all when 0).
std::int32_t draw_token(const std::vector<double>& logits, double temperature, std::size_t top_k, std::mt19937_64& rng);
}  // namespace xgrad::models
