// The hand-derived GPT. Each layer works on rows: an activation (B, T, C) is B T rows of C numbers.
// Products go through kernels::gemm (row-major, transposes as flags); everything else is a plain loop,
// written from the math in the comments and from nothing in ops/. The norms and the variants' layers are
// in models/manual_layers.cpp; the deliberate mistakes for teaching in models/manual_faults.cpp.
#include "models/gpt_manual.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include "autodiff/instantiate.hpp"
#include "kernels/gemm.hpp"

namespace xgrad::models::manual
{
namespace
{
// x's shape with its last axis replaced by `last`.
template <class T>
shape_t with_width(const array<T>& x, std::size_t last)
{
    shape_t s = to_shape(x.shape());
    s.back() = last;
    return s;
}

// x is (B, T, C) for some B and T, with C = `row_width`.
template <class T>
void require_rows(const char* op, const char* name, const array<T>& x, std::size_t row_width)
{
    if (x.dimension() != 3 || x.shape()[2] != row_width)
    {
        fail(op, std::string(name) + " must be (B, T, " + std::to_string(row_width) + "), got " + shape_of(x));
    }
}

template <class T>
array<T> zeros_like(const array<T>& a)
{
    return xt::zeros<T>(a.shape());
}
}  // namespace

// ---- encoder: token and position embeddings ----------------------------------------------------------

template <class T>
array<T> encoder_forward(const array<T>& wte, const array<T>* wpe, const ids_t& tokens)
{
    if (wte.dimension() != 2 || (wpe && (wpe->dimension() != 2 || wpe->shape()[1] != wte.shape()[1])))
    {
        fail("encoder_forward", "wte (V, d) and wpe (block_size, d) must share d, got wte " + shape_of(wte) +
                                    (wpe ? " and wpe " + shape_of(*wpe) : std::string()));
    }
    if (tokens.dimension() != 2 || (wpe && tokens.shape()[1] > wpe->shape()[0]))
    {
        fail("encoder_forward", "tokens must be (B, T)" +
                                    (wpe ? " with T <= " + std::to_string(wpe->shape()[0]) : std::string()) +
                                    ", got " + shape_str(to_shape(tokens.shape())));
    }
    const std::size_t batch = tokens.shape()[0], length = tokens.shape()[1], d = wte.shape()[1];
    const auto vocab = static_cast<std::int64_t>(wte.shape()[0]);
    array<T> out = array<T>::from_shape({batch, length, d});
    for (std::size_t b = 0; b < batch; ++b)
    {
        for (std::size_t t = 0; t < length; ++t)
        {
            const std::int64_t id = tokens(b, t);
            if (id < 0 || id >= vocab)
            {
                fail("encoder_forward", "token " + std::to_string(id) + " at (" + std::to_string(b) + ", " +
                                            std::to_string(t) + ") is outside [0, " + std::to_string(vocab) + ")");
            }
            const T* token_row = &wte(static_cast<std::size_t>(id), 0);
            const T* position_row = wpe ? &(*wpe)(t, 0) : nullptr;
            T* o = &out(b, t, 0);
            for (std::size_t i = 0; i < d; ++i)
            {
                o[i] = token_row[i] + (wpe ? position_row[i] : T(0));  // out[b, t] = wte[tokens[b, t]] + wpe[t]
            }
        }
    }
    return out;
}

template <class T>
void encoder_backward(array<T>& d_wte, array<T>* d_wpe, const array<T>& d_out, const ids_t& tokens)
{
    if (tokens.dimension() != 2 || d_wte.dimension() != 2 ||
        (d_wpe && (d_wpe->dimension() != 2 || d_wpe->shape()[1] != d_wte.shape()[1] ||
                   tokens.shape()[1] > d_wpe->shape()[0])) ||
        std::any_of(tokens.begin(), tokens.end(),
                    [&](std::int64_t id) { return id < 0 || id >= static_cast<std::int64_t>(d_wte.shape()[0]); }))
    {
        fail("encoder_backward", "tokens (B, T) must index the rows of d_wte " + shape_of(d_wte) +
                                     (d_wpe ? " and T fit d_wpe " + shape_of(*d_wpe) : std::string()) +
                                     ", got tokens " + shape_str(to_shape(tokens.shape())));
    }
    const std::size_t batch = tokens.shape()[0], length = tokens.shape()[1], d = d_wte.shape()[1];
    require_shape("encoder_backward", "d_out", d_out, {batch, length, d});
    for (std::size_t b = 0; b < batch; ++b)
    {
        for (std::size_t t = 0; t < length; ++t)
        {
            const T* g = &d_out(b, t, 0);
            T* token_row = &d_wte(static_cast<std::size_t>(tokens(b, t)), 0);
            for (std::size_t i = 0; i < d; ++i)
            {
                token_row[i] += g[i];  // out[b, t] = wte[tokens[b, t]] + ...  ->  d wte[tokens[b, t]] += d out[b, t]
            }
            if (d_wpe)
            {
                T* position_row = &(*d_wpe)(t, 0);
                for (std::size_t i = 0; i < d; ++i)
                {
                    position_row[i] += g[i];  // out[b, t] = ... + wpe[t]  ->  d wpe[t] += d out[b, t], over b
                }
            }
        }
    }
}

// ---- GELU (tanh approximation) ----------------------------------------------------------------------

namespace
{
template <class T>
constexpr T gelu_k()
{
    return static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
}
template <class T>
constexpr T gelu_c()
{
    return static_cast<T>(0.044715);
}
}  // namespace

template <class T>
array<T> gelu_forward(const array<T>& x)
{
    array<T> y = array<T>::from_shape(x.shape());
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        const T v = x.data()[i];
        const T u = gelu_k<T>() * (v + gelu_c<T>() * v * v * v);  // u = k (x + c x^3)
        y.data()[i] = T(0.5) * v * (T(1) + std::tanh(u));          // y = x (1 + tanh u) / 2
    }
    return y;
}

template <class T>
array<T> gelu_backward(const array<T>& d_y, const array<T>& x)
{
    require_shape("gelu_backward", "d_y", d_y, to_shape(x.shape()));
    array<T> d_x = array<T>::from_shape(x.shape());
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        const T v = x.data()[i];
        const T th = std::tanh(gelu_k<T>() * (v + gelu_c<T>() * v * v * v));
        // u = k (x + c x^3)  ->  du/dx = k (1 + 3 c x^2)
        const T du = gelu_k<T>() * (T(1) + T(3) * gelu_c<T>() * v * v);
        // y = x (1 + tanh u) / 2  ->  dy/dx = (1 + tanh u) / 2 + x (1 - tanh^2 u) du/dx / 2
        d_x.data()[i] = d_y.data()[i] * (T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * du);
    }
    return d_x;
}

// ---- residual -----------------------------------------------------------------------------------------

template <class T>
array<T> residual_forward(const array<T>& x, const array<T>& branch)
{
    require_shape("residual_forward", "branch", branch, to_shape(x.shape()));
    array<T> out = array<T>::from_shape(x.shape());
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        out.data()[i] = x.data()[i] + branch.data()[i];  // out = x + branch(x)
    }
    return out;
}

template <class T>
array<T> residual_backward(const array<T>& d_out, const array<T>& d_x_through_branch)
{
    require_shape("residual_backward", "d_x_through_branch", d_x_through_branch, to_shape(d_out.shape()));
    array<T> d_x = array<T>::from_shape(d_out.shape());
    for (std::size_t i = 0; i < d_out.size(); ++i)
    {
        // out = x + branch(x)  ->  d x = d out (the skip) + d out carried back through the branch
        d_x.data()[i] = d_out.data()[i] + d_x_through_branch.data()[i];
    }
    return d_x;
}

// ---- the tied output head -------------------------------------------------------------------------

template <class T>
array<T> tied_head_forward(const array<T>& x, const array<T>& wte)
{
    if (wte.dimension() != 2)
    {
        fail("tied_head_forward", "wte must be (V, d), got " + shape_of(wte));
    }
    const std::size_t vocab = wte.shape()[0], d = wte.shape()[1], n = rows(x);
    require_rows("tied_head_forward", "x", x, d);
    array<T> logits = array<T>::from_shape(with_width(x, vocab));
    kernels::gemm(false, true, n, vocab, d, x.data(), d, wte.data(), d, T(0), logits.data(), vocab);  // x wte^T
    return logits;
}

template <class T>
array<T> tied_head_backward(const array<T>& d_logits, const array<T>& x, const array<T>& wte, array<T>& d_wte)
{
    const std::size_t vocab = wte.shape()[0], d = wte.shape()[1], n = rows(x);
    require_shape("tied_head_backward", "d_logits", d_logits, with_width(x, vocab));
    require_shape("tied_head_backward", "d_wte", d_wte, to_shape(wte.shape()));
    array<T> d_x = array<T>::from_shape(x.shape());
    // logits = x wte^T  ->  d x = d logits wte
    kernels::gemm(false, false, n, d, vocab, d_logits.data(), vocab, wte.data(), d, T(0), d_x.data(), d);
    // logits = x wte^T  ->  d wte += d logits^T x  (added to: the encoder's part comes later)
    kernels::gemm(true, false, vocab, d, n, d_logits.data(), vocab, x.data(), d, T(1), d_wte.data(), d);
    return d_x;
}

// ---- softmax cross-entropy ------------------------------------------------------------------------

template <class T>
T softmax_cross_entropy_forward(const array<T>& logits, const ids_t& targets, cross_entropy_cache<T>& cache)
{
    const std::size_t vocab = width(logits), n = rows(logits);
    if (targets.size() != n || logits.dimension() != targets.dimension() + 1 ||
        !std::equal(targets.shape().begin(), targets.shape().end(), logits.shape().begin()))
    {
        fail("softmax_cross_entropy_forward", "targets must be logits' shape without the last axis; logits " +
                                                  shape_of(logits) + ", targets " + shape_str(to_shape(targets.shape())));
    }
    cache.probs = array<T>::from_shape(logits.shape());
    cache.targets = targets;
    cache.kept = 0;
    T total = 0;
    for (std::size_t r = 0; r < n; ++r)
    {
        const T* z = logits.data() + r * vocab;
        T* p = cache.probs.data() + r * vocab;
        const T top = *std::max_element(z, z + vocab);
        T sum = 0;
        for (std::size_t j = 0; j < vocab; ++j)
        {
            p[j] = std::exp(z[j] - top);
            sum += p[j];
        }
        for (std::size_t j = 0; j < vocab; ++j)
        {
            p[j] /= sum;  // p = softmax(z) = exp(z - max) / sum exp(z - max)
        }
        const std::int64_t target = targets.data()[r];
        if (target == -1)
        {
            continue;  // ignored position
        }
        if (target < 0 || target >= static_cast<std::int64_t>(vocab))
        {
            fail("softmax_cross_entropy_forward", "target " + std::to_string(target) + " at row " +
                                                      std::to_string(r) + " is neither -1 nor in [0, " +
                                                      std::to_string(vocab) + ")");
        }
        // -log p[target] = (max - z[target]) + log sum exp(z - max); the bracket first, as ops::cross_entropy
        // does: max + log sum would round to the logits' magnitude before z[target] is taken off.
        total += (top - z[target]) + std::log(sum);
        ++cache.kept;
    }
    return cache.kept == 0 ? T(0) : total / static_cast<T>(cache.kept);  // loss = mean over kept positions
}

template <class T>
array<T> softmax_cross_entropy_backward(const cross_entropy_cache<T>& cache)
{
    const std::size_t vocab = width(cache.probs), n = rows(cache.probs);
    array<T> d_logits = xt::zeros<T>(cache.probs.shape());
    // loss = sum over kept rows of -log p[target], divided by the kept count: every row's share is 1 / kept
    const T share = T(1) / static_cast<T>(cache.kept);
    for (std::size_t r = 0; r < n; ++r)
    {
        const std::int64_t target = cache.targets.data()[r];
        if (target == -1)
        {
            continue;  // an ignored row adds nothing to the loss: zero gradient
        }
        const T* p = cache.probs.data() + r * vocab;
        T* dz = d_logits.data() + r * vocab;
        for (std::size_t j = 0; j < vocab; ++j)
        {
            // -log softmax(z)[target]  ->  d z_j = p_j - [j == target], times the row's share
            dz[j] = (p[j] - (static_cast<std::int64_t>(j) == target ? T(1) : T(0))) * share;
        }
    }
    return d_logits;
}

// ---- names ------------------------------------------------------------------------------------------

namespace
{
std::string block_name(std::size_t i, const std::string& rest)
{
    return "blocks." + std::to_string(i) + "." + rest;
}

// The parameters the variant declares, (name, shape), in the checkpoint's order.
std::vector<std::pair<std::string, shape_t>> declared_shapes(const gpt_config& config)
{
    std::vector<std::pair<std::string, shape_t>> list;
    for (const auto& [name, d] : declared_parameters(gpt_parameters<float>::declare(config)))
    {
        list.emplace_back(name, d.shape);
    }
    return list;
}
}  // namespace

std::vector<std::string> gpt_parameter_names(const gpt_config& config)
{
    std::vector<std::string> names;
    for (const auto& entry : declared_shapes(config))
    {
        names.push_back(entry.first);
    }
    return names;
}

namespace
{
// The variant of `c` with its layers at the smallest sizes: the names and their order depend on nothing
// else, so running the twin on it lists them as a model of `c` would.
gpt_config smallest_like(const gpt_config& c)
{
    gpt_config s = c;
    s.vocab_size = 2;
    s.block_size = 1;
    s.heads = 1;
    s.kv_heads = 0;
    s.d_model = 2;  // dh = 2: even, as RoPE needs
    s.mlp_hidden = c.mlp_hidden ? 1 : 0;
    return s;
}

// The twin's forward and backward on one token of the smallest model like `c`.
gpt_gradients<double> smallest_run(const gpt_config& c, std::vector<std::string>* activations)
{
    const gpt_parameters<double> p = gpt_parameters<double>::init(smallest_like(c), 1);
    const ids_t tokens = xt::zeros<std::int64_t>({std::size_t(1), std::size_t(1)});
    const gpt_forward_result<double> f = gpt_forward(p, tokens, &tokens);
    if (activations != nullptr)
    {
        for (const auto& entry : f.activations)
        {
            activations->push_back(entry.first);
        }
    }
    return gpt_backward(f.cache);
}
}  // namespace

std::vector<std::string> gpt_activation_names(const gpt_config& config)
{
    std::vector<std::string> names;
    smallest_run(config, &names);
    return names;
}

std::vector<std::string> gpt_backward_order(const gpt_config& config)
{
    std::vector<std::string> names;
    for (const auto& entry : smallest_run(config, nullptr).in_backward_order)
    {
        names.push_back(entry.first);
    }
    return names;
}

template <class T>
std::vector<std::pair<std::string, parameter<T>>> named_parameters(const gpt_parameters<T>& p)
{
    std::vector<std::pair<std::string, parameter<T>>> list;
    visit_parameters(p, [&list](const std::string& name, parameter<T>& handle, const declaration&) {
        list.emplace_back(name, handle);
    });
    return list;
}

// ---- the whole model --------------------------------------------------------------------------------

namespace
{
template <class T>
void check_inputs(const gpt_parameters<T>& p, const ids_t& tokens, const ids_t* targets)
{
    const char* op = "gpt_forward";
    const gpt_config& c = p.config;
    c.validate(op);
    if (p.blocks.size() != c.layers)
    {
        fail(op, "the parameters hold " + std::to_string(p.blocks.size()) + " blocks for " +
                     std::to_string(c.layers) + " layers");
    }
    const auto expected = declared_shapes(c);
    const auto actual = named_parameters(p);
    for (std::size_t k = 0; k < expected.size(); ++k)
    {
        require_shape(op, expected[k].first.c_str(), actual[k].second.value(), expected[k].second);
    }
    const shape_t ts = to_shape(tokens.shape());
    if (ts.size() != 2 || ts[0] == 0 || ts[1] == 0 || ts[1] > c.block_size)
    {
        fail(op, "tokens must be (B, T) with B >= 1 and 1 <= T <= block_size = " + std::to_string(c.block_size) +
                     ", got " + shape_str(ts));
    }
    for (std::size_t k = 0; k < tokens.size(); ++k)
    {
        const std::int64_t id = tokens.data()[k];
        if (id < 0 || id >= static_cast<std::int64_t>(c.vocab_size))
        {
            fail(op, "token " + std::to_string(id) + " at (" + std::to_string(k / ts[1]) + ", " +
                         std::to_string(k % ts[1]) + ") is outside [0, " + std::to_string(c.vocab_size) + ")");
        }
    }
    if (targets == nullptr)
    {
        return;
    }
    if (to_shape(targets->shape()) != ts)
    {
        fail(op, "targets must have the tokens' shape " + shape_str(ts) + ", got " +
                     shape_str(to_shape(targets->shape())));
    }
    for (std::size_t k = 0; k < targets->size(); ++k)
    {
        const std::int64_t id = targets->data()[k];
        if (id < -1 || id >= static_cast<std::int64_t>(c.vocab_size))
        {
            fail(op, "target " + std::to_string(id) + " at (" + std::to_string(k / ts[1]) + ", " +
                         std::to_string(k % ts[1]) + ") is neither -1 nor in [0, " +
                         std::to_string(c.vocab_size) + ")");
        }
    }
}

// The value of a parameter the variant has, or nullptr when it has none (an empty handle is not read).
template <class T>
const array<T>* value_if(bool present, const parameter<T>& p)
{
    return present ? &p.value() : nullptr;
}

// N(x; weight, bias): LayerNorm or RMSNorm as the config says.
template <class T>
array<T> norm_forward(const gpt_config& c, const array<T>& x, const parameter<T>& weight, const parameter<T>& bias,
                      norm_cache<T>& cache)
{
    if (c.norm == norm_kind::rmsnorm)
    {
        return rmsnorm_forward(x, weight.value(), cache.rms);
    }
    return layernorm_forward(x, weight.value(), value_if(c.norm_has_bias(), bias), cache.layer);
}

// d x of a norm, with d weight and (LayerNorm with a bias) d bias, by the rules of `r`.
template <class T>
layernorm_gradients<T> norm_backward(const gpt_config& c, const backward_rules<T>& r, const array<T>& d_y,
                                     const norm_cache<T>& cache, const parameter<T>& weight)
{
    if (c.norm == norm_kind::rmsnorm)
    {
        rmsnorm_gradients<T> g = r.rms_norm(d_y, cache.rms, weight.value());
        return {std::move(g.x), std::move(g.weight), {}};
    }
    return r.layer_norm(d_y, cache.layer, weight.value());
}

template <class T>
attention_weights<T> attention_of(const gpt_config& c, const gpt_block_parameters<T>& w)
{
    const bool b = c.attention_has_bias();
    return {&w.W_Q.value(),    &w.W_K.value(),    &w.W_V.value(),    &w.W_O.value(),
            value_if(b, w.b_Q), value_if(b, w.b_K), value_if(b, w.b_V), value_if(b, w.b_O)};
}

attention_variant attention_variant_of(const gpt_config& c)
{
    const bool qk_norm = c.qk_norm == qk_norm_kind::rms, rope = c.position == position_kind::rope;
    return {rope, c.rope_base, 0, c.attention_window, qk_norm};
}

// act(hidden) of the MLP's fc/proj kinds: GELU (tanh or exact) or relu^2.
template <class T>
array<T> activation_forward(mlp_kind kind, const array<T>& hidden)
{
    switch (kind)
    {
    case mlp_kind::gelu_tanh:
        return gelu_forward(hidden);
    case mlp_kind::gelu:
        return gelu_exact_forward(hidden);
    case mlp_kind::relu2:
        return relu2_forward(hidden);
    case mlp_kind::swiglu:
        break;  // two inputs: swiglu_forward
    }
    fail("activation_forward", "mlp = swiglu has no one-input activation");
}

// Reverses activation_forward by the rules of `r`.
template <class T>
array<T> activation_backward(mlp_kind kind, const backward_rules<T>& r, const array<T>& d_y,
                             const array<T>& hidden)
{
    switch (kind)
    {
    case mlp_kind::gelu_tanh:
        return r.gelu_tanh(d_y, hidden);
    case mlp_kind::gelu:
        return r.gelu_exact(d_y, hidden);
    case mlp_kind::relu2:
        return r.relu2(d_y, hidden);
    case mlp_kind::swiglu:
        break;  // two inputs: swiglu_backward
    }
    fail("activation_backward", "mlp = swiglu has no one-input activation");
}
}  // namespace

template <class T>
gpt_forward_result<T> gpt_forward(const gpt_parameters<T>& p, const ids_t& tokens, const ids_t* targets)
{
    check_inputs(p, tokens, targets);
    const gpt_config& config = p.config;
    gpt_forward_result<T> r;
    gpt_cache<T>& cache = r.cache;
    cache.params = p;
    cache.tokens = tokens;
    auto named = [&r](std::string name, const array<T>& value) { r.activations.emplace_back(std::move(name), value); };
    const bool mlp_bias = config.mlp_has_bias();

    // x = wte[tokens] (+ wpe[0 .. T-1])
    array<T> x = encoder_forward(p.wte.value(), value_if(config.position == position_kind::learned, p.wpe), tokens);
    named("embed", x);
    for (std::size_t i = 0; i < config.layers; ++i)
    {
        const gpt_block_parameters<T>& w = p.blocks[i];
        block_cache<T>& c = cache.blocks.emplace_back();
        // x = x + MHA(N(x; ln_1)), with RoPE on Q and K and the biases as the variant says
        c.ln_1_out = norm_forward(config, x, w.ln_1_weight, w.ln_1_bias, c.ln_1);
        named(block_name(i, "ln_1"), c.ln_1_out);
        const array<T> attn = causal_self_attention_forward(c.ln_1_out, attention_of(config, w), config.attention(),
                                                            attention_variant_of(config), c.attn);
        named(block_name(i, "attn"), attn);
        x = residual_forward(x, attn);
        named(block_name(i, "res_1"), x);
        // x = x + MLP(N(x; ln_2))
        c.ln_2_out = norm_forward(config, x, w.ln_2_weight, w.ln_2_bias, c.ln_2);
        named(block_name(i, "ln_2"), c.ln_2_out);
        array<T> mlp;
        if (config.mlp == mlp_kind::swiglu)
        {
            // MLP = (silu(ln_2 W_gate + b_gate) * (ln_2 W_up + b_up)) W_down + b_down
            c.hidden = linear_forward(c.ln_2_out, w.W_gate.value(), value_if(mlp_bias, w.b_gate));
            named(block_name(i, "mlp_gate"), c.hidden);
            c.up = linear_forward(c.ln_2_out, w.W_up.value(), value_if(mlp_bias, w.b_up));
            named(block_name(i, "mlp_up"), c.up);
            c.activated = swiglu_forward(c.hidden, c.up);
            named(block_name(i, mlp_activation_name(config.mlp)), c.activated);
            mlp = linear_forward(c.activated, w.W_down.value(), value_if(mlp_bias, w.b_down));
        }
        else
        {
            // MLP = act(ln_2 W_fc + b_fc) W_proj + b_proj, act GELU (tanh-approximated or exact) or relu^2
            c.hidden = linear_forward(c.ln_2_out, w.W_fc.value(), value_if(mlp_bias, w.b_fc));
            named(block_name(i, "mlp_hidden"), c.hidden);
            c.activated = activation_forward(config.mlp, c.hidden);
            named(block_name(i, mlp_activation_name(config.mlp)), c.activated);
            mlp = linear_forward(c.activated, w.W_proj.value(), value_if(mlp_bias, w.b_proj));
        }
        named(block_name(i, "mlp"), mlp);
        x = residual_forward(x, mlp);
        named(block_name(i, "res_2"), x);
    }
    // logits = N(x; ln_f) wte^T, or N(x; ln_f) lm_head when the head is untied
    cache.ln_f_out = norm_forward(config, x, p.ln_f_weight, p.ln_f_bias, cache.ln_f);
    named("ln_f", cache.ln_f_out);
    r.logits = config.tied_head ? tied_head_forward(cache.ln_f_out, p.wte.value())
                                : linear_forward(cache.ln_f_out, p.lm_head.value(), static_cast<const array<T>*>(nullptr));
    if (config.logit_softcap.on())
    {
        // logits = c tanh(logits / c)
        r.logits = softcap_forward(r.logits, config.logit_softcap);
        cache.capped = r.logits;
    }
    named("logits", r.logits);
    if (targets != nullptr)
    {
        cross_entropy_cache<T>& ce = cache.loss.emplace();
        r.loss = softmax_cross_entropy_forward(r.logits, *targets, ce);
        r.has_loss = true;
    }
    return r;
}

namespace
{
// The gradients in the order the backward completes them, each under its name: an activation's as
// models/gpt.hpp names it, a parameter's as the model's declaration does (gpt_parameters::declare), so a
// parameter the variant does not declare (a bias of bias = none) is skipped.
template <class T>
struct gradient_list
{
    using block_member = parameter<T> gpt_block_parameters<T>::*;
    using model_member = parameter<T> gpt_parameters<T>::*;

    const gpt_config& config;
    gpt_gradients<T>& out;

    void activation(std::string name, const array<T>& grad) { out.in_backward_order.emplace_back(std::move(name), grad); }
    void block_parameter(std::size_t i, block_member member, const array<T>& grad)
    {
        gpt_block_parameters<T>::declare(config, [&](const std::string& name, block_member m, const declaration&) {
            if (m == member)
            {
                activation(block_prefix(i) + name, grad);
            }
        });
    }
    void model_parameter(model_member member, const array<T>& grad)
    {
        const auto add_if = [&](const std::string& name, model_member m, const declaration&) {
            if (m == member)
            {
                activation(name, grad);
            }
        };
        gpt_parameters<T>::declare_embedding(config, add_if);
        gpt_parameters<T>::declare_head(config, add_if);
    }
};

// The MLP's backward from d mlp to d ln_2 of block i, listing its gradients as they complete.
template <class T, class Rules>
array<T> mlp_backward(const gpt_config& config, const gpt_block_parameters<T>& w, const block_cache<T>& c,
                      const array<T>& d_mlp, std::size_t i, const Rules& rules, gradient_list<T>& list)
{
    using B = gpt_block_parameters<T>;
    const bool b = config.mlp_has_bias();
    const auto activation = [&](const char* name, const array<T>& grad) { list.activation(block_name(i, name), grad); };
    const auto weights = [&](typename gradient_list<T>::block_member weight, typename gradient_list<T>::block_member bias,
                             const linear_gradients<T>& grad) {
        list.block_parameter(i, weight, grad.w);
        list.block_parameter(i, bias, grad.b);
    };
    if (config.mlp == mlp_kind::swiglu)
    {
        // mlp = mlp_swiglu W_down + b_down
        linear_gradients<T> down = rules("mlp.out").linear(d_mlp, c.activated, w.W_down.value(), b);
        activation(mlp_activation_name(config.mlp), down.x);
        weights(&B::W_down, &B::b_down, down);
        // mlp_swiglu = silu(mlp_gate) * mlp_up
        swiglu_gradients<T> act = rules("mlp_act").swiglu(down.x, c.hidden, c.up);
        activation("mlp_gate", act.gate);
        activation("mlp_up", act.up);
        // mlp_gate = ln_2 W_gate + b_gate, mlp_up = ln_2 W_up + b_up  ->  d ln_2 = the sum of both paths
        const backward_rules<T> in = rules("mlp.in");
        linear_gradients<T> gate = in.linear(act.gate, c.ln_2_out, w.W_gate.value(), b);
        linear_gradients<T> up = in.linear(act.up, c.ln_2_out, w.W_up.value(), b);
        array<T> d_ln_2 = gate.x + up.x;
        activation("ln_2", d_ln_2);
        weights(&B::W_gate, &B::b_gate, gate);
        weights(&B::W_up, &B::b_up, up);
        return d_ln_2;
    }
    // mlp = mlp_gelu W_proj + b_proj (mlp_relu2 likewise)
    linear_gradients<T> proj = rules("mlp.out").linear(d_mlp, c.activated, w.W_proj.value(), b);
    activation(mlp_activation_name(config.mlp), proj.x);
    weights(&B::W_proj, &B::b_proj, proj);
    // mlp_gelu = GELU(mlp_hidden), tanh-approximated or exact; mlp_relu2 = relu(mlp_hidden)^2
    const array<T> d_hidden = activation_backward(config.mlp, rules("mlp_act"), proj.x, c.hidden);
    activation("mlp_hidden", d_hidden);
    // mlp_hidden = ln_2 W_fc + b_fc
    linear_gradients<T> fc = rules("mlp.in").linear(d_hidden, c.ln_2_out, w.W_fc.value(), b);
    activation("ln_2", fc.x);
    weights(&B::W_fc, &B::b_fc, fc);
    return std::move(fc.x);
}
}  // namespace

template <class T>
gpt_gradients<T> gpt_backward(const gpt_cache<T>& cache, const fault_hook<T>& hook)
{
    if (!cache.loss)
    {
        fail("gpt_backward", "the forward pass was given no targets, so there is no loss to differentiate");
    }
    const gpt_parameters<T>& p = cache.params;
    const gpt_config& config = p.config;
    const std::size_t last = config.layers - 1;
    using P = gpt_parameters<T>;
    using B = gpt_block_parameters<T>;
    gpt_gradients<T> g;
    g.config = config;
    gradient_list<T> list{config, g};
    // The rules of one step: the correct table, as the hook (if any) leaves it for this site.
    const auto rules = [&hook](const std::string& site) {
        backward_rules<T> r;
        if (hook)
        {
            hook(site, r);
        }
        return r;
    };
    array<T> d_wte = zeros_like(p.wte.value());

    // loss = cross_entropy(logits, targets)
    array<T> d_logits = rules("loss").cross_entropy(*cache.loss);
    list.activation("logits", d_logits);
    if (config.logit_softcap.on())
    {
        // logits = c tanh(head / c)  ->  d head = d logits (1 - (logits / c)^2)
        d_logits = rules("softcap").softcap(d_logits, cache.capped, config.logit_softcap);
    }
    // logits = ln_f wte^T  (tied)  or  ln_f lm_head
    array<T> d_ln_f;
    if (config.tied_head)
    {
        d_ln_f = rules("head").tied_head(d_logits, cache.ln_f_out, p.wte.value(), d_wte);
    }
    else
    {
        linear_gradients<T> head = rules("head").linear(d_logits, cache.ln_f_out, p.lm_head.value(), false);
        list.model_parameter(&P::lm_head, head.w);
        d_ln_f = std::move(head.x);
    }
    list.activation("ln_f", d_ln_f);
    // ln_f = N(x; ln_f)
    layernorm_gradients<T> ln_f = norm_backward(config, rules("ln_f"), d_ln_f, cache.ln_f, p.ln_f_weight);
    array<T> d_x = std::move(ln_f.x);
    list.activation(block_name(last, "res_2"), d_x);
    list.model_parameter(&P::ln_f_weight, ln_f.weight);
    list.model_parameter(&P::ln_f_bias, ln_f.bias);

    for (std::size_t i = config.layers; i-- > 0;)
    {
        const gpt_block_parameters<T>& w = p.blocks[i];
        const block_cache<T>& c = cache.blocks[i];
        const auto block_rules = [&](const char* site) { return rules(block_name(i, site)); };
        const array<T> d_res_2 = std::move(d_x);
        // res_2 = res_1 + mlp  ->  d mlp = d res_2
        list.activation(block_name(i, "mlp"), d_res_2);
        const array<T> d_ln_2 = mlp_backward(config, w, c, d_res_2, i, block_rules, list);
        // ln_2 = N(res_1; ln_2), and res_2 = res_1 + mlp(ln_2)
        layernorm_gradients<T> ln_2 = norm_backward(config, block_rules("ln_2"), d_ln_2, c.ln_2, w.ln_2_weight);
        const array<T> d_res_1 = block_rules("res_2").residual(d_res_2, ln_2.x);
        list.activation(block_name(i, "res_1"), d_res_1);
        list.block_parameter(i, &B::ln_2_weight, ln_2.weight);
        list.block_parameter(i, &B::ln_2_bias, ln_2.bias);
        // res_1 = x + attn  ->  d attn = d res_1
        list.activation(block_name(i, "attn"), d_res_1);
        // attn = MHA(ln_1), with its rotary embedding and biases
        const backward_rules<T> attention = block_rules("attn");
        attention_gradients<T> attn =
            attention.attention(d_res_1, c.attn, attention_of(config, w), attention.attention_parts);
        list.activation(block_name(i, "ln_1"), attn.x);
        for (const auto& [weight, d_weight, bias, d_bias] :
             {std::tuple{&B::W_Q, &attn.w_q, &B::b_Q, &attn.b_q}, {&B::W_K, &attn.w_k, &B::b_K, &attn.b_k},
              {&B::W_V, &attn.w_v, &B::b_V, &attn.b_v}, {&B::W_O, &attn.w_o, &B::b_O, &attn.b_o}})
        {
            list.block_parameter(i, weight, *d_weight);
            list.block_parameter(i, bias, *d_bias);
        }
        // ln_1 = N(x; ln_1), and res_1 = x + attn(ln_1)
        layernorm_gradients<T> ln_1 = norm_backward(config, block_rules("ln_1"), attn.x, c.ln_1, w.ln_1_weight);
        d_x = block_rules("res_1").residual(d_res_1, ln_1.x);
        list.activation(i > 0 ? block_name(i - 1, "res_2") : "embed", d_x);
        list.block_parameter(i, &B::ln_1_weight, ln_1.weight);
        list.block_parameter(i, &B::ln_1_bias, ln_1.bias);
    }
    // embed = wte[tokens] (+ wpe)
    const bool learned = config.position == position_kind::learned;
    array<T> d_wpe = learned ? zeros_like(p.wpe.value()) : array<T>();
    rules("embed").encoder(d_wte, learned ? &d_wpe : nullptr, d_x, cache.tokens);
    list.model_parameter(&P::wte, d_wte);
    list.model_parameter(&P::wpe, d_wpe);
    return g;
}

template <class T>
const array<T>& gpt_gradients<T>::of(const std::string& name) const
{
    for (const auto& [n, grad] : in_backward_order)
    {
        if (n == name)
        {
            return grad;
        }
    }
    throw std::out_of_range("gpt_gradients: no gradient named '" + name + "'");
}

template <class T>
std::vector<std::pair<std::string, array<T>>> gpt_gradients<T>::parameters() const
{
    std::vector<std::pair<std::string, array<T>>> list;
    for (const std::string& name : gpt_parameter_names(config))
    {
        list.emplace_back(name, of(name));
    }
    return list;
}

#define XGRAD_GPT_MANUAL(T)                                                                                       \
    template array<T> encoder_forward(const array<T>&, const array<T>*, const ids_t&);                           \
    template void encoder_backward(array<T>&, array<T>*, const array<T>&, const ids_t&);                         \
    template array<T> gelu_forward(const array<T>&);                                                             \
    template array<T> gelu_backward(const array<T>&, const array<T>&);                                           \
    template array<T> residual_forward(const array<T>&, const array<T>&);                                        \
    template array<T> residual_backward(const array<T>&, const array<T>&);                                       \
    template array<T> tied_head_forward(const array<T>&, const array<T>&);                                       \
    template array<T> tied_head_backward(const array<T>&, const array<T>&, const array<T>&, array<T>&);          \
    template T softmax_cross_entropy_forward(const array<T>&, const ids_t&, cross_entropy_cache<T>&);            \
    template array<T> softmax_cross_entropy_backward(const cross_entropy_cache<T>&);                             \
    template gpt_forward_result<T> gpt_forward(const gpt_parameters<T>&, const ids_t&, const ids_t*);            \
    template gpt_gradients<T> gpt_backward(const gpt_cache<T>&, const fault_hook<T>&);                           \
    template struct gpt_gradients<T>;                                                                            \
    template std::vector<std::pair<std::string, parameter<T>>> named_parameters(const gpt_parameters<T>&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_GPT_MANUAL)
}  // namespace xgrad::models::manual
