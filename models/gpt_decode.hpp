// Decoding with a key/value cache: each new token runs the model on itself only, attending to the keys
// and values of every earlier position kept from before. It runs the training forward's own block
// (models/layers.hpp, transformer_block), so every variant decodes; RoPE rotates at absolute positions. With
// docs/spec.md's bottom-right causal alignment the same code runs a prompt of Tn tokens over Tp cached ones
// (query i sees keys j <= i + Tp), so the full forward pass is the special case of an empty cache; a test
// checks the two give equal logits.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
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

// The most tokens one call generates: a long text, not an endless one (a negative count once wrapped to
// 2^64 - 1 and ran forever). xgrad-sample's --tokens and xgrad-train's --sample-tokens are checked against it.
constexpr std::size_t max_sampled_tokens = 1000000;

struct sampling_options
{
    std::size_t tokens = 200;  // how many to generate (at most max_sampled_tokens)
    double temperature = 1.0;  // 0: always the most likely token
    std::size_t top_k = 0;     // 0: every token competes
    std::uint64_t seed = 1;
};

// Fills `out` with the values of the parameter named `name` (docs/spec.md's name), as a checkpoint stores
// them: of its declared shape, matrices (in, out).
template <class T>
using parameter_source = std::function<void(const std::string& name, T* out)>;

// One sequence decoded one token at a time without allocating: every buffer (each layer's keys and values
// for block_size positions, one token's activations, the logits) is sized here, once. It computes
// gpt_decode's function for one new position (every variant; RoPE at the absolute position) in plain
// loops over raw rows; a test checks its logits against gpt_decode's. Its matrices are kept transposed,
// (out, in), in one buffer on transparent huge pages where the kernel grants them, so that each output
// is one dot product over a contiguous row and the weights stream from memory in one pass with few TLB
// misses (each measured at 1.7x the memory bandwidth of the (in, out) row updates and of 4 KiB pages,
// on an AMD EPYC VM, docs/performance.md); the outputs are split across num_threads() threads. The
// cache's memory is taken as positions fill it.
template <class T>
class decoder
{
public:
    // Holds `params`' handles, and lets go of each matrix's once it holds the transposed copy, emptying
    // the buffer pool of autodiff/memory.hpp each time (release_cached_buffers): a caller that moves its
    // only handles in (std::move) holds the model's memory once, plus one matrix; another one twice.
    explicit decoder(gpt_parameters<T> params);
    // The model of `config`, each parameter read once from `read`: a matrix into one scratch buffer (the
    // largest matrix's size) and from there transposed into place, the others into arrays of their own.
    // Loading a checkpoint so (io::checkpoint_reader, xgrad-sample) holds its parameters once, plus one
    // matrix, and never builds the model's arrays of them.
    decoder(const gpt_config& config, const parameter_source<T>& read);

    // Runs `token` at position length(), appends its keys and values to the cache, and returns the
    // logits of the next token (vocab_size values, valid until the next step or clear). Throws
    // std::invalid_argument naming "decoder" when the cache is full (length() = block_size) or the id is
    // outside [0, V).
    const T* step(std::int32_t token);
    std::size_t length() const { return length_; }
    void clear() { length_ = 0; }
    const gpt_config& config() const { return c_; }

private:
    // One block's weights as raw rows, matrices transposed to (out, in); a tensor the variant lacks is
    // null.
    struct layer_weights
    {
        const T *ln_1_weight, *ln_1_bias, *ln_2_weight, *ln_2_bias;
        const T *W_Q, *W_K, *W_V, *W_O, *b_Q, *b_K, *b_V, *b_O;
        const T *W_in, *b_in, *W_gate, *b_gate, *W_out,
            *b_out;  // W_in: W_fc or W_up; W_out: W_proj or W_down
    };
    decoder(gpt_parameters<T> params, const parameter_source<T>* read);
    const T* keep_transposed(const T* matrix, std::size_t rows, std::size_t columns);
    void bind_layers(const std::map<const parameter<T>*, const T*>& transposed);
    void append_key(std::size_t layer, std::size_t pos);
    void attend(std::size_t layer);
    void feed_forward(const layer_weights& w);

    gpt_parameters<T> params_;  // the embeddings, norms and biases (matrices released)
    const gpt_config c_;
    std::size_t d_, dh_, kv_dim_, hidden_, length_ = 0;
    struct free_memory
    {
        void operator()(T* p) const;
    };
    std::unique_ptr<T, free_memory> transposed_;  // every matrix, (out, in), on huge pages when granted
    std::size_t filled_ = 0;                      // values of transposed_ written
    std::vector<layer_weights> layers_;
    const T* head_ = nullptr;  // (V, d): wte, or lm_head transposed
    std::vector<T> zeros_;     // a missing bias
    std::vector<T> x_, xn_, q_, k_, heads_, out_, hidden_a_, hidden_b_, scores_, logits_;
    std::vector<T> rope_cos_, rope_sin_;  // (block_size, dh / 2) when position = rope
    // The cache, untouched until written. Values (L, block_size, G dh); keys transposed in tiles of
    // key_tile positions, (L, key_tiles_, G dh, key_tile) with key_tiles_ = block_size / key_tile rounded
    // up, so that one head's scores over a tile are dh multiply-adds of whole batches; each tile is zeroed
    // when its first position is written. scores_ holds, per head, the scores of every tile attend()
    // reads (block_size + key_tile entries apart), the first at the tile's first position.
    std::size_t key_tiles_;
    std::unique_ptr<T[]> keys_, values_;
};

// Draws token ids from logits as draw_token does, with its scratch buffers sized once for `vocab` ids.
class token_sampler
{
public:
    token_sampler(std::size_t vocab, double temperature, std::size_t top_k, std::uint64_t seed);
    template <class T>
    std::int32_t draw(const T* logits);

private:
    double temperature_;
    std::size_t top_k_;
    std::mt19937_64 rng_;
    std::vector<std::uint32_t> order_;
    std::vector<double> weights_;
};

// Continues `prompt` (at least one id) by options.tokens ids, one sequence, through a decoder. When the
// context reaches block_size it keeps the last block_size / 2 tokens, refills the cache from them and goes
// on.
template <class T>
std::vector<std::int32_t> sample(const gpt_parameters<T>& params, const std::vector<std::int32_t>& prompt,
                                 const sampling_options& options);
// The same through `model` (its cache cleared first): xgrad-sample moves its only copy of the model in.
template <class T>
std::vector<std::int32_t> sample(decoder<T>& model, const std::vector<std::int32_t>& prompt,
                                 const sampling_options& options);

// Draws one id from logits (V,) divided by the temperature, among the top_k largest (all when 0): the
// largest at temperature 0, else id i with probability exp(l_i / temperature) / sum_j exp(l_j / temperature)
// over the candidates, walked in decreasing order of their logits when top_k < V and in id order when not.
std::int32_t draw_token(const std::vector<double>& logits, double temperature, std::size_t top_k,
                        std::mt19937_64& rng);
}  // namespace xgrad::models
