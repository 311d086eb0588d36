// A small GPT (docs/spec.md, "The small GPT" and "Architecture variants"): GPT-2 layout, pre-norm,
// grouped-query heads optional, and the variants as named fields of its config. Composed from the ops and
// the layers of models/layers.hpp; the hand-derived twin of the default model is models/gpt_manual.hpp.
//
//   x = wte[tokens] (+ wpe[0 .. T-1] when position = learned)
//   for each layer i:
//       x = x + MHA_i(N(x; ln_1))                 causal (within the window); QK-norm, RoPE on Q and K
//       x = x + MLP_i(N(x; ln_2))                 GELU (tanh or exact), relu^2 or SwiGLU
//   logits = N(x; ln_f) @ wte^T                   or @ lm_head when the head is untied
//   logits = c tanh(logits / c)                   when logit_softcap c > 0
// N is LayerNorm or RMSNorm; biases exist as `bias` says.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

#include "models/gpt_config.hpp"
#include "models/mha.hpp"
#include "models/module.hpp"

namespace xgrad::models
{
// One transformer block's parameters, named as the checkpoint names them ("blocks.{i}.ln_1.weight", ...).
// A parameter the variant does not have stays an empty handle and is not visited.
template <class T>
struct gpt_block_parameters
{
    parameter<T> ln_1_weight, ln_1_bias;   // (d,)
    parameter<T> W_Q, W_K, W_V, W_O;       // (d, d), (d, G dh), (d, G dh), (d, d)
    parameter<T> b_Q, b_K, b_V, b_O;       // bias = all: (d,), (G dh,), (G dh,), (d,)
    parameter<T> ln_2_weight, ln_2_bias;   // (d,)
    parameter<T> W_fc, b_fc;               // (d, h), (h,)        gelu_tanh, gelu, relu2
    parameter<T> W_proj, b_proj;           // (h, d), (d,)
    parameter<T> W_gate, b_gate;           // (d, h), (h,)        swiglu
    parameter<T> W_up, b_up;               // (d, h), (h,)
    parameter<T> W_down, b_down;           // (h, d), (d,)

    // The block's parameters in the checkpoint's order, each once, as the config declares them:
    // f(name after "blocks.{i}.", member, declaration). A function of the config alone: nothing is allocated.
    template <class F>
    static void declare(const gpt_config& c, F&& f);
    // f(prefix + name, parameter, declaration) for each of them; `prefix` is block_prefix(i).
    template <class F>
    void visit(const std::string& prefix, const gpt_config& c, F&& f)
    {
        declare(c, [&](const std::string& name, parameter<T> gpt_block_parameters::*member, const declaration& d) {
            f(prefix + name, this->*member, d);
        });
    }
};

// "blocks.{i}.": the prefix of block i's parameter and activation names.
std::string block_prefix(std::size_t i);

template <class T>
struct gpt_parameters
{
    gpt_config config;
    parameter<T> wte;  // (V, d), also the output head when tied
    parameter<T> wpe;  // (block_size, d), position = learned
    std::vector<gpt_block_parameters<T>> blocks;
    parameter<T> ln_f_weight, ln_f_bias;  // (d,)
    parameter<T> lm_head;                 // (d, V), tied_head = false

    // A model of this config with every parameter declared but none allocated (empty handles).
    static gpt_parameters declare(const gpt_config& config);
    // The parameters before the blocks (wte, wpe) and after them (ln_f, lm_head), as the config declares
    // them: f(name, member, declaration). Nothing is allocated.
    template <class F>
    static void declare_embedding(const gpt_config& c, F&& f);
    template <class F>
    static void declare_head(const gpt_config& c, F&& f);

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
// gelu_tanh, gelu and relu2:
//   "blocks.{i}.mlp_hidden"                  ln_2 @ W_fc + b_fc, before GELU         (B, T, h)
//                                            (not with options.every_activation false: no node of its own)
//   "blocks.{i}.mlp_gelu", "...mlp_relu2"    after GELU, after relu^2                (B, T, h)
// swiglu:
//   "blocks.{i}.mlp_gate"                    ln_2 @ W_gate + b_gate                  (B, T, h)
//   "blocks.{i}.mlp_up"                      ln_2 @ W_up + b_up                      (B, T, h)
//   "blocks.{i}.mlp_swiglu"                  silu(mlp_gate) * mlp_up                 (B, T, h)
// all:
//   "blocks.{i}.mlp"                         @ W_proj + b_proj (or W_down, b_down)   (B, T, d)
//   "blocks.{i}.res_2"                       x after the MLP residual                (B, T, d)
//   "ln_f", "logits"                                                                 (B, T, d), (B, T, V)
// With RoPE the attention's Q and K are rotated inside "blocks.{i}.attn" (labelled "Q_rope", "K_rope"
// on the tape), with qk_norm normalised there ("Q_norm", "K_norm"); "logits" are after the soft cap when
// logit_softcap > 0; with dropout the activations are the values after it.
// The name, after "blocks.{i}.", of the MLP's activated hidden values: mlp_gelu (gelu_tanh, gelu),
// mlp_relu2 or mlp_swiglu.
const char* mlp_activation_name(mlp_kind kind);

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
void gpt_block_parameters<T>::declare(const gpt_config& c, F&& f)
{
    using B = gpt_block_parameters;
    const std::size_t d = c.d_model, kv = c.attention().kv_width(), h = c.hidden_width();
    const double w = gpt_weight_std(), r = gpt_residual_std(c);
    const std::string hf = c.mlp_hidden ? "h" : "4d";
    // A norm's weight, and its bias when the variant has one.
    auto norm = [&](const std::string& name, parameter<T> B::*weight, parameter<T> B::*bias) {
        f(name + ".weight", weight, declare::ones({d}, "(d)"));
        if (c.norm_has_bias())
        {
            f(name + ".bias", bias, declare::zeros({d}, "(d)"));
        }
    };
    // A weight (rows, cols) with its bias right after it when `has_bias`.
    auto linear = [&](const std::string& weight_name, parameter<T> B::*weight, const std::string& bias_name,
                      parameter<T> B::*bias, bool has_bias, std::size_t rows, std::size_t cols, double std_dev,
                      const std::string& rows_formula, const std::string& cols_formula) {
        f(weight_name, weight, declare::normal({rows, cols}, std_dev, "(" + rows_formula + ", " + cols_formula + ")"));
        if (has_bias)
        {
            f(bias_name, bias, declare::zeros({cols}, "(" + cols_formula + ")"));
        }
    };
    norm("ln_1", &B::ln_1_weight, &B::ln_1_bias);
    const bool ab = c.attention_has_bias();
    linear("attn.W_Q", &B::W_Q, "attn.b_Q", &B::b_Q, ab, d, d, w, "d", "d");
    linear("attn.W_K", &B::W_K, "attn.b_K", &B::b_K, ab, d, kv, w, "d", "G*dh");
    linear("attn.W_V", &B::W_V, "attn.b_V", &B::b_V, ab, d, kv, w, "d", "G*dh");
    linear("attn.W_O", &B::W_O, "attn.b_O", &B::b_O, ab, d, d, r, "d", "d");
    norm("ln_2", &B::ln_2_weight, &B::ln_2_bias);
    const bool mb = c.mlp_has_bias();
    switch (c.mlp)
    {
    case mlp_kind::swiglu:
        linear("mlp.W_gate", &B::W_gate, "mlp.b_gate", &B::b_gate, mb, d, h, w, "d", hf);
        linear("mlp.W_up", &B::W_up, "mlp.b_up", &B::b_up, mb, d, h, w, "d", hf);
        linear("mlp.W_down", &B::W_down, "mlp.b_down", &B::b_down, mb, h, d, r, hf, "d");
        return;
    case mlp_kind::gelu_tanh:
    case mlp_kind::gelu:
    case mlp_kind::relu2:
        linear("mlp.W_fc", &B::W_fc, "mlp.b_fc", &B::b_fc, mb, d, h, w, "d", hf);
        linear("mlp.W_proj", &B::W_proj, "mlp.b_proj", &B::b_proj, mb, h, d, r, hf, "d");
        return;
    }
}

template <class T>
template <class F>
void gpt_parameters<T>::declare_embedding(const gpt_config& c, F&& f)
{
    const double w = gpt_weight_std();
    f("wte", &gpt_parameters::wte, declare::normal({c.vocab_size, c.d_model}, w, "(V, d)", parameter_role::embedding));
    if (c.position == position_kind::learned)
    {
        f("wpe", &gpt_parameters::wpe,
          declare::normal({c.block_size, c.d_model}, w, "(block_size, d)", parameter_role::embedding));
    }
}

template <class T>
template <class F>
void gpt_parameters<T>::declare_head(const gpt_config& c, F&& f)
{
    f("ln_f.weight", &gpt_parameters::ln_f_weight, declare::ones({c.d_model}, "(d)"));
    if (c.norm_has_bias())
    {
        f("ln_f.bias", &gpt_parameters::ln_f_bias, declare::zeros({c.d_model}, "(d)"));
    }
    if (!c.tied_head)
    {
        f("lm_head", &gpt_parameters::lm_head,
          declare::normal({c.d_model, c.vocab_size}, gpt_weight_std(), "(d, V)", parameter_role::head));
    }
}

template <class T>
template <class F>
void gpt_parameters<T>::visit(F&& f)
{
    auto bound = [&](const std::string& name, parameter<T> gpt_parameters::*member, const declaration& d) {
        f(name, this->*member, d);
    };
    declare_embedding(config, bound);
    for (std::size_t i = 0; i < blocks.size(); ++i)
    {
        blocks[i].visit(block_prefix(i), config, f);
    }
    declare_head(config, bound);
}

// Every parameter of the model a config describes, in the checkpoint's order: f(name, declaration).
// A function of the config alone (nothing is allocated), walking the same declarations as visit.
template <class F>
void for_each_gpt_parameter(const gpt_config& c, F&& f)
{
    auto named = [&f](const std::string& prefix) {
        return [&f, prefix](const std::string& name, auto, const declaration& d) { f(prefix + name, d); };
    };
    gpt_parameters<float>::declare_embedding(c, named(""));
    for (std::size_t i = 0; i < c.layers; ++i)
    {
        gpt_block_parameters<float>::declare(c, named(block_prefix(i)));
    }
    gpt_parameters<float>::declare_head(c, named(""));
}

// Every parameter's name and shape, as the variant `c` declares them (for_each_gpt_parameter's walk).
std::map<std::string, shape_t> gpt_tensor_shapes(const gpt_config& c);

// The model of a checkpoint trained as `trained`, run as another variant on the same tensors: `values` (key
// -> text) are the later variants' values that xgrad-sample's and xgrad-gpt-npy's flags chose (--qk-norm,
// --mlp, --logit-softcap, --attention-window; docs/spec.md, "More architecture variants"). A value whose
// model declares other tensors than the checkpoint's (an --mlp of SwiGLU's three matrices for a GELU
// model) throws std::invalid_argument naming the key and both values.
gpt_config run_as(const gpt_config& trained, const std::map<std::string, std::string>& values);

// Counts that saturate at UINT64_MAX instead of wrapping (a hostile file's metadata may ask for 2^70).
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b);
std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b);
// A saturating count in words: "over 18446744073709551615" for UINT64_MAX, else the number.
std::string saturated_count_text(std::uint64_t n);
// The number of values of a declared shape, saturating.
std::uint64_t declared_values(const declaration& d);

// The parameters a config declares, counted per block and outside the blocks (saturating): what the
// parameter count, the checkpoint limits and the memory estimate multiply by L. Needs no valid config.
struct gpt_value_count
{
    std::uint64_t per_block = 0, outside_blocks = 0;
    std::uint64_t tensors_per_block = 0, tensors_outside_blocks = 0;
};
gpt_value_count gpt_values(const gpt_config& c);

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
