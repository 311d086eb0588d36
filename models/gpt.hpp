// A small GPT (../shared/SPEC.md, "The small GPT"): GPT-2 layout, pre-LayerNorm, learned positions, the
// head tied to the token embedding, optional grouped-query heads. Composed from the ops and the layers
// of models/layers.hpp; its hand-derived twin is models/gpt_manual.hpp.
//
//   x = wte[tokens] + wpe[0 .. T-1]
//   for each layer i:
//       x = x + MHA_i(LN(x; ln_1))                         causal, no biases
//       x = x + GELU(LN(x; ln_2) @ W_fc + b_fc) @ W_proj + b_proj
//   logits = LN(x; ln_f) @ wte^T
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/mha.hpp"

namespace xgrad::models
{
struct gpt_config
{
    std::size_t vocab_size = 0;  // V
    std::size_t block_size = 0;  // the longest T
    std::size_t layers = 0;      // L
    std::size_t d_model = 0;     // d
    std::size_t heads = 1;       // H
    std::size_t kv_heads = 0;    // G; 0 means G = H

    mha_config attention() const { return {d_model, heads, kv_heads}; }
    std::size_t kv_head_count() const { return kv_heads ? kv_heads : heads; }
    // Throws std::invalid_argument naming `op`: any size zero, d % H != 0, H % G != 0.
    void validate(const char* op) const;
};

// One transformer block's parameters, named as SPEC's checkpoint names them ("blocks.{i}.ln_1.weight", ...).
template <class T>
struct gpt_block_parameters
{
    parameter<T> ln_1_weight, ln_1_bias;   // (d,)
    parameter<T> W_Q, W_K, W_V, W_O;       // (d, d), (d, G dh), (d, G dh), (d, d)
    parameter<T> ln_2_weight, ln_2_bias;   // (d,)
    parameter<T> W_fc, b_fc;               // (d, 4d), (4d,)
    parameter<T> W_proj, b_proj;           // (4d, d), (d,)
};

template <class T>
struct gpt_parameters
{
    gpt_config config;
    parameter<T> wte;  // (V, d), also the output head (tied)
    parameter<T> wpe;  // (block_size, d)
    std::vector<gpt_block_parameters<T>> blocks;
    parameter<T> ln_f_weight, ln_f_bias;  // (d,)

    // GPT-2 initialisation, seeded: weights N(0, 0.02), the residual projections W_O and W_proj
    // N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm weights 1 and biases 0.
    static gpt_parameters init(const gpt_config& config, std::uint64_t seed);

    // Every parameter in SPEC's table order (wte, wpe, blocks.0.ln_1.weight, ..., ln_f.bias). The
    // handles share storage with this model; each carries its SPEC name in parameter::name(). One walk
    // serves the optimiser, the checkpoint and the tools.
    std::vector<parameter<T>> named_parameters() const;
    void zero_grad();
};

struct gpt_options
{
    bool fused = true;  // fused layer_norm / gelu / attention / cross_entropy ops; false: composed from primitives
};

// The forward pass recorded on a tape. `activations` lists the named intermediate values in forward
// order, labelled on the tape too; gradients of these are what first_divergence compares:
//   "embed"                                  wte[tokens] + wpe                       (B, T, d)
//   "blocks.{i}.ln_1", "blocks.{i}.attn"     LN output, MHA output (after W_O)       (B, T, d)
//   "blocks.{i}.res_1"                       x after the attention residual          (B, T, d)
//   "blocks.{i}.ln_2"                        LN output                               (B, T, d)
//   "blocks.{i}.mlp_hidden"                  ln_2 @ W_fc + b_fc, before GELU         (B, T, 4d)
//   "blocks.{i}.mlp_gelu"                    after GELU                              (B, T, 4d)
//   "blocks.{i}.mlp"                         @ W_proj + b_proj                       (B, T, d)
//   "blocks.{i}.res_2"                       x after the MLP residual                (B, T, d)
//   "ln_f", "logits"                                                                 (B, T, d), (B, T, V)
template <class T>
struct gpt_result
{
    var<T> logits;  // (B, T, V)
    var<T> loss;    // scalar; invalid (var::valid() false) when no targets were given
    std::vector<std::pair<std::string, var<T>>> activations;
};

// tokens (B, T) with 1 <= T <= block_size and ids in [0, V); targets (B, T) in [0, V) or -1, or nullptr.
// Throws std::invalid_argument naming "gpt_forward" and the bad shape or id.
template <class T>
gpt_result<T> gpt_forward(tape<T>& t, const gpt_parameters<T>& params, const ids_t& tokens,
                          const ids_t* targets = nullptr, const gpt_options& options = {});

// ---- counting (Exercise 20.3 for the whole model), in multiply-adds; FLOPs are twice this ----

// V d + block_size d + L (2 d^2 + 2 d G dh + 8 d^2 + 9 d) + 2 d.
std::uint64_t gpt_parameter_count(const gpt_config& config);

// Forward multiply-adds for a batch of B sequences of length T, split as the formulas count them.
struct gpt_multiply_adds
{
    std::uint64_t projections;  // L B T (2 d^2 + 2 d G dh)            Q, K, V, O
    std::uint64_t mlp;          // L B T 8 d^2                          W_fc, W_proj
    std::uint64_t attention;    // L 2 B T^2 d                          scores and weights @ V (dense)
    std::uint64_t head;         // B T V d                              logits = LN(x) @ wte^T
    std::uint64_t total() const { return projections + mlp + attention + head; }
};
gpt_multiply_adds gpt_forward_multiply_adds(const gpt_config& config, std::size_t batch, std::size_t length);
}  // namespace xgrad::models
