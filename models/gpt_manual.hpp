// The whole GPT (docs/spec.md, "The small GPT" and "Architecture variants") with its backward derived by
// hand, on plain arrays, no tape: the hand-derived twin of models/gpt.hpp for every variant, written
// llm.c-style. Each layer is a *_forward / *_backward pair (here and in models/manual_layers.hpp), and every
// line of a backward says which forward line it reverses. It shares no code with the ops' backward rules
// (only the GEMM for products, and the per-head attention of mha_manual.hpp), so that agreeing with the
// tape to rounding is evidence, not a tautology. The parameters are the module layer's (gpt_parameters'
// visit): no list of names here.
//
//   auto f = manual::gpt_forward(params, tokens, &targets);   // f.logits, f.loss, f.cache
//   auto g = manual::gpt_backward(f.cache);                    // g.of("blocks.0.attn.W_Q"), g.of("embed")
//
// gpt_backward takes its rules from a table (backward_rules) that a fault hook may change at one site, for
// teaching: models/manual_faults.hpp holds the deliberate mistakes, models/divergence.hpp finds the first
// gradient, in backward order, that no longer matches the tape.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/gpt.hpp"
#include "models/manual_layers.hpp"

namespace xgrad::models::manual
{
// ---- the layers of the default model: each forward beside the backward that reverses it --------------
// Activations are (B, T, C): every row of C numbers is one position of one sequence.

// out[b, t] = wte[tokens[b, t]] (+ wpe[t] when wpe is given)                            (B, T, d)
template <class T>
array<T> encoder_forward(const array<T>& wte, const array<T>* wpe, const ids_t& tokens);
// d wte[tokens[b, t]] += d out[b, t] (a scatter-add: a repeated token sums), d wpe[t] += sum_b d out[b, t].
// Adds into d_wte and *d_wpe (when given), of wte's and wpe's shapes (d_wte may already hold the head's part).
template <class T>
void encoder_backward(array<T>& d_wte, array<T>* d_wpe, const array<T>& d_out, const ids_t& tokens);

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise.
template <class T>
array<T> gelu_forward(const array<T>& x);
template <class T>
array<T> gelu_backward(const array<T>& d_y, const array<T>& x);

// out = x + branch(x).
template <class T>
array<T> residual_forward(const array<T>& x, const array<T>& branch);
// The branch receives d out unchanged; x feeds both the skip and the branch, so
// d x = d out (the skip) + d_x_through_branch (what the branch's backward returned).
template <class T>
array<T> residual_backward(const array<T>& d_out, const array<T>& d_x_through_branch);

// logits = x @ wte^T: the output head tied to the token embedding. x (B, T, d), wte (V, d).
template <class T>
array<T> tied_head_forward(const array<T>& x, const array<T>& wte);
// d x = d logits @ wte; d wte += d logits^T @ x (added: the encoder adds its part too).
template <class T>
array<T> tied_head_backward(const array<T>& d_logits, const array<T>& x, const array<T>& wte, array<T>& d_wte);

// What the loss's backward needs.
template <class T>
struct cross_entropy_cache
{
    array<T> probs;  // softmax(logits) over the last axis, (B, T, V)
    ids_t targets;   // (B, T), -1 = ignored
    std::size_t kept = 0;  // positions whose target is not -1
};
// loss = mean over kept positions of -log softmax(logits)[target]; 0 when every target is -1.
template <class T>
T softmax_cross_entropy_forward(const array<T>& logits, const ids_t& targets, cross_entropy_cache<T>& cache);
// d logits = (softmax - one_hot(target)) / kept on kept rows, 0 on ignored rows (0 everywhere if none kept).
template <class T>
array<T> softmax_cross_entropy_backward(const cross_entropy_cache<T>& cache);

// ---- the whole model ------------------------------------------------------------------------------

// The norm of a block or of ln_f, LayerNorm or RMSNorm as the config says (one of the two caches is used).
template <class T>
struct norm_cache
{
    layernorm_cache<T> layer;
    rmsnorm_cache<T> rms;
};

template <class T>
struct block_cache
{
    norm_cache<T> ln_1;
    array<T> ln_1_out;     // input of the attention
    attention_cache<T> attn;
    norm_cache<T> ln_2;
    array<T> ln_2_out;     // input of the MLP
    array<T> hidden;       // gelu: ln_2 @ W_fc + b_fc (mlp_hidden); swiglu: ln_2 @ W_gate + b_gate (mlp_gate)
    array<T> up;           // swiglu: ln_2 @ W_up + b_up (mlp_up)
    array<T> activated;    // GELU(hidden) (mlp_gelu) or silu(hidden) * up (mlp_swiglu): input of W_proj, W_down
};

// Everything gpt_backward needs. It holds handles to the parameters (sharing their storage): do not
// change the parameters between a forward and its backward.
template <class T>
struct gpt_cache
{
    gpt_parameters<T> params;
    ids_t tokens;
    std::vector<block_cache<T>> blocks;
    norm_cache<T> ln_f;
    array<T> ln_f_out;     // input of the head
    std::optional<cross_entropy_cache<T>> loss;  // empty when the forward had no targets
};

template <class T>
struct gpt_forward_result
{
    array<T> logits;  // (B, T, V)
    T loss = 0;       // 0 when no targets were given (see has_loss)
    bool has_loss = false;
    // The values of models/gpt.hpp's named activations, in forward order ("embed", "blocks.0.ln_1", ...).
    std::vector<std::pair<std::string, array<T>>> activations;
    gpt_cache<T> cache;
};

// tokens (B, T) with B >= 1, 1 <= T <= block_size, ids in [0, V); targets (B, T) in [0, V) or -1, or
// nullptr. Throws std::invalid_argument naming "gpt_forward": a bad configuration, a missing parameter or
// one of the wrong shape, a bad token or target shape or id.
template <class T>
gpt_forward_result<T> gpt_forward(const gpt_parameters<T>& params, const ids_t& tokens,
                                  const ids_t* targets = nullptr);

// The rules gpt_backward calls, as a table; the default holds the correct ones.
template <class T>
struct backward_rules
{
    array<T> (*cross_entropy)(const cross_entropy_cache<T>&) = softmax_cross_entropy_backward<T>;
    array<T> (*tied_head)(const array<T>&, const array<T>&, const array<T>&, array<T>&) = tied_head_backward<T>;
    linear_gradients<T> (*linear)(const array<T>&, const array<T>&, const array<T>&, bool) = linear_backward<T>;
    layernorm_gradients<T> (*layer_norm)(const array<T>&, const layernorm_cache<T>&, const array<T>&) =
        layernorm_backward<T>;
    rmsnorm_gradients<T> (*rms_norm)(const array<T>&, const rmsnorm_cache<T>&, const array<T>&) =
        rmsnorm_backward<T>;
    array<T> (*residual)(const array<T>&, const array<T>&) = residual_backward<T>;
    array<T> (*gelu_tanh)(const array<T>&, const array<T>&) = gelu_backward<T>;
    array<T> (*gelu_exact)(const array<T>&, const array<T>&) = gelu_exact_backward<T>;
    swiglu_gradients<T> (*swiglu)(const array<T>&, const array<T>&, const array<T>&) = swiglu_backward<T>;
    attention_gradients<T> (*attention)(const array<T>&, const attention_cache<T>&, const attention_weights<T>&,
                                        const attention_rules<T>&) = causal_self_attention_backward<T>;
    attention_rules<T> attention_parts;  // the attention's rope and bias rules
    void (*encoder)(array<T>&, array<T>*, const array<T>&, const ids_t&) = encoder_backward<T>;
};

// Called by gpt_backward before each step with the step's site and a fresh table of the correct rules,
// which it may change. Sites, in backward order: "loss", "head", "ln_f", then per block i with
// p = "blocks.{i}.": p + "res_2", p + "mlp.out" (W_proj or W_down), p + "mlp_act" (GELU or SwiGLU),
// p + "mlp.in" (W_fc, or W_gate and W_up), p + "ln_2", p + "res_1", p + "attn", p + "ln_1"; and "embed".
template <class T>
using fault_hook = std::function<void(const std::string& site, backward_rules<T>& rules)>;

// The gradient of the loss for every named activation and every parameter, all in one list in the order
// the backward pass completes them (gpt_backward_order).
template <class T>
struct gpt_gradients
{
    gpt_config config;
    std::vector<std::pair<std::string, array<T>>> in_backward_order;

    // The gradient named `name` (an activation of models/gpt.hpp or a parameter's name); throws
    // std::out_of_range naming it when there is none.
    const array<T>& of(const std::string& name) const;
    // The parameters' gradients only, in the checkpoint's order.
    std::vector<std::pair<std::string, array<T>>> parameters() const;
};

// Reverses gpt_forward. Throws std::invalid_argument naming "gpt_backward" if the forward had no targets.
template <class T>
gpt_gradients<T> gpt_backward(const gpt_cache<T>& cache, const fault_hook<T>& hook = {});

// ---- names -------------------------------------------------------------------------------------------

// The parameters' names in the checkpoint's order (the module layer's walk).
std::vector<std::string> gpt_parameter_names(const gpt_config& config);
// models/gpt.hpp's named activations in forward order: embed, blocks.0.ln_1, ..., ln_f, logits. Read from
// the twin's forward on the smallest model of the config's variant and layers (the names depend on nothing
// else), so the list is stated once, by the forward itself.
std::vector<std::string> gpt_activation_names(const gpt_config& config);
// Every activation and parameter in the order the backward pass completes its gradient, read likewise from
// the twin's backward; parameters are named by the model's declaration (models/gpt.hpp). For the variants
// so far (tests/test_gpt_manual.cpp pins it):
//   logits, [lm_head], ln_f, blocks.{L-1}.res_2, ln_f.weight, [ln_f.bias],
//   then per block i from L-1 down to 0:
//     mlp, then gelu: mlp_gelu, mlp.W_proj, [mlp.b_proj], mlp_hidden, ln_2, mlp.W_fc, [mlp.b_fc]
//              or swiglu: mlp_swiglu, mlp.W_down, [mlp.b_down], mlp_gate, mlp_up, ln_2, mlp.W_gate,
//              [mlp.b_gate], mlp.W_up, [mlp.b_up];
//     res_1, ln_2.weight, [ln_2.bias], attn, ln_1, attn.W_Q, [attn.b_Q], attn.W_K, [attn.b_K], attn.W_V,
//     [attn.b_V], attn.W_O, [attn.b_O], <block i-1's res_2 or embed>, ln_1.weight, [ln_1.bias],
//   then wte (complete only now when the head is tied) and [wpe]. [x]: when the variant has x.
// The activations alone appear in exactly the reverse of their forward order.
std::vector<std::string> gpt_backward_order(const gpt_config& config);

// Every parameter of `params` under its name, in the checkpoint's order (handles sharing storage).
template <class T>
std::vector<std::pair<std::string, parameter<T>>> named_parameters(const gpt_parameters<T>& params);
}  // namespace xgrad::models::manual
