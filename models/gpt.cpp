// The small GPT composed from the layers of models/layers.hpp: its parameters in SPEC's order and
// names, GPT-2 initialisation, the forward pass on a tape, and the counting formulas.
#include "models/gpt.hpp"

#include <cmath>
#include <random>

#include "autodiff/instantiate.hpp"
#include "models/layers.hpp"
#include "ops/composed.hpp"

namespace xgrad::models
{
void gpt_config::validate(const char* op) const
{
    if (vocab_size == 0 || block_size == 0 || layers == 0 || d_model == 0 || heads == 0)
    {
        fail(op, "every size must be positive, got V=" + std::to_string(vocab_size) +
                     " block_size=" + std::to_string(block_size) + " L=" + std::to_string(layers) +
                     " d=" + std::to_string(d_model) + " H=" + std::to_string(heads));
    }
    attention().validate(op);  // d % H, H % G
}

// ---- parameters ----------------------------------------------------------------------------------

namespace
{
// The GPT-2 initialisation's draws, in SPEC's parameter order, from one seeded generator. Values are
// drawn in double and rounded, so float and double models of one seed start from the same numbers.
template <class T>
class initialiser
{
public:
    explicit initialiser(std::uint64_t seed) : rng_(seed) {}

    parameter<T> normal(const std::string& name, const shape_t& shape, double std_dev)
    {
        std::normal_distribution<double> draw(0.0, std_dev);
        array<T> value = array<T>::from_shape(shape);
        for (auto& v : value)
        {
            v = static_cast<T>(draw(rng_));
        }
        return parameter<T>(std::move(value), name);
    }

    static parameter<T> constant(const std::string& name, const shape_t& shape, T c)
    {
        array<T> value = array<T>::from_shape(shape);
        std::fill(value.begin(), value.end(), c);
        return parameter<T>(std::move(value), name);
    }

private:
    std::mt19937_64 rng_;
};

// Every parameter of one block, in SPEC's table order.
template <class T>
std::vector<const parameter<T>*> block_parameter_list(const gpt_block_parameters<T>& b)
{
    return {&b.ln_1_weight, &b.ln_1_bias, &b.W_Q,    &b.W_K,  &b.W_V,    &b.W_O,
            &b.ln_2_weight, &b.ln_2_bias, &b.W_fc,   &b.b_fc, &b.W_proj, &b.b_proj};
}
}  // namespace

template <class T>
gpt_parameters<T> gpt_parameters<T>::init(const gpt_config& config, std::uint64_t seed)
{
    config.validate("gpt_parameters::init");
    const std::size_t d = config.d_model, kv = config.attention().kv_width();
    const double weight_std = 0.02;
    // Each residual branch adds into x, L times twice: scale its last projection by 1 / sqrt(2 L).
    const double residual_std = weight_std / std::sqrt(2.0 * static_cast<double>(config.layers));
    initialiser<T> draw(seed);

    gpt_parameters p;
    p.config = config;
    p.wte = draw.normal("wte", {config.vocab_size, d}, weight_std);
    p.wpe = draw.normal("wpe", {config.block_size, d}, weight_std);
    for (std::size_t i = 0; i < config.layers; ++i)
    {
        const std::string prefix = "blocks." + std::to_string(i) + ".";
        gpt_block_parameters<T> b;
        b.ln_1_weight = initialiser<T>::constant(prefix + "ln_1.weight", {d}, T(1));
        b.ln_1_bias = initialiser<T>::constant(prefix + "ln_1.bias", {d}, T(0));
        b.W_Q = draw.normal(prefix + "attn.W_Q", {d, d}, weight_std);
        b.W_K = draw.normal(prefix + "attn.W_K", {d, kv}, weight_std);
        b.W_V = draw.normal(prefix + "attn.W_V", {d, kv}, weight_std);
        b.W_O = draw.normal(prefix + "attn.W_O", {d, d}, residual_std);
        b.ln_2_weight = initialiser<T>::constant(prefix + "ln_2.weight", {d}, T(1));
        b.ln_2_bias = initialiser<T>::constant(prefix + "ln_2.bias", {d}, T(0));
        b.W_fc = draw.normal(prefix + "mlp.W_fc", {d, 4 * d}, weight_std);
        b.b_fc = initialiser<T>::constant(prefix + "mlp.b_fc", {4 * d}, T(0));
        b.W_proj = draw.normal(prefix + "mlp.W_proj", {4 * d, d}, residual_std);
        b.b_proj = initialiser<T>::constant(prefix + "mlp.b_proj", {d}, T(0));
        p.blocks.push_back(std::move(b));
    }
    p.ln_f_weight = initialiser<T>::constant("ln_f.weight", {d}, T(1));
    p.ln_f_bias = initialiser<T>::constant("ln_f.bias", {d}, T(0));
    return p;
}

template <class T>
std::vector<parameter<T>> gpt_parameters<T>::named_parameters() const
{
    std::vector<parameter<T>> all{wte, wpe};
    for (const auto& b : blocks)
    {
        for (const parameter<T>* p : block_parameter_list(b))
        {
            all.push_back(*p);
        }
    }
    all.push_back(ln_f_weight);
    all.push_back(ln_f_bias);
    return all;
}

template <class T>
void gpt_parameters<T>::zero_grad()
{
    for (parameter<T>& p : named_parameters())
    {
        p.zero_grad();  // a handle shares its parameter's storage
    }
}

// ---- forward -------------------------------------------------------------------------------------

namespace
{
std::string index_str(std::size_t b, std::size_t t)
{
    return "(" + std::to_string(b) + ", " + std::to_string(t) + ")";
}

// tokens (B, T) with B >= 1, 1 <= T <= block_size, ids in [0, V); targets of the same shape in [0, V) or -1.
void check_forward_inputs(const gpt_config& config, std::size_t blocks, const ids_t& tokens,
                          const ids_t* targets)
{
    const char* op = "gpt_forward";
    config.validate(op);
    if (blocks != config.layers)
    {
        fail(op, "the model has " + std::to_string(blocks) + " blocks but its config says L=" +
                     std::to_string(config.layers));
    }
    const shape_t shape = to_shape(tokens.shape());
    if (shape.size() != 2 || shape[0] == 0 || shape[1] == 0 || shape[1] > config.block_size)
    {
        fail(op, "tokens must be (B, T) with B >= 1 and 1 <= T <= block_size = " +
                     std::to_string(config.block_size) + ", got " + shape_str(shape));
    }
    const auto V = static_cast<std::int64_t>(config.vocab_size);
    for (std::size_t i = 0; i < tokens.size(); ++i)
    {
        const std::int64_t id = tokens.flat(i);
        if (id < 0 || id >= V)
        {
            fail(op, "token id " + std::to_string(id) + " at " + index_str(i / shape[1], i % shape[1]) +
                         " of tokens " + shape_str(shape) + " is outside [0, " + std::to_string(V) + ")");
        }
    }
    if (!targets)
    {
        return;
    }
    if (to_shape(targets->shape()) != shape)
    {
        fail(op, "targets " + shape_str(to_shape(targets->shape())) + " must have the shape of tokens " +
                     shape_str(shape));
    }
    for (std::size_t i = 0; i < targets->size(); ++i)
    {
        const std::int64_t id = targets->flat(i);
        if (id != -1 && (id < 0 || id >= V))
        {
            fail(op, "target " + std::to_string(id) + " at " + index_str(i / shape[1], i % shape[1]) +
                         " is neither -1 nor in [0, " + std::to_string(V) + ")");
        }
    }
}

template <class T>
block_weights<T> bind(tape<T>& t, const gpt_block_parameters<T>& b)
{
    return {{t.param(b.ln_1_weight), t.param(b.ln_1_bias)},
            {t.param(b.W_Q), t.param(b.W_K), t.param(b.W_V), t.param(b.W_O)},
            {t.param(b.ln_2_weight), t.param(b.ln_2_bias)},
            {t.param(b.W_fc), t.param(b.b_fc), t.param(b.W_proj), t.param(b.b_proj)}};
}
}  // namespace

template <class T>
gpt_result<T> gpt_forward(tape<T>& t, const gpt_parameters<T>& params, const ids_t& tokens, const ids_t* targets,
                          const gpt_options& options)
{
    const gpt_config& config = params.config;
    check_forward_inputs(config, params.blocks.size(), tokens, targets);
    const std::size_t length = tokens.shape()[1];
    const bool fused = options.fused;

    gpt_result<T> r;
    // Labels a value on the tape and lists it among the activations.
    auto keep = [&r](const std::string& name, const var<T>& v) {
        r.activations.emplace_back(name, v.named(name));
        return v;
    };

    // x = wte[tokens] + wpe[0 .. T-1]: the positions broadcast over the batch
    const var<T> wte = t.param(params.wte);
    const var<T> positions = ops::slice(t.param(params.wpe), 0, 0, length);
    var<T> x = keep("embed", ops::add(ops::embedding(wte, tokens), positions));

    for (std::size_t i = 0; i < config.layers; ++i)
    {
        const std::string prefix = "blocks." + std::to_string(i) + ".";
        const block_result<T> b = transformer_block(x, bind(t, params.blocks[i]), config.attention(), fused);
        keep(prefix + "ln_1", b.ln_1);
        keep(prefix + "attn", b.attn);
        keep(prefix + "res_1", b.res_1);
        keep(prefix + "ln_2", b.ln_2);
        keep(prefix + "mlp_hidden", b.mlp.hidden);
        keep(prefix + "mlp_gelu", b.mlp.activated);
        keep(prefix + "mlp", b.mlp.output);
        x = keep(prefix + "res_2", b.res_2);
    }

    // logits = LN(x; ln_f) wte^T: the head is the token embedding, read transposed by the GEMM
    const var<T> ln_f = keep("ln_f", layer_norm(x, t.param(params.ln_f_weight), t.param(params.ln_f_bias), fused));
    r.logits = keep("logits", ops::matmul(ln_f, wte, false, /*transpose_b=*/true));
    if (targets)
    {
        r.loss = fused ? ops::cross_entropy(r.logits, *targets) : ops::composed::cross_entropy(r.logits, *targets);
        r.loss.named("loss");
    }
    return r;
}

// ---- counting ------------------------------------------------------------------------------------

std::uint64_t gpt_parameter_count(const gpt_config& c)
{
    c.validate("gpt_parameter_count");
    const std::uint64_t V = c.vocab_size, block = c.block_size, L = c.layers, d = c.d_model;
    const std::uint64_t kv = c.attention().kv_width();  // G dh
    return V * d + block * d + L * (2 * d * d + 2 * d * kv + 8 * d * d + 9 * d) + 2 * d;
}

gpt_multiply_adds gpt_forward_multiply_adds(const gpt_config& c, std::size_t batch, std::size_t length)
{
    c.validate("gpt_forward_multiply_adds");
    const std::uint64_t L = c.layers, B = batch, T = length, d = c.d_model, V = c.vocab_size;
    const std::uint64_t kv = c.attention().kv_width();  // G dh
    gpt_multiply_adds m;
    m.projections = L * B * T * (2 * d * d + 2 * d * kv);
    m.mlp = L * B * T * 8 * d * d;
    m.attention = L * 2 * B * T * T * d;
    m.head = B * T * V * d;
    return m;
}

#define XGRAD_GPT(T)                     \
    template struct gpt_parameters<T>;   \
    template gpt_result<T> gpt_forward(tape<T>&, const gpt_parameters<T>&, const ids_t&, const ids_t*, \
                                       const gpt_options&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_GPT)
}  // namespace xgrad::models
