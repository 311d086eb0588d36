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

// ---- names and descriptions ---------------------------------------------------------------------------

namespace
{
const std::vector<std::pair<broken_rule, const char*>>& rule_names()
{
    static const std::vector<std::pair<broken_rule, const char*>> names = {
        {broken_rule::none, "none"},
        {broken_rule::encoder, "encoder"},
        {broken_rule::layer_norm, "layer_norm"},
        {broken_rule::attention, "attention"},
        {broken_rule::residual, "residual"},
        {broken_rule::matmul_bias, "matmul_bias"},
        {broken_rule::gelu, "gelu"},
        {broken_rule::cross_entropy, "cross_entropy"},
        {broken_rule::rms_norm, "rms_norm"},
        {broken_rule::rope, "rope"},
        {broken_rule::gelu_exact, "gelu_exact"},
        {broken_rule::swiglu, "swiglu"},
        {broken_rule::attention_bias, "attention_bias"},
        {broken_rule::untied_head, "untied_head"}};
    return names;
}
}  // namespace

const char* to_string(broken_rule rule)
{
    for (const auto& [r, name] : rule_names())
    {
        if (r == rule)
        {
            return name;
        }
    }
    return "unknown";
}

std::optional<broken_rule> broken_rule_from_string(const std::string& name)
{
    for (const auto& [r, n] : rule_names())
    {
        if (name == n)
        {
            return r;
        }
    }
    return std::nullopt;
}

const std::vector<broken_rule>& breakable_rules()
{
    static const std::vector<broken_rule> rules = [] {
        std::vector<broken_rule> all;
        for (const auto& [r, name] : rule_names())
        {
            if (r != broken_rule::none)
            {
                all.push_back(r);
            }
        }
        return all;
    }();
    return rules;
}

std::optional<std::string> not_used_by(broken_rule rule, const gpt_config& c)
{
    switch (rule)
    {
    case broken_rule::layer_norm:
        return c.norm == norm_kind::layernorm ? std::nullopt : std::optional<std::string>("needs --norm layernorm");
    case broken_rule::rms_norm:
        return c.norm == norm_kind::rmsnorm ? std::nullopt : std::optional<std::string>("needs --norm rmsnorm");
    case broken_rule::gelu:
        return c.mlp == mlp_kind::gelu_tanh ? std::nullopt : std::optional<std::string>("needs --mlp gelu_tanh");
    case broken_rule::gelu_exact:
        return c.mlp == mlp_kind::gelu ? std::nullopt : std::optional<std::string>("needs --mlp gelu");
    case broken_rule::swiglu:
        return c.mlp == mlp_kind::swiglu ? std::nullopt : std::optional<std::string>("needs --mlp swiglu");
    case broken_rule::rope:
        return c.position == position_kind::rope ? std::nullopt : std::optional<std::string>("needs --position rope");
    case broken_rule::attention_bias:
        return c.attention_has_bias() ? std::nullopt : std::optional<std::string>("needs --bias all");
    case broken_rule::untied_head:
        return c.tied_head ? std::optional<std::string>("needs --untied-head") : std::nullopt;
    default: return std::nullopt;
    }
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
    const std::string last = "blocks." + std::to_string(layers == 0 ? 0 : layers - 1) + ".";
    switch (rule)
    {
    case broken_rule::none: return "nothing broken";
    case broken_rule::encoder:
        return "encoder_backward assigns d wte[token] = d out instead of adding (repeated tokens and the head's "
               "part of d wte are lost)";
    case broken_rule::layer_norm:
        return "layernorm_backward of " + last + "ln_2 forgets the - x_hat * mean(d x_hat * x_hat) term";
    case broken_rule::attention:
        return "causal_self_attention_backward of " + last + "attn forgets the key path: d x = d Xq + d Xv";
    case broken_rule::residual:
        return "residual_backward of " + last + "res_1 forgets the skip: d x = the branch's part only";
    case broken_rule::matmul_bias:
        return "linear_backward of " + last + "mlp.W_fc (or W_gate, W_up) sums d x over the first d outputs only";
    case broken_rule::gelu:
        return "gelu_backward of " + last + "mlp_gelu differentiates c x^3 as c x^2";
    case broken_rule::cross_entropy:
        return "softmax_cross_entropy_backward divides by every position, ignored ones too, not by the kept count";
    case broken_rule::rms_norm:
        return "rmsnorm_backward of " + last + "ln_2 treats 1 / rms as a constant: d x = d x_hat / rms";
    case broken_rule::rope:
        return "rope_backward in " + last + "attn rotates d Q and d K by the forward's angle +a, not by -a";
    case broken_rule::gelu_exact:
        return "gelu_exact_backward of " + last + "mlp_gelu forgets the x phi(x) term: d x = d y Phi(x)";
    case broken_rule::swiglu:
        return "swiglu_backward of " + last + "mlp_swiglu takes silu'(gate) as sigmoid(gate)";
    case broken_rule::attention_bias:
        return "bias_backward of " + last + "attn's b_Q, b_K, b_V, b_O sums over the first sequence only";
    case broken_rule::untied_head:
        return "the head's linear_backward keeps d lm_head of the last sequence only (= where += belongs)";
    }
    return "unknown";
}

// ---- the hook -----------------------------------------------------------------------------------------

template <class T>
fault_hook<T> break_rule(broken_rule rule, const gpt_config& config)
{
    if (rule == broken_rule::none)
    {
        return {};
    }
    const std::string last = "blocks." + std::to_string(config.layers - 1) + ".";
    return [rule, last](const std::string& site, backward_rules<T>& r) {
        switch (rule)
        {
        case broken_rule::none: break;
        case broken_rule::encoder: r.encoder = site == "embed" ? faults::encoder_assigns<T> : r.encoder; break;
        case broken_rule::cross_entropy:
            r.cross_entropy = site == "loss" ? faults::cross_entropy_over_all_positions<T> : r.cross_entropy;
            break;
        case broken_rule::untied_head:
            r.linear = site == "head" ? faults::linear_weight_last_sequence<T> : r.linear;
            break;
        default: break;
        }
        if (site.rfind(last, 0) != 0)
        {
            return;  // the other rules are broken in the last block only
        }
        const std::string part = site.substr(last.size());
        switch (rule)
        {
        case broken_rule::layer_norm:
            r.layer_norm = part == "ln_2" ? faults::layernorm_without_variance_term<T> : r.layer_norm;
            break;
        case broken_rule::rms_norm: r.rms_norm = part == "ln_2" ? faults::rmsnorm_constant_scale<T> : r.rms_norm; break;
        case broken_rule::attention:
            r.attention = part == "attn" ? faults::attention_without_key_path<T> : r.attention;
            break;
        case broken_rule::rope:
            r.attention_parts.rope = part == "attn" ? faults::rope_same_angle<T> : r.attention_parts.rope;
            break;
        case broken_rule::attention_bias:
            r.attention_parts.bias = part == "attn" ? faults::bias_first_sequence<T> : r.attention_parts.bias;
            break;
        case broken_rule::residual: r.residual = part == "res_1" ? faults::residual_without_skip<T> : r.residual; break;
        case broken_rule::matmul_bias: r.linear = part == "mlp.in" ? faults::linear_short_sum<T> : r.linear; break;
        case broken_rule::gelu: r.gelu_tanh = part == "mlp_act" ? faults::gelu_square_slope<T> : r.gelu_tanh; break;
        case broken_rule::gelu_exact:
            r.gelu_exact = part == "mlp_act" ? faults::gelu_exact_cdf_only<T> : r.gelu_exact;
            break;
        case broken_rule::swiglu: r.swiglu = part == "mlp_act" ? faults::swiglu_sigmoid_slope<T> : r.swiglu; break;
        default: break;
        }
    };
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
