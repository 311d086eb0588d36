// The small GPT composed from the layers of models/layers.hpp: the variant's metadata, its parameters
// declared once (gpt.hpp's visit), GPT-2 initialisation, the forward pass on a tape, and the counting.
#include "models/gpt.hpp"

#include <charconv>
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
    if (position == position_kind::rope && attention().head_width() % 2 != 0)
    {
        fail(op, "position = rope needs an even head width dh = d / H, got d=" + std::to_string(d_model) +
                     " H=" + std::to_string(heads) + " dh=" + std::to_string(attention().head_width()));
    }
    if (position == position_kind::rope && !(rope_base > 0 && std::isfinite(rope_base)))
    {
        fail(op, "rope_base must be a positive number, got " + std::to_string(rope_base));
    }
}

// ---- variants ------------------------------------------------------------------------------------

variant_error::variant_error(std::string k, std::string v, std::string a)
    : std::invalid_argument("'" + k + "' = '" + v + "' is not " + (a.find(',') == std::string::npos ? "" : "one of ") + a),
      key(std::move(k)), value(std::move(v)), allowed(std::move(a))
{
}

const char* const variant_keys[7] = {"norm", "position", "rope_base", "mlp", "mlp_hidden", "bias", "tied_head"};

namespace
{
template <class E, std::size_t N>
E parse_name(const std::string& key, const std::string& text, const char* const (&names)[N])
{
    for (std::size_t k = 0; k < N; ++k)
    {
        if (text == names[k])
        {
            return static_cast<E>(k);
        }
    }
    std::string allowed;
    for (std::size_t k = 0; k < N; ++k)
    {
        allowed += (k ? ", " : "") + std::string(names[k]);
    }
    throw variant_error(key, text, allowed);
}

const char* const norm_names[] = {"layernorm", "rmsnorm"};
const char* const position_names[] = {"learned", "rope", "none"};
const char* const mlp_names[] = {"gelu_tanh", "gelu", "swiglu"};
const char* const bias_names[] = {"mlp", "all", "none"};

// The shortest decimal that reads back as the same double.
std::string decimal(double x)
{
    char buffer[64];
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, x);
    return ec == std::errc() ? std::string(buffer, end) : std::to_string(x);
}

double parse_positive_number(const std::string& key, const std::string& text)
{
    double x = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !(x > 0) || !std::isfinite(x))
    {
        throw variant_error(key, text, "a positive decimal number");
    }
    return x;
}

std::size_t parse_positive_integer(const std::string& key, const std::string& text)
{
    std::size_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || n == 0 ||
        text.find_first_not_of("0123456789") != std::string::npos)
    {
        throw variant_error(key, text, "a positive decimal integer");
    }
    return n;
}
}  // namespace

const char* name_of(norm_kind v) { return norm_names[static_cast<int>(v)]; }
const char* name_of(position_kind v) { return position_names[static_cast<int>(v)]; }
const char* name_of(mlp_kind v) { return mlp_names[static_cast<int>(v)]; }
const char* name_of(bias_kind v) { return bias_names[static_cast<int>(v)]; }
norm_kind parse_norm(const std::string& key, const std::string& text) { return parse_name<norm_kind>(key, text, norm_names); }
position_kind parse_position(const std::string& key, const std::string& text)
{
    return parse_name<position_kind>(key, text, position_names);
}
mlp_kind parse_mlp(const std::string& key, const std::string& text) { return parse_name<mlp_kind>(key, text, mlp_names); }
bias_kind parse_bias(const std::string& key, const std::string& text) { return parse_name<bias_kind>(key, text, bias_names); }

std::map<std::string, std::string> variant_metadata(const gpt_config& c)
{
    return {{"norm", name_of(c.norm)},
            {"position", name_of(c.position)},
            {"rope_base", decimal(c.rope_base)},
            {"mlp", name_of(c.mlp)},
            {"mlp_hidden", std::to_string(c.hidden_width())},
            {"bias", name_of(c.bias)},
            {"tied_head", c.tied_head ? "true" : "false"}};
}

gpt_config with_variant_metadata(gpt_config c, const std::map<std::string, std::string>& metadata)
{
    auto value = [&metadata](const char* key) -> const std::string* {
        const auto found = metadata.find(key);
        return found == metadata.end() ? nullptr : &found->second;
    };
    if (const std::string* v = value("norm"))
    {
        c.norm = parse_norm("norm", *v);
    }
    if (const std::string* v = value("position"))
    {
        c.position = parse_position("position", *v);
    }
    if (const std::string* v = value("rope_base"))
    {
        c.rope_base = parse_positive_number("rope_base", *v);
    }
    if (const std::string* v = value("mlp"))
    {
        c.mlp = parse_mlp("mlp", *v);
    }
    if (const std::string* v = value("mlp_hidden"))
    {
        c.mlp_hidden = parse_positive_integer("mlp_hidden", *v);
        if (c.mlp_hidden == 4 * c.d_model)
        {
            c.mlp_hidden = 0;  // the default width, written out
        }
    }
    if (const std::string* v = value("bias"))
    {
        c.bias = parse_bias("bias", *v);
    }
    if (const std::string* v = value("tied_head"))
    {
        if (*v != "true" && *v != "false")
        {
            throw variant_error("tied_head", *v, "true, false");
        }
        c.tied_head = *v == "true";
    }
    return c;
}

// ---- parameters ----------------------------------------------------------------------------------

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
        const std::string prefix = "blocks." + std::to_string(i) + ".";
        const block_result<T> b = transformer_block(x, bind(t, params.blocks[i], config), config, block);
        keep(prefix + "ln_1", b.ln_1);
        keep(prefix + "attn", b.attn);
        keep(prefix + "res_1", b.res_1);
        keep(prefix + "ln_2", b.ln_2);
        if (config.mlp == mlp_kind::swiglu)
        {
            keep(prefix + "mlp_gate", b.mlp.hidden);
            keep(prefix + "mlp_up", b.mlp.up);
            keep(prefix + "mlp_swiglu", b.mlp.activated);
        }
        else
        {
            if (b.mlp.hidden.valid())  // not when merged into the GELU's node (options.every_activation)
            {
                keep(prefix + "mlp_hidden", b.mlp.hidden);
            }
            keep(prefix + "mlp_gelu", b.mlp.activated);
        }
        keep(prefix + "mlp", b.mlp.output);
        x = keep(prefix + "res_2", b.res_2);
    }

    const var<T> ln_f_bias = config.norm_has_bias() ? t.param(params.ln_f_bias) : var<T>();
    const var<T> ln_f = keep("ln_f", norm(x, {t.param(params.ln_f_weight), ln_f_bias}, config.norm, fused));
    // logits = N(x; ln_f) wte^T: the tied head is the token embedding, read transposed by the GEMM
    r.logits = keep("logits", config.tied_head ? ops::matmul(ln_f, wte, false, /*transpose_b=*/true)
                                               : ops::matmul(ln_f, t.param(params.lm_head)));
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
    return parameter_scalars(gpt_parameters<float>::declare(c));
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
