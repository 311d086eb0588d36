// A small GPT (docs/spec.md, "The small GPT" and "Architecture variants"): GPT-2 layout, pre-norm,
// grouped-query heads optional, and the variants as named fields of its config. Composed from the ops and
// the layers of models/layers.hpp; the hand-derived twin of the default model is models/gpt_manual.hpp.
//
//   x = wte[tokens] (+ wpe[0 .. T-1] when position = learned)
//   for each layer i:
//       x = x + MHA_i(N(x; ln_1))                 causal; RoPE on Q and K when position = rope
//       x = x + MLP_i(N(x; ln_2))                 GELU (tanh or exact) or SwiGLU
//   logits = N(x; ln_f) @ wte^T                   or @ lm_head when the head is untied
// N is LayerNorm or RMSNorm; biases exist as `bias` says.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

#include "models/mha.hpp"
#include "models/module.hpp"

namespace xgrad::models
{
// docs/spec.md, "Architecture variants": each a named field, each value a name.
enum class norm_kind
{
    layernorm,  // (x - mean) / sqrt(var + 1e-5) * weight + bias
    rmsnorm,    // x / sqrt(mean(x^2) + 1e-5) * weight
};
enum class position_kind
{
    learned,  // wpe added to the token embedding
    rope,     // rotary embedding of every query and key head
    none,     // only the causal mask
};
enum class mlp_kind
{
    gelu_tanh,  // GELU, tanh approximation (GPT-2)
    gelu,       // exact GELU, 0.5 x (1 + erf(x / sqrt 2))
    swiglu,     // (silu(x W_gate + b_gate) * (x W_up + b_up)) W_down + b_down
};
enum class bias_kind
{
    mlp,   // the norms' and the MLP's biases
    all,   // also b_Q, b_K, b_V, b_O
    none,  // none at all, the norms' included
};

struct gpt_config
{
    std::size_t vocab_size = 0;  // V
    std::size_t block_size = 0;  // the longest T
    std::size_t layers = 0;      // L
    std::size_t d_model = 0;     // d
    std::size_t heads = 1;       // H
    std::size_t kv_heads = 0;    // G; 0 means G = H

    norm_kind norm = norm_kind::layernorm;
    position_kind position = position_kind::learned;
    double rope_base = 10000;    // b of the rotary frequencies t * b^(-2i/dh)
    mlp_kind mlp = mlp_kind::gelu_tanh;
    std::size_t mlp_hidden = 0;  // h; 0 means 4 d
    bias_kind bias = bias_kind::mlp;
    bool tied_head = true;       // logits = N(x) wte^T; false: N(x) lm_head

    mha_config attention() const { return {d_model, heads, kv_heads}; }
    std::size_t kv_head_count() const { return kv_heads ? kv_heads : heads; }
    std::size_t hidden_width() const { return mlp_hidden ? mlp_hidden : 4 * d_model; }
    bool norm_has_bias() const { return norm == norm_kind::layernorm && bias != bias_kind::none; }
    bool mlp_has_bias() const { return bias != bias_kind::none; }
    bool attention_has_bias() const { return bias == bias_kind::all; }
    // Throws std::invalid_argument naming `op`: any size zero, d % H != 0, H % G != 0, dh odd with RoPE,
    // a rope_base that is not a positive finite number.
    void validate(const char* op) const;
};

// A variant value that is not allowed: what() is "'key' = 'value' is not one of a, b, c".
struct variant_error : std::invalid_argument
{
    variant_error(std::string key, std::string value, std::string allowed);
    std::string key, value, allowed;  // allowed: "layernorm, rmsnorm" or "a positive decimal integer"
};

// The variant's checkpoint metadata: every key of docs/spec.md's table with its value as a string.
std::map<std::string, std::string> variant_metadata(const gpt_config& config);
// The variant that metadata describes, on top of `config`'s sizes: absent keys keep the default. An
// unknown key value throws variant_error naming the key and the values allowed.
gpt_config with_variant_metadata(gpt_config config, const std::map<std::string, std::string>& metadata);
// The metadata keys of the variants, in docs/spec.md's order.
extern const char* const variant_keys[7];
// Names of the enum values as the metadata and the command-line flags spell them.
const char* name_of(norm_kind v);
const char* name_of(position_kind v);
const char* name_of(mlp_kind v);
const char* name_of(bias_kind v);
// Parse a value's name; throws variant_error naming `key` and the values allowed.
norm_kind parse_norm(const std::string& key, const std::string& text);
position_kind parse_position(const std::string& key, const std::string& text);
mlp_kind parse_mlp(const std::string& key, const std::string& text);
bias_kind parse_bias(const std::string& key, const std::string& text);

// One transformer block's parameters, named as the checkpoint names them ("blocks.{i}.ln_1.weight", ...).
// A parameter the variant does not have stays an empty handle and is not visited.
template <class T>
struct gpt_block_parameters
{
    parameter<T> ln_1_weight, ln_1_bias;   // (d,)
    parameter<T> W_Q, W_K, W_V, W_O;       // (d, d), (d, G dh), (d, G dh), (d, d)
    parameter<T> b_Q, b_K, b_V, b_O;       // bias = all: (d,), (G dh,), (G dh,), (d,)
    parameter<T> ln_2_weight, ln_2_bias;   // (d,)
    parameter<T> W_fc, b_fc;               // (d, h), (h,)        gelu_tanh, gelu
    parameter<T> W_proj, b_proj;           // (h, d), (d,)
    parameter<T> W_gate, b_gate;           // (d, h), (h,)        swiglu
    parameter<T> W_up, b_up;               // (d, h), (h,)
    parameter<T> W_down, b_down;           // (h, d), (d,)

    // The block's parameters in the checkpoint's order, each once: `prefix` is "blocks.{i}.".
    template <class F>
    void visit(const std::string& prefix, const gpt_config& c, F&& f);
};

template <class T>
struct gpt_parameters
{
    gpt_config config;
    parameter<T> wte;  // (V, d), also the output head when tied
    parameter<T> wpe;  // (block_size, d), position = learned
    std::vector<gpt_block_parameters<T>> blocks;
    parameter<T> ln_f_weight, ln_f_bias;  // (d,)
    parameter<T> lm_head;                 // (d, V), tied_head = false

    // A model of this config with every parameter declared but none allocated (empty handles): what
    // `visit` needs to list names and shapes.
    static gpt_parameters declare(const gpt_config& config);

    // GPT-2 initialisation, seeded: weights N(0, 0.02), the residual projections W_O, W_proj, W_down
    // N(0, 0.02 / sqrt(2 L)), biases 0, norm weights 1. Drawn in visit order, so the default model of a
    // seed is the same whatever variant fields exist.
    static gpt_parameters init(const gpt_config& config, std::uint64_t seed);

    // Every parameter the variant has, once, in the checkpoint's order: wte, wpe, blocks.{i}.*, ln_f.*,
    // lm_head; f(name, parameter<T>&, declaration).
    template <class F>
    void visit(F&& f);

    // The handles share storage with this model; each carries its name in parameter::name().
    std::vector<parameter<T>> named_parameters() const { return models::named_parameters<T>(*this); }
    void zero_grad() { models::zero_grad(*this); }
};

// fused ops or composed ones, dropout with its generator (models/module.hpp).
using gpt_options = forward_options;

// The forward pass recorded on a tape. `activations` lists the named intermediate values in forward
// order, labelled on the tape too; gradients of these are what first_divergence compares:
//   "embed"                                  wte[tokens] (+ wpe)                     (B, T, d)
//   "blocks.{i}.ln_1", "blocks.{i}.attn"     norm output, MHA output (after W_O)     (B, T, d)
//   "blocks.{i}.res_1"                       x after the attention residual          (B, T, d)
//   "blocks.{i}.ln_2"                        norm output                             (B, T, d)
// gelu_tanh and gelu:
//   "blocks.{i}.mlp_hidden"                  ln_2 @ W_fc + b_fc, before GELU         (B, T, h)
//                                            (not with options.every_activation false: no node of its own)
//   "blocks.{i}.mlp_gelu"                    after GELU                              (B, T, h)
// swiglu:
//   "blocks.{i}.mlp_gate"                    ln_2 @ W_gate + b_gate                  (B, T, h)
//   "blocks.{i}.mlp_up"                      ln_2 @ W_up + b_up                      (B, T, h)
//   "blocks.{i}.mlp_swiglu"                  silu(mlp_gate) * mlp_up                 (B, T, h)
// all:
//   "blocks.{i}.mlp"                         @ W_proj + b_proj (or W_down, b_down)   (B, T, d)
//   "blocks.{i}.res_2"                       x after the MLP residual                (B, T, d)
//   "ln_f", "logits"                                                                 (B, T, d), (B, T, V)
// With RoPE the attention's Q and K are rotated inside "blocks.{i}.attn" (labelled "Q_rope", "K_rope"
// on the tape); with dropout the activations are the values after it.
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

// ---- the walk --------------------------------------------------------------------------------------

// Standard deviations of docs/spec.md's initialisation.
double gpt_weight_std();
double gpt_residual_std(const gpt_config& c);

template <class T>
template <class F>
void gpt_block_parameters<T>::visit(const std::string& prefix, const gpt_config& c, F&& f)
{
    const std::size_t d = c.d_model, kv = c.attention().kv_width(), h = c.hidden_width();
    const double w = gpt_weight_std(), r = gpt_residual_std(c);
    const std::string hf = c.mlp_hidden ? "h" : "4d";
    f(prefix + "ln_1.weight", ln_1_weight, declare::ones({d}, "(d)"));
    if (c.norm_has_bias())
    {
        f(prefix + "ln_1.bias", ln_1_bias, declare::zeros({d}, "(d)"));
    }
    const bool ab = c.attention_has_bias();
    f(prefix + "attn.W_Q", W_Q, declare::normal({d, d}, w, "(d, d)"));
    if (ab)
    {
        f(prefix + "attn.b_Q", b_Q, declare::zeros({d}, "(d)"));
    }
    f(prefix + "attn.W_K", W_K, declare::normal({d, kv}, w, "(d, G*dh)"));
    if (ab)
    {
        f(prefix + "attn.b_K", b_K, declare::zeros({kv}, "(G*dh)"));
    }
    f(prefix + "attn.W_V", W_V, declare::normal({d, kv}, w, "(d, G*dh)"));
    if (ab)
    {
        f(prefix + "attn.b_V", b_V, declare::zeros({kv}, "(G*dh)"));
    }
    f(prefix + "attn.W_O", W_O, declare::normal({d, d}, r, "(d, d)"));
    if (ab)
    {
        f(prefix + "attn.b_O", b_O, declare::zeros({d}, "(d)"));
    }
    f(prefix + "ln_2.weight", ln_2_weight, declare::ones({d}, "(d)"));
    if (c.norm_has_bias())
    {
        f(prefix + "ln_2.bias", ln_2_bias, declare::zeros({d}, "(d)"));
    }
    const bool mb = c.mlp_has_bias();
    // Each weight with its bias right after it: (name, weight, bias, rows, cols, std).
    auto linear = [&](const std::string& wn, parameter<T>& W, const std::string& bn, parameter<T>& b,
                      std::size_t rows, std::size_t cols, double std_dev, const std::string& formula,
                      const std::string& bias_formula) {
        f(prefix + "mlp." + wn, W, declare::normal({rows, cols}, std_dev, formula));
        if (mb)
        {
            f(prefix + "mlp." + bn, b, declare::zeros({cols}, bias_formula));
        }
    };
    if (c.mlp == mlp_kind::swiglu)
    {
        linear("W_gate", W_gate, "b_gate", b_gate, d, h, w, "(d, " + hf + ")", "(" + hf + ")");
        linear("W_up", W_up, "b_up", b_up, d, h, w, "(d, " + hf + ")", "(" + hf + ")");
        linear("W_down", W_down, "b_down", b_down, h, d, r, "(" + hf + ", d)", "(d)");
    }
    else
    {
        linear("W_fc", W_fc, "b_fc", b_fc, d, h, w, "(d, " + hf + ")", "(" + hf + ")");
        linear("W_proj", W_proj, "b_proj", b_proj, h, d, r, "(" + hf + ", d)", "(d)");
    }
}

template <class T>
template <class F>
void gpt_parameters<T>::visit(F&& f)
{
    const gpt_config& c = config;
    const double w = gpt_weight_std();
    f("wte", wte, declare::normal({c.vocab_size, c.d_model}, w, "(V, d)"));
    if (c.position == position_kind::learned)
    {
        f("wpe", wpe, declare::normal({c.block_size, c.d_model}, w, "(block_size, d)"));
    }
    for (std::size_t i = 0; i < blocks.size(); ++i)
    {
        blocks[i].visit("blocks." + std::to_string(i) + ".", c, f);
    }
    f("ln_f.weight", ln_f_weight, declare::ones({c.d_model}, "(d)"));
    if (c.norm_has_bias())
    {
        f("ln_f.bias", ln_f_bias, declare::zeros({c.d_model}, "(d)"));
    }
    if (!c.tied_head)
    {
        f("lm_head", lm_head, declare::normal({c.d_model, c.vocab_size}, w, "(d, V)"));
    }
}

// ---- counting (Exercise 20.3 for the whole model), in multiply-adds; FLOPs are twice this ----

// V d + block_size d + L (2 d^2 + 2 d G dh + 8 d^2 + 9 d) + 2 d for the default model; every variant
// counts the tensors it declares (wpe only when learned, h for 4d, 3 d h for SwiGLU, the biases it has,
// lm_head when untied).
std::uint64_t gpt_parameter_count(const gpt_config& config);

// Forward multiply-adds for a batch of B sequences of length T, split as the formulas count them.
struct gpt_multiply_adds
{
    std::uint64_t projections;  // L B T (2 d^2 + 2 d G dh)            Q, K, V, O
    std::uint64_t mlp;          // L B T 2 d h (SwiGLU: 3 d h)          W_fc, W_proj (W_gate, W_up, W_down)
    std::uint64_t attention;    // L 2 B T^2 d                          scores and weights @ V (dense)
    std::uint64_t head;         // B T V d                              logits = N(x) @ wte^T (or lm_head)
    std::uint64_t total() const { return projections + mlp + attention + head; }
};
gpt_multiply_adds gpt_forward_multiply_adds(const gpt_config& config, std::size_t batch, std::size_t length);
}  // namespace xgrad::models
