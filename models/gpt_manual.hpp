// The whole GPT (../shared/SPEC.md, "The small GPT") with its backward derived by hand, on plain arrays,
// no tape: the hand-derived twin of models/gpt.hpp, written llm.c-style. Each layer is a *_forward /
// *_backward pair, and every line of a backward says which forward line it reverses. It shares no code
// with the ops' backward rules (only the GEMM for products, and the hand-derived MHA of mha_manual.hpp),
// so that agreeing with the tape to rounding is evidence, not a tautology.
//
//   auto f = manual::gpt_forward(params, tokens, &targets);   // f.logits, f.loss, f.cache
//   auto g = manual::gpt_backward(f.cache);                    // g.of("blocks.0.attn.W_Q"), g.of("embed")
//
// gpt_backward can also break one rule on purpose (broken_rule), for teaching: models/divergence.hpp then
// finds the first gradient, in backward order, that no longer matches the tape.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/gpt.hpp"
#include "models/mha_manual.hpp"

namespace xgrad::models::manual
{
// ---- the layers: each forward beside the backward that reverses it ------------------------------------
// Activations are (B, T, C): every row of C numbers is one position of one sequence.

// out[b, t] = wte[tokens[b, t]] + wpe[t]                                               (B, T, d)
template <class T>
array<T> encoder_forward(const array<T>& wte, const array<T>& wpe, const ids_t& tokens);
// d wte[tokens[b, t]] += d out[b, t] (a scatter-add: a repeated token sums), d wpe[t] += sum_b d out[b, t].
// Adds into d_wte and d_wpe, which must be of wte's and wpe's shapes (d_wte may already hold the head's part).
// broken = true makes broken_rule::encoder's mistake (each backward below has such a flag, for teaching).
template <class T>
void encoder_backward(array<T>& d_wte, array<T>& d_wpe, const array<T>& d_out, const ids_t& tokens,
                      bool broken = false);

// What layernorm_backward needs: the normalised rows and 1 / sqrt(var + eps) per row.
template <class T>
struct layernorm_cache
{
    array<T> x_hat;  // (B, T, C)
    array<T> rstd;   // (B, T)
};

// y = (x - mean) / sqrt(var + 1e-5) * weight + bias over the last axis (var biased).
template <class T>
array<T> layernorm_forward(const array<T>& x, const array<T>& weight, const array<T>& bias, layernorm_cache<T>& cache);

template <class T>
struct layernorm_gradients
{
    array<T> x, weight, bias;
};
template <class T>
layernorm_gradients<T> layernorm_backward(const array<T>& d_y, const layernorm_cache<T>& cache, const array<T>& weight,
                                          bool broken = false);

// out = x @ W + b: x (B, T, C), W (C, OC), b (OC,).
template <class T>
array<T> matmul_bias_forward(const array<T>& x, const array<T>& w, const array<T>& b);

template <class T>
struct matmul_bias_gradients
{
    array<T> x, w, b;
};
template <class T>
matmul_bias_gradients<T> matmul_bias_backward(const array<T>& d_out, const array<T>& x, const array<T>& w,
                                              bool broken = false);

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise.
template <class T>
array<T> gelu_forward(const array<T>& x);
template <class T>
array<T> gelu_backward(const array<T>& d_y, const array<T>& x, bool broken = false);

// Causal self-attention: one X feeds the query, key and value projections of manual::mha_forward.
template <class T>
mha_forward_result<T> self_attention_forward(const array<T>& x, const gpt_block_parameters<T>& block,
                                             const mha_config& config);
template <class T>
struct self_attention_gradients
{
    array<T> x, w_q, w_k, w_v, w_o;
};
template <class T>
self_attention_gradients<T> self_attention_backward(const array<T>& d_out, const mha_cache<T>& cache,
                                                    bool broken = false);

// out = x + branch(x).
template <class T>
array<T> residual_forward(const array<T>& x, const array<T>& branch);
// The branch receives d out unchanged; x feeds both the skip and the branch, so
// d x = d out (the skip) + d_x_through_branch (what the branch's backward returned).
template <class T>
array<T> residual_backward(const array<T>& d_out, const array<T>& d_x_through_branch, bool broken = false);

// logits = x @ wte^T: the output head, tied to the token embedding. x (B, T, d), wte (V, d).
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
array<T> softmax_cross_entropy_backward(const cross_entropy_cache<T>& cache, bool broken = false);

// ---- the whole model ------------------------------------------------------------------------------

template <class T>
struct block_cache
{
    layernorm_cache<T> ln_1;
    array<T> ln_1_out;     // input of the attention
    mha_cache<T> attn;
    layernorm_cache<T> ln_2;
    array<T> ln_2_out;     // input of W_fc
    array<T> hidden;       // ln_2_out @ W_fc + b_fc, input of GELU
    array<T> gelu_out;     // input of W_proj
};

// Everything gpt_backward needs. It holds handles to the parameters (sharing their storage): do not
// change the parameters between a forward and its backward.
template <class T>
struct gpt_cache
{
    gpt_parameters<T> params;
    ids_t tokens;
    std::vector<block_cache<T>> blocks;
    layernorm_cache<T> ln_f;
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
// nullptr. Throws std::invalid_argument naming "gpt_forward": a bad configuration, a parameter of the
// wrong shape, a bad token or target shape or id.
template <class T>
gpt_forward_result<T> gpt_forward(const gpt_parameters<T>& params, const ids_t& tokens,
                                  const ids_t* targets = nullptr);

// Deliberate mistakes, one rule at a time, for teaching the first-divergence report. Each is a bug
// someone could really write, made in one place only: the last block for the per-block rules.
enum class broken_rule
{
    none,
    encoder,        // the wte scatter assigns instead of adding: repeated tokens and the head's part are lost
    layer_norm,     // last block's ln_2: d x forgets the  - x_hat * mean(d x_hat * x_hat)  term
    attention,      // last block: d x of self-attention forgets the key path (d Xq + d Xv only)
    residual,       // last block's attention residual: d x = the branch's part only, the skip forgotten
    matmul_bias,    // last block's W_fc: d x sums over the first d of the 4d outputs only (a loop bound)
    gelu,           // last block: d tanh-argument / dx uses 0.044715 x^2 where 3 * 0.044715 x^2 belongs
    cross_entropy,  // d logits divides by every position B T, not by the kept (target != -1) ones
};

// "none", "encoder", "layer_norm", ... as spelled above, and back; std::nullopt for an unknown name.
const char* to_string(broken_rule rule);
std::optional<broken_rule> broken_rule_from_string(const std::string& name);
// Every rule that can be broken (not "none"), in the order above.
const std::vector<broken_rule>& breakable_rules();
// One line saying what goes wrong and where, for a model of `layers` layers.
std::string describe(broken_rule rule, std::size_t layers);

// The gradient of the loss for every named activation and every parameter, all in one list in the order
// the backward pass completes them (gpt_backward_order).
template <class T>
struct gpt_gradients
{
    gpt_config config;
    std::vector<std::pair<std::string, array<T>>> in_backward_order;

    // The gradient named `name` (an activation of models/gpt.hpp or a SPEC parameter name); throws
    // std::out_of_range naming it when there is none.
    const array<T>& of(const std::string& name) const;
    // The parameters' gradients only, in SPEC's table order.
    std::vector<std::pair<std::string, array<T>>> parameters() const;
};

// Reverses gpt_forward. Throws std::invalid_argument naming "gpt_backward" if the forward had no targets.
template <class T>
gpt_gradients<T> gpt_backward(const gpt_cache<T>& cache, broken_rule broken = broken_rule::none);

// ---- names -------------------------------------------------------------------------------------------

// SPEC's parameter names in its table order: wte, wpe, blocks.0.ln_1.weight, ..., ln_f.weight, ln_f.bias.
std::vector<std::string> gpt_parameter_names(const gpt_config& config);
// models/gpt.hpp's named activations in forward order: embed, blocks.0.ln_1, ..., ln_f, logits.
std::vector<std::string> gpt_activation_names(const gpt_config& config);
// Every activation and parameter in the order the backward pass completes its gradient:
//   logits, ln_f, blocks.{L-1}.res_2, ln_f.weight, ln_f.bias,
//   then per block i from L-1 down to 0:
//     mlp, mlp_gelu, mlp.W_proj, mlp.b_proj, mlp_hidden, ln_2, mlp.W_fc, mlp.b_fc, res_1, ln_2.weight,
//     ln_2.bias, attn, ln_1, attn.W_Q, attn.W_K, attn.W_V, attn.W_O, <block i-1's res_2 or embed>,
//     ln_1.weight, ln_1.bias,
//   then wte (complete only now: the head's part and the encoder's) and wpe.
// The activations alone appear in exactly the reverse of their forward order.
std::vector<std::string> gpt_backward_order(const gpt_config& config);

// Every parameter of `params` under its SPEC name, in SPEC's table order (handles sharing storage).
template <class T>
std::vector<std::pair<std::string, parameter<T>>> named_parameters(const gpt_parameters<T>& params);
}  // namespace xgrad::models::manual
