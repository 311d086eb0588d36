// The deliberate mistakes of models/manual_faults.hpp and the hook that puts one in gpt_backward's table.
// Each mistake is its correct rule with one line changed; the line is marked "mistake:".
#include "models/manual_faults.hpp"

#include <algorithm>
#include <cmath>

#include "autodiff/instantiate.hpp"
#include "kernels/gemm.hpp"

namespace xgrad::models::manual
{
namespace faults
{
template <class T>
void encoder_assigns(array<T>& d_wte, array<T>* d_wpe, const array<T>& d_out, const ids_t& tokens)
{
    const std::size_t d = d_wte.shape()[1], length = tokens.shape()[1];
    for (std::size_t r = 0; r < tokens.size(); ++r)
    {
        T* token_row = &d_wte(static_cast<std::size_t>(tokens.data()[r]), 0);
        for (std::size_t i = 0; i < d; ++i)
        {
            token_row[i] = d_out.data()[r * d + i];  // mistake: d wte[tokens[b, t]] = d out[b, t]
            if (d_wpe)
            {
                (*d_wpe)(r % length, i) += d_out.data()[r * d + i];
            }
        }
    }
}

template <class T>
layernorm_gradients<T> layernorm_without_variance_term(const array<T>& d_y, const layernorm_cache<T>& cache,
                                                       const array<T>& weight)
{
    layernorm_gradients<T> g = layernorm_backward(d_y, cache, weight);  // d weight and d bias are right
    const std::size_t c = weight.size();
    for (std::size_t r = 0; r < g.x.size() / c; ++r)
    {
        T mean_d_x_hat = 0;
        for (std::size_t i = 0; i < c; ++i)
        {
            mean_d_x_hat += d_y.data()[r * c + i] * weight(i) / static_cast<T>(c);
        }
        for (std::size_t i = 0; i < c; ++i)
        {
            // mistake: d x = rstd (d x_hat - mean(d x_hat)), the - x_hat mean(d x_hat x_hat) term dropped
            g.x.data()[r * c + i] = cache.rstd.data()[r] * (d_y.data()[r * c + i] * weight(i) - mean_d_x_hat);
        }
    }
    return g;
}

template <class T>
attention_gradients<T> attention_without_key_path(const array<T>& d_y, const attention_cache<T>& c,
                                                  const attention_weights<T>& w, const attention_rules<T>& rules)
{
    attention_gradients<T> g = causal_self_attention_backward(d_y, c, w, rules);  // the weights' parts are right
    const array<T> d_joined = linear_backward(d_y, c.joined, *w.w_o, false).x;
    array<T> d_q, d_k, d_v;
    attention_backward(split_heads(d_joined, c.config.heads), c.q, c.k, c.v, c.weights, d_q, d_k, d_v);
    if (c.variant.rope)
    {
        d_q = rules.rope(d_q, c.variant.rope_base, c.variant.position_offset);
    }
    const array<T> d_x_q = linear_backward(combine_heads(d_q), c.x, *w.w_q, false).x;
    const array<T> d_x_v = linear_backward(combine_heads(d_v), c.x, *w.w_v, false).x;
    g.x = d_x_q + d_x_v;  // mistake: d x = d Xq + d Xv, the key path forgotten
    return g;
}

template <class T>
array<T> residual_without_skip(const array<T>&, const array<T>& d_x_through_branch)
{
    return d_x_through_branch;  // mistake: d x = the branch's part, the skip's d out forgotten
}

template <class T>
linear_gradients<T> linear_short_sum(const array<T>& d_out, const array<T>& x, const array<T>& w, bool has_bias)
{
    linear_gradients<T> g = linear_backward(d_out, x, w, has_bias);  // d W and d b are right
    const std::size_t c = w.shape()[0], oc = w.shape()[1], n = x.size() / c;
    const std::size_t summed = std::min(c, oc);  // mistake: the sum over outputs stops at C, not OC
    kernels::gemm(false, true, n, c, summed, d_out.data(), oc, w.data(), oc, T(0), g.x.data(), c);
    return g;
}

template <class T>
array<T> gelu_square_slope(const array<T>& d_y, const array<T>& x)
{
    const T k = T(0.7978845608028654), a = T(0.044715);
    array<T> d_x = array<T>::from_shape(x.shape());
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        const T v = x.data()[i];
        const T th = std::tanh(k * (v + a * v * v * v));
        const T du = k * (T(1) + a * v * v);  // mistake: d(c x^3)/dx taken as c x^2
        d_x.data()[i] = d_y.data()[i] * (T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * du);
    }
    return d_x;
}

template <class T>
array<T> cross_entropy_over_all_positions(const cross_entropy_cache<T>& cache)
{
    array<T> d_logits = softmax_cross_entropy_backward(cache);
    const std::size_t positions = cache.targets.size();
    d_logits *= static_cast<T>(cache.kept) / static_cast<T>(positions);  // mistake: 1 / (B T), not 1 / kept
    return d_logits;
}

template <class T>
rmsnorm_gradients<T> rmsnorm_constant_scale(const array<T>& d_y, const rmsnorm_cache<T>& cache,
                                            const array<T>& weight)
{
    rmsnorm_gradients<T> g = rmsnorm_backward(d_y, cache, weight);  // d weight is right
    const std::size_t c = weight.size();
    for (std::size_t r = 0; r < g.x.size() / c; ++r)
    {
        for (std::size_t i = 0; i < c; ++i)
        {
            // mistake: d x = rrms d x_hat, as if rrms did not depend on x
            g.x.data()[r * c + i] = cache.rrms.data()[r] * d_y.data()[r * c + i] * weight(i);
        }
    }
    return g;
}

template <class T>
array<T> rope_same_angle(const array<T>& d_y, double base, std::size_t offset)
{
    return rope_forward(d_y, base, offset);  // mistake: R(a) d y where R(a)^T d y = R(-a) d y belongs
}

template <class T>
array<T> gelu_exact_cdf_only(const array<T>& d_y, const array<T>& x)
{
    array<T> dx = array<T>::from_shape(x.shape());
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        const T cdf = T(0.5) * std::erfc(-x.data()[i] / std::sqrt(T(2)));
        dx.data()[i] = d_y.data()[i] * cdf;  // mistake: y = x Phi(x) differentiated as Phi(x), x phi(x) lost
    }
    return dx;
}

template <class T>
swiglu_gradients<T> swiglu_sigmoid_slope(const array<T>& d_y, const array<T>& gate, const array<T>& up)
{
    swiglu_gradients<T> g = swiglu_backward(d_y, gate, up);  // d up is right
    for (std::size_t i = 0; i < gate.size(); ++i)
    {
        const T s = T(1) / (T(1) + std::exp(-gate.data()[i]));
        g.gate.data()[i] = d_y.data()[i] * up.data()[i] * s;  // mistake: silu'(a) taken as sigmoid(a)
    }
    return g;
}

template <class T>
array<T> bias_first_sequence(const array<T>& d_out)
{
    const std::size_t c = d_out.shape().back(), length = d_out.dimension() == 3 ? d_out.shape()[1] : 1;
    array<T> d_b = xt::zeros<T>({c});
    for (std::size_t r = 0; r < length; ++r)  // mistake: T rows, where all B T rows belong
    {
        for (std::size_t j = 0; j < c; ++j)
        {
            d_b.data()[j] += d_out.data()[r * c + j];
        }
    }
    return d_b;
}

template <class T>
linear_gradients<T> linear_weight_last_sequence(const array<T>& d_out, const array<T>& x, const array<T>& w,
                                                bool has_bias)
{
    linear_gradients<T> g = linear_backward(d_out, x, w, has_bias);  // d x and d b are right
    const std::size_t c = w.shape()[0], oc = w.shape()[1], length = x.shape()[1];
    const std::size_t last = x.shape()[0] - 1;
    // mistake: d W = x_b^T d out_b for each sequence b in turn, assigned (beta 0): only the last is left
    kernels::gemm(true, false, c, oc, length, x.data() + last * length * c, c, d_out.data() + last * length * oc,
                  oc, T(0), g.w.data(), oc);
    return g;
}
}  // namespace faults

// ---- the table ----------------------------------------------------------------------------------------

namespace
{
// One row per deliberate mistake: its name as --break spells it, the site of gpt_backward where it goes in
// (models/gpt_manual.hpp, fault_hook; a part of the last block when `in_last_block`), the variant that
// uses the rule it breaks, what goes wrong ("{last}" stands for the last block's "blocks.{L-1}."), and how
// it replaces the correct rule in the table of rules.
template <class T>
struct fault_row
{
    broken_rule rule;
    const char* name;
    const char* site;
    bool in_last_block;
    bool (*used_by)(const gpt_config&);
    const char* needs;  // the flag that makes the variant use it, for "needs ..." when it does not
    const char* what;
    void (*install)(backward_rules<T>&);
};

bool always(const gpt_config&) { return true; }

template <class T>
const std::vector<fault_row<T>>& fault_table()
{
    using c_t = const gpt_config&;
    using r_t = backward_rules<T>&;
    static const std::vector<fault_row<T>> rows = {
        {broken_rule::encoder, "encoder", "embed", false, always, "",
         "encoder_backward assigns d wte[token] = d out instead of adding (repeated tokens and the head's part of "
         "d wte are lost)",
         [](r_t r) { r.encoder = faults::encoder_assigns<T>; }},
        {broken_rule::layer_norm, "layer_norm", "ln_2", true, [](c_t c) { return c.norm == norm_kind::layernorm; },
         "--norm layernorm", "layernorm_backward of {last}ln_2 forgets the - x_hat * mean(d x_hat * x_hat) term",
         [](r_t r) { r.layer_norm = faults::layernorm_without_variance_term<T>; }},
        {broken_rule::attention, "attention", "attn", true, always, "",
         "causal_self_attention_backward of {last}attn forgets the key path: d x = d Xq + d Xv",
         [](r_t r) { r.attention = faults::attention_without_key_path<T>; }},
        {broken_rule::residual, "residual", "res_1", true, always, "",
         "residual_backward of {last}res_1 forgets the skip: d x = the branch's part only",
         [](r_t r) { r.residual = faults::residual_without_skip<T>; }},
        {broken_rule::matmul_bias, "matmul_bias", "mlp.in", true, always, "",
         "linear_backward of {last}mlp.W_fc (or W_gate, W_up) sums d x over the first d outputs only",
         [](r_t r) { r.linear = faults::linear_short_sum<T>; }},
        {broken_rule::gelu, "gelu", "mlp_act", true, [](c_t c) { return c.mlp == mlp_kind::gelu_tanh; },
         "--mlp gelu_tanh", "gelu_backward of {last}mlp_gelu differentiates c x^3 as c x^2",
         [](r_t r) { r.gelu_tanh = faults::gelu_square_slope<T>; }},
        {broken_rule::cross_entropy, "cross_entropy", "loss", false, always, "",
         "softmax_cross_entropy_backward divides by every position, ignored ones too, not by the kept count",
         [](r_t r) { r.cross_entropy = faults::cross_entropy_over_all_positions<T>; }},
        {broken_rule::rms_norm, "rms_norm", "ln_2", true, [](c_t c) { return c.norm == norm_kind::rmsnorm; },
         "--norm rmsnorm", "rmsnorm_backward of {last}ln_2 treats 1 / rms as a constant: d x = d x_hat / rms",
         [](r_t r) { r.rms_norm = faults::rmsnorm_constant_scale<T>; }},
        {broken_rule::rope, "rope", "attn", true, [](c_t c) { return c.position == position_kind::rope; },
         "--position rope", "rope_backward in {last}attn rotates d Q and d K by the forward's angle +a, not by -a",
         [](r_t r) { r.attention_parts.rope = faults::rope_same_angle<T>; }},
        {broken_rule::gelu_exact, "gelu_exact", "mlp_act", true, [](c_t c) { return c.mlp == mlp_kind::gelu; },
         "--mlp gelu", "gelu_exact_backward of {last}mlp_gelu forgets the x phi(x) term: d x = d y Phi(x)",
         [](r_t r) { r.gelu_exact = faults::gelu_exact_cdf_only<T>; }},
        {broken_rule::swiglu, "swiglu", "mlp_act", true, [](c_t c) { return c.mlp == mlp_kind::swiglu; },
         "--mlp swiglu", "swiglu_backward of {last}mlp_swiglu takes silu'(gate) as sigmoid(gate)",
         [](r_t r) { r.swiglu = faults::swiglu_sigmoid_slope<T>; }},
        {broken_rule::attention_bias, "attention_bias", "attn", true, [](c_t c) { return c.attention_has_bias(); },
         "--bias all", "bias_backward of {last}attn's b_Q, b_K, b_V, b_O sums over the first sequence only",
         [](r_t r) { r.attention_parts.bias = faults::bias_first_sequence<T>; }},
        {broken_rule::untied_head, "untied_head", "head", false, [](c_t c) { return !c.tied_head; },
         "--untied-head", "the head's linear_backward keeps d lm_head of the last sequence only (= where += belongs)",
         [](r_t r) { r.linear = faults::linear_weight_last_sequence<T>; }},
    };
    return rows;
}

// The names and descriptions do not depend on T: they are read from the double table.
const fault_row<double>* find_row(broken_rule rule)
{
    for (const fault_row<double>& row : fault_table<double>())
    {
        if (row.rule == rule)
        {
            return &row;
        }
    }
    return nullptr;  // broken_rule::none
}

std::string last_block(std::size_t layers) { return "blocks." + std::to_string(layers == 0 ? 0 : layers - 1) + "."; }
}  // namespace

const char* to_string(broken_rule rule)
{
    const fault_row<double>* row = find_row(rule);
    return row ? row->name : "none";
}

std::optional<broken_rule> broken_rule_from_string(const std::string& name)
{
    if (name == "none")
    {
        return broken_rule::none;
    }
    for (const fault_row<double>& row : fault_table<double>())
    {
        if (name == row.name)
        {
            return row.rule;
        }
    }
    return std::nullopt;
}

const std::vector<broken_rule>& breakable_rules()
{
    static const std::vector<broken_rule> rules = [] {
        std::vector<broken_rule> all;
        for (const fault_row<double>& row : fault_table<double>())
        {
            all.push_back(row.rule);
        }
        return all;
    }();
    return rules;
}

std::optional<std::string> not_used_by(broken_rule rule, const gpt_config& c)
{
    const fault_row<double>* row = find_row(rule);
    if (row == nullptr || row->used_by(c))
    {
        return std::nullopt;
    }
    return "needs " + std::string(row->needs);
}

std::vector<broken_rule> breakable_rules(const gpt_config& config)
{
    std::vector<broken_rule> used;
    for (broken_rule rule : breakable_rules())
    {
        if (!not_used_by(rule, config))
        {
            used.push_back(rule);
        }
    }
    return used;
}

std::string describe(broken_rule rule, std::size_t layers)
{
    const fault_row<double>* row = find_row(rule);
    if (row == nullptr)
    {
        return "nothing broken";
    }
    std::string text = row->what;
    const std::string placeholder = "{last}";
    for (std::size_t at = text.find(placeholder); at != std::string::npos; at = text.find(placeholder, at))
    {
        text.replace(at, placeholder.size(), last_block(layers));
    }
    return text;
}

// ---- the hook -----------------------------------------------------------------------------------------

template <class T>
fault_hook<T> break_rule(broken_rule rule, const gpt_config& config)
{
    for (const fault_row<T>& row : fault_table<T>())
    {
        if (row.rule == rule)
        {
            const std::string site = (row.in_last_block ? last_block(config.layers) : "") + row.site;
            const auto install = row.install;
            return [site, install](const std::string& at, backward_rules<T>& r) {
                if (at == site)
                {
                    install(r);
                }
            };
        }
    }
    return {};  // broken_rule::none
}

template <class T>
gpt_gradients<T> gpt_backward(const gpt_cache<T>& cache, broken_rule rule)
{
    return gpt_backward(cache, break_rule<T>(rule, cache.params.config));
}

#define XGRAD_MANUAL_FAULTS(T)                                                                                   \
    template fault_hook<T> break_rule(broken_rule, const gpt_config&);                                           \
    template gpt_gradients<T> gpt_backward(const gpt_cache<T>&, broken_rule);                                    \
    template void faults::encoder_assigns(array<T>&, array<T>*, const array<T>&, const ids_t&);                  \
    template layernorm_gradients<T> faults::layernorm_without_variance_term(const array<T>&,                     \
                                                                            const layernorm_cache<T>&,           \
                                                                            const array<T>&);                    \
    template attention_gradients<T> faults::attention_without_key_path(                                          \
        const array<T>&, const attention_cache<T>&, const attention_weights<T>&, const attention_rules<T>&);     \
    template array<T> faults::residual_without_skip(const array<T>&, const array<T>&);                           \
    template linear_gradients<T> faults::linear_short_sum(const array<T>&, const array<T>&, const array<T>&,     \
                                                          bool);                                                 \
    template array<T> faults::gelu_square_slope(const array<T>&, const array<T>&);                               \
    template array<T> faults::cross_entropy_over_all_positions(const cross_entropy_cache<T>&);                   \
    template rmsnorm_gradients<T> faults::rmsnorm_constant_scale(const array<T>&, const rmsnorm_cache<T>&,       \
                                                                 const array<T>&);                               \
    template array<T> faults::rope_same_angle(const array<T>&, double, std::size_t);                             \
    template array<T> faults::gelu_exact_cdf_only(const array<T>&, const array<T>&);                             \
    template swiglu_gradients<T> faults::swiglu_sigmoid_slope(const array<T>&, const array<T>&, const array<T>&);\
    template array<T> faults::bias_first_sequence(const array<T>&);                                              \
    template linear_gradients<T> faults::linear_weight_last_sequence(const array<T>&, const array<T>&,           \
                                                                     const array<T>&, bool);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_MANUAL_FAULTS)
}  // namespace xgrad::models::manual
