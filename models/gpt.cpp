// The small GPT composed from the layers of models/layers.hpp: the variant's metadata, its parameters
// declared once (gpt.hpp's visit), GPT-2 initialisation, the forward pass on a tape, and the counting.
#include "models/gpt.hpp"

#include <cmath>
#include <random>

#include "autodiff/instantiate.hpp"
#include "models/layers.hpp"
#include "ops/composed.hpp"

namespace xgrad::models
{
// ---- parameters ----------------------------------------------------------------------------------

std::string block_prefix(std::size_t i) { return "blocks." + std::to_string(i) + "."; }

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b)
{
    return a != 0 && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

std::string saturated_count_text(std::uint64_t n)
{
    return (n == UINT64_MAX ? "over " : "") + std::to_string(n);
}

std::uint64_t declared_values(const declaration& d)
{
    std::uint64_t n = 1;
    for (const std::size_t extent : d.shape)
    {
        n = saturating_mul(n, extent);
    }
    return n;
}

gpt_value_count gpt_values(const gpt_config& c)
{
    gpt_value_count v;
    auto count = [](std::uint64_t& n, std::uint64_t& tensors) {
        return [&n, &tensors](const std::string&, auto, const declaration& d) {
            n = saturating_add(n, declared_values(d));
            ++tensors;
        };
    };
    gpt_parameters<float>::declare_embedding(c, count(v.outside_blocks, v.tensors_outside_blocks));
    gpt_parameters<float>::declare_head(c, count(v.outside_blocks, v.tensors_outside_blocks));
    gpt_block_parameters<float>::declare(c, count(v.per_block, v.tensors_per_block));
    return v;
}

double gpt_weight_std() { return 0.02; }

// Each residual branch adds into x, L times twice: scale its last projection by 1 / sqrt(2 L).
double gpt_residual_std(const gpt_config& c)
{
    return gpt_weight_std() / std::sqrt(2.0 * static_cast<double>(c.layers));
}

template <class T>
gpt_parameters<T> gpt_parameters<T>::declare(const gpt_config& config)
{
    config.validate("gpt_parameters::declare");
    gpt_parameters p;
    p.config = config;
    p.blocks.resize(config.layers);
    return p;
}

template <class T>
gpt_parameters<T> gpt_parameters<T>::init(const gpt_config& config, std::uint64_t seed)
{
    config.validate("gpt_parameters::init");
    gpt_parameters p = declare(config);
    initialise(p, seed);
    return p;
}

// ---- forward -------------------------------------------------------------------------------------

const char* mlp_activation_name(mlp_kind kind)
{
    switch (kind)
    {
    case mlp_kind::gelu_tanh:
    case mlp_kind::gelu:
        return "mlp_gelu";
    case mlp_kind::relu2:
        return "mlp_relu2";
    case mlp_kind::swiglu:
        return "mlp_swiglu";
    }
    return "";
}

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
}  // namespace

template <class T>
gpt_result<T> gpt_forward(tape<T>& t, const gpt_parameters<T>& params, const ids_t& tokens, const ids_t* targets,
                          const gpt_options& options)
{
    const gpt_config& config = params.config;
    check_forward_inputs(config, params.blocks.size(), tokens, targets);
    const std::size_t length = tokens.shape()[1];
    const bool fused = options.fused;
    block_options block;
    block.fused = fused;
    block.dropout = options.dropout;
    block.generator = options.generator;
    block.every_activation = options.every_activation;

    gpt_result<T> r;
    // Labels a value on the tape and lists it among the activations.
    auto keep = [&r](const std::string& name, const var<T>& v) {
        r.activations.emplace_back(name, v.named(name));
        return v;
    };

    // x = wte[tokens] (+ wpe[0 .. T-1], the positions broadcast over the batch)
    const var<T> wte = t.param(params.wte);
    var<T> x = ops::embedding(wte, tokens);
    if (config.position == position_kind::learned)
    {
        x = ops::add(x, ops::slice(t.param(params.wpe), 0, 0, length));
    }
    if (options.generator && options.dropout > 0)
    {
        x = ops::dropout(x, static_cast<T>(options.dropout), *options.generator);
    }
    keep("embed", x);

    for (std::size_t i = 0; i < config.layers; ++i)
    {
        const std::string prefix = block_prefix(i);
        const block_result<T> b = transformer_block(x, bind(t, params.blocks[i], config), config, block);
        keep(prefix + "ln_1", b.ln_1);
        keep(prefix + "attn", b.attn);
        keep(prefix + "res_1", b.res_1);
        keep(prefix + "ln_2", b.ln_2);
        if (config.mlp == mlp_kind::swiglu)
        {
            keep(prefix + "mlp_gate", b.mlp.hidden);
            keep(prefix + "mlp_up", b.mlp.up);
        }
        else if (b.mlp.hidden.valid())  // not when merged into the GELU's node (options.every_activation)
        {
            keep(prefix + "mlp_hidden", b.mlp.hidden);
        }
        keep(prefix + mlp_activation_name(config.mlp), b.mlp.activated);
        keep(prefix + "mlp", b.mlp.output);
        x = keep(prefix + "res_2", b.res_2);
    }

    const var<T> ln_f_bias = config.norm_has_bias() ? t.param(params.ln_f_bias) : var<T>();
    const var<T> ln_f = keep("ln_f", norm(x, {t.param(params.ln_f_weight), ln_f_bias}, config.norm, fused));
    // logits = N(x; ln_f) wte^T: the tied head is the token embedding, read transposed by the GEMM
    const var<T> head = config.tied_head ? ops::matmul(ln_f, wte, false, /*transpose_b=*/true)
                                         : ops::matmul(ln_f, t.param(params.lm_head));
    // logits = c tanh(head / c) when the logits are soft-capped
    r.logits = keep("logits", soft_capped(head, config.logit_softcap));
    if (targets)
    {
        r.loss = fused ? ops::cross_entropy(r.logits, *targets) : ops::composed::cross_entropy(r.logits, *targets);
        r.loss.named("loss");
    }
    return r;
}

std::map<std::string, shape_t> gpt_tensor_shapes(const gpt_config& c)
{
    std::map<std::string, shape_t> shapes;
    for_each_gpt_parameter(c, [&shapes](const std::string& name, const declaration& d) {
        shapes[name] = d.shape;
    });
    return shapes;
}

gpt_config run_as(const gpt_config& trained, const std::map<std::string, std::string>& values)
{
    const gpt_config c = config_with_values(trained, values);
    c.validate("run_as");
    if (gpt_tensor_shapes(c) != gpt_tensor_shapes(trained))
    {
        std::string asked, had;
        const std::string key = first_difference(c, trained, &asked);
        first_difference(trained, c, &had);
        fail("run_as", key + " = " + asked + " needs other tensors than the checkpoint's, trained with " + key +
                           " = " + had);
    }
    return c;
}

// ---- counting ------------------------------------------------------------------------------------

std::uint64_t gpt_parameter_count(const gpt_config& c)
{
    c.validate("gpt_parameter_count");
    const gpt_value_count v = gpt_values(c);
    return saturating_add(v.outside_blocks, saturating_mul(c.layers, v.per_block));
}

gpt_multiply_adds gpt_forward_multiply_adds(const gpt_config& c, std::size_t batch, std::size_t length)
{
    c.validate("gpt_forward_multiply_adds");
    const std::uint64_t L = c.layers, B = batch, T = length, d = c.d_model, V = c.vocab_size;
    const std::uint64_t kv = c.attention().kv_width(), h = c.hidden_width();  // G dh, the MLP's width
    const std::uint64_t mlp_matrices = c.mlp == mlp_kind::swiglu ? 3 : 2;
    gpt_multiply_adds m;
    m.projections = L * B * T * (2 * d * d + 2 * d * kv);
    m.mlp = L * B * T * mlp_matrices * d * h;
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
