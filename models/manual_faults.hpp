// Deliberate mistakes in the hand-derived backward, for teaching the first-divergence report
// (models/divergence.hpp, examples/gpt_gradcheck.cpp --break RULE). Each is a bug someone could really
// write, as a function of the same signature as the correct rule it replaces. The reference backward
// (models/gpt_manual.hpp, models/manual_layers.hpp) holds no trace of them: gpt_backward takes a fault
// hook, and break_rule makes the hook that swaps one rule of its table for one of these, at one site only
// (the last block's, for the rules of a block).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/gpt_manual.hpp"

namespace xgrad::models::manual
{
enum class broken_rule
{
    none,
    encoder,         // the wte scatter assigns instead of adding: repeated tokens and the head's part are lost
    layer_norm,      // last block's ln_2: d x forgets the  - x_hat * mean(d x_hat * x_hat)  term
    attention,       // last block: d x of self-attention forgets the key path (d Xq + d Xv only)
    residual,        // last block's attention residual: d x = the branch's part only, the skip forgotten
    matmul_bias,     // last block's W_fc (or W_gate, W_up): d x sums over the first d outputs only (a loop bound)
    gelu,            // last block: d tanh-argument / dx uses 0.044715 x^2 where 3 * 0.044715 x^2 belongs
    cross_entropy,   // d logits divides by every position B T, not by the kept (target != -1) ones
    rms_norm,        // last block's ln_2: d x = rrms d x_hat, as if 1 / rms did not depend on x
    rope,            // last block: d Q and d K rotated by +a, the forward's angle, not by -a
    gelu_exact,      // last block: d x = d y Phi(x), the x phi(x) term forgotten
    swiglu,          // last block: silu'(gate) taken as sigmoid(gate)
    attention_bias,  // last block: d b_Q, d b_K, d b_V, d b_O summed over the first sequence only
    untied_head,     // d lm_head = x^T d logits of the last sequence only (= where += belongs over the batch)
    head_rms,        // last block: d h = rrms d y for the query and key heads, as if 1 / rms did not depend on h
    relu2,           // last block: d x = d y relu(x), the factor 2 of d(r^2) = 2 r dr forgotten
    softcap,         // d logits = d y (1 - y^2), the capped logits y not divided by the cap c inside tanh'
};

// "none", "encoder", "layer_norm", ... as spelled above, and back; std::nullopt for an unknown name.
const char* to_string(broken_rule rule);
std::optional<broken_rule> broken_rule_from_string(const std::string& name);
// Every rule that can be broken (not "none"), in the order above.
const std::vector<broken_rule>& breakable_rules();
// The rules the variant `config` uses, so that breaking one changes its backward.
std::vector<broken_rule> breakable_rules(const gpt_config& config);
// Why `rule` is not used by the variant ("needs --norm rmsnorm"), or std::nullopt when it is.
std::optional<std::string> not_used_by(broken_rule rule, const gpt_config& config);
// One line saying what goes wrong and where, for a model of `layers` layers.
std::string describe(broken_rule rule, std::size_t layers);

// The hook for gpt_backward that makes `rule`'s mistake (nothing for broken_rule::none).
template <class T>
fault_hook<T> break_rule(broken_rule rule, const gpt_config& config);

// gpt_backward(cache, break_rule<T>(rule, cache.params.config)).
template <class T>
gpt_gradients<T> gpt_backward(const gpt_cache<T>& cache, broken_rule rule);

namespace faults
{
// The mistaken rules, each of its correct rule's signature. The last line of each comment is the mistake.

// encoder_backward: d wte[tokens[b, t]] = d out[b, t], where += belongs.
template <class T>
void encoder_assigns(array<T>& d_wte, array<T>* d_wpe, const array<T>& d_out, const ids_t& tokens);
// layernorm_backward: d x = rstd (d x_hat - mean(d x_hat)), the x_hat mean(d x_hat x_hat) term dropped.
template <class T>
layernorm_gradients<T> layernorm_without_variance_term(const array<T>& d_y, const layernorm_cache<T>& cache,
                                                       const array<T>& weight);
// causal_self_attention_backward: d x = d Xq + d Xv, the key path forgotten.
template <class T>
attention_gradients<T> attention_without_key_path(const array<T>& d_y, const attention_cache<T>& cache,
                                                  const attention_weights<T>& weights, const attention_rules<T>& rules);
// residual_backward: d x = the branch's part only, the skip forgotten.
template <class T>
array<T> residual_without_skip(const array<T>& d_out, const array<T>& d_x_through_branch);
// linear_backward: d x = d out W^T summed over the first min(C, OC) outputs only.
template <class T>
linear_gradients<T> linear_short_sum(const array<T>& d_out, const array<T>& x, const array<T>& w, bool has_bias);
// gelu_backward: d(c x^3)/dx taken as c x^2.
template <class T>
array<T> gelu_square_slope(const array<T>& d_y, const array<T>& x);
// softmax_cross_entropy_backward: divides by every position, not by the kept ones.
template <class T>
array<T> cross_entropy_over_all_positions(const cross_entropy_cache<T>& cache);
// rmsnorm_backward treating 1 / rms as a constant: d x = rrms d x_hat.
template <class T>
rmsnorm_gradients<T> rmsnorm_constant_scale(const array<T>& d_y, const rmsnorm_cache<T>& cache,
                                            const array<T>& weight);
// rope_backward rotating by +a, the forward's angle, where the transpose R(-a) belongs.
template <class T>
array<T> rope_same_angle(const array<T>& d_y, double base, std::size_t offset);
// gelu_exact_backward with d x = d y Phi(x): the x phi(x) term of the product rule forgotten.
template <class T>
array<T> gelu_exact_cdf_only(const array<T>& d_y, const array<T>& x);
// swiglu_backward with silu'(a) taken as sigmoid(a): d gate = d y up s.
template <class T>
swiglu_gradients<T> swiglu_sigmoid_slope(const array<T>& d_y, const array<T>& gate, const array<T>& up);
// bias_backward summing the rows of the first sequence only (a loop bound of T where B T belongs).
template <class T>
array<T> bias_first_sequence(const array<T>& d_out);
// linear_backward (no bias) with d W = x_b^T d out_b of the last sequence b only: = where += belongs.
template <class T>
linear_gradients<T> linear_weight_last_sequence(const array<T>& d_out, const array<T>& x, const array<T>& w,
                                                bool has_bias);
// head_rms_backward treating 1 / rms as a constant: d h = rrms d y.
template <class T>
array<T> head_rms_constant_scale(const array<T>& d_y, const head_rms_cache<T>& cache);
// relu2_backward with d x = d y relu(x): the 2 of the power rule forgotten.
template <class T>
array<T> relu2_without_factor_two(const array<T>& d_y, const array<T>& x);
// softcap_backward with tanh(x / c) taken as y, not y / c: d x = d y (1 - y^2).
template <class T>
array<T> softcap_uncapped_slope(const array<T>& d_y, const array<T>& y, double cap);
}  // namespace faults
}  // namespace xgrad::models::manual
