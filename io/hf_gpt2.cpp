// The GPT-2 layout to and from xgrad's names: c_attn split into W_Q, W_K, W_V (columns) and joined back,
// other names renamed; config.json from and to the sizes. model.safetensors is read by the strict reader
// (io/safetensors.hpp), which also accepts the half-precision dtypes Hugging Face stores.
#include "io/hf_gpt2.hpp"

#include <cstdint>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "io/escape.hpp"
#include "io/json_limits.hpp"

namespace xgrad::io
{
namespace
{
using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr std::uintmax_t max_config_bytes = 1'000'000;
const std::string metadata_prefix = "xgrad.";

json parse_json_file(const std::string& path)
{
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec)
    {
        fail(path, "cannot read (" + ec.message() + ")");
    }
    if (size > max_config_bytes)
    {
        fail(path, "is " + std::to_string(size) + " bytes, more than a config file needs");
    }
    json j;
    try
    {
        j = parse_json_bounded<json>(read_small_file(path, max_config_bytes), path);
    }
    catch (const std::invalid_argument& e)
    {
        throw format_error(e.what());
    }
    if (!j.is_object())
    {
        fail(path, "is not a JSON object");
    }
    return j;
}

std::size_t config_size(const json& config, const char* key, const std::string& path)
{
    if (!config.contains(key) || !config[key].is_number_unsigned() || config[key].get<std::uint64_t>() == 0 ||
        config[key].get<std::uint64_t>() > (1u << 30))
    {
        fail(path, std::string("\"") + key + "\" must be a positive integer (at most 2^30), got " +
                     (config.contains(key) ? io::quoted(config[key].dump()) : std::string("none")));
    }
    return config[key].get<std::size_t>();
}

// The GPT-2 settings that change the computation must be the ones xgrad computes.
void check_config_settings(const json& config, const std::string& path, model_layout& layout)
{
    if (config.contains("layer_norm_epsilon") &&
        !(config["layer_norm_epsilon"].is_number() && config["layer_norm_epsilon"].get<double>() == 1e-5))
    {
        fail(path, "\"layer_norm_epsilon\" must be 1e-5 (the epsilon xgrad's LayerNorm uses)");
    }
    if (config.contains("activation_function") && !config["activation_function"].is_string())
    {
        fail(path, "\"activation_function\" must be a string (gelu_new, gelu_pytorch_tanh or gelu), got " +
                     io::quoted(config["activation_function"].dump()));
    }
    const std::string activation = config.value("activation_function", std::string("gelu_new"));
    if (activation == "gelu_new" || activation == "gelu_pytorch_tanh")
    {
        layout.mlp = models::mlp_kind::gelu_tanh;
    }
    else if (activation == "gelu")
    {
        layout.mlp = models::mlp_kind::gelu;
    }
    else
    {
        fail(path,
             "\"activation_function\" is " + printable(activation) +
               "; allowed: gelu_new, gelu_pytorch_tanh, gelu");
    }
    const std::pair<const char*, bool> flags[] = { { "scale_attn_weights", true },
                                                   { "scale_attn_by_inverse_layer_idx", false },
                                                   { "reorder_and_upcast_attn", false } };
    for (const auto& [key, wanted] : flags)
    {
        if (config.contains(key) && config[key] != wanted)
        {
            fail(path, std::string("\"") + key + "\" must be " + (wanted ? "true" : "false") + ", got " +
                         io::quoted(config[key].dump()));
        }
    }
    if (config.contains("n_inner") && !config["n_inner"].is_null())
    {
        layout.mlp_hidden = config_size(config, "n_inner", path);
    }
}

// Columns [first, first + count) of a (rows, columns) matrix.
array<double> columns(const array<double>& m, std::size_t first, std::size_t count)
{
    array<double> out = array<double>::from_shape({ m.shape()[0], count });
    for (std::size_t r = 0; r < m.shape()[0]; ++r)
    {
        for (std::size_t c = 0; c < count; ++c)
        {
            out(r, c) = m(r, first + c);
        }
    }
    return out;
}

array<double> transposed(const array<double>& m)
{
    array<double> out = array<double>::from_shape({ m.shape()[1], m.shape()[0] });
    for (std::size_t r = 0; r < m.shape()[0]; ++r)
    {
        for (std::size_t c = 0; c < m.shape()[1]; ++c)
        {
            out(c, r) = m(r, c);
        }
    }
    return out;
}

bool all_zero(const array<double>& a)
{
    for (double v : a)
    {
        if (v != 0)
        {
            return false;
        }
    }
    return true;
}

// The HF name for each xgrad name that maps one to one (everything but attention's Q, K, V).
std::string hf_name(const std::string& name)
{
    static const std::pair<const char*, const char*> parts[] = {
        { "attn.W_O", "attn.c_proj.weight" },  { "attn.b_O", "attn.c_proj.bias" },
        { "mlp.W_fc", "mlp.c_fc.weight" },     { "mlp.b_fc", "mlp.c_fc.bias" },
        { "mlp.W_proj", "mlp.c_proj.weight" }, { "mlp.b_proj", "mlp.c_proj.bias" }
    };
    if (name == "wte" || name == "wpe")
    {
        return name + ".weight";
    }
    if (name.rfind("blocks.", 0) != 0)
    {
        return name; // ln_f.weight, ln_f.bias
    }
    const std::size_t dot = name.find('.', 7);
    const std::string layer = name.substr(7, dot - 7), rest = name.substr(dot + 1);
    for (const auto& [ours, theirs] : parts)
    {
        if (rest == ours)
        {
            return "h." + layer + "." + theirs;
        }
    }
    return "h." + layer + "." + rest; // ln_1.*, ln_2.*
}

stored_tensor zeros(std::size_t n)
{
    return { "F32", array<double>(shape_t{ n }, 0.0) };
}
} // namespace

safetensors_file read_hf_gpt2(const std::string& folder, model_layout& layout)
{
    const std::string config_path = (fs::path(folder) / "config.json").string();
    const std::string weights_path = (fs::path(folder) / "model.safetensors").string();
    const json config = parse_json_file(config_path);
    safetensors_file hf = read_safetensors(weights_path, accepted_dtypes::any_float);

    layout = model_layout{};
    layout.d_model = config_size(config, "n_embd", config_path);
    layout.heads = config_size(config, "n_head", config_path);
    layout.kv_heads = layout.heads;
    layout.layers = config_size(config, "n_layer", config_path);
    layout.block_size = config_size(config, "n_positions", config_path);
    layout.vocab_size = config_size(config, "vocab_size", config_path);
    layout.bias = models::bias_kind::all;
    if (layout.d_model % layout.heads != 0)
    {
        fail(config_path,
             "\"n_embd\" " + std::to_string(layout.d_model) + " is not a multiple of \"n_head\" " +
               std::to_string(layout.heads));
    }
    check_config_settings(config, config_path, layout);

    // Names without "transformer.", attention's constant mask buffers dropped.
    std::map<std::string, stored_tensor> t;
    for (auto& [name, tensor] : hf.tensors)
    {
        std::string n = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
        const bool buffer =
          n.size() > 10 && (n.compare(n.size() - 10, 10, ".attn.bias") == 0 ||
                            (n.size() > 17 && n.compare(n.size() - 17, 17, ".attn.masked_bias") == 0));
        if (!buffer && !t.emplace(n, std::move(tensor)).second)
        {
            fail(weights_path,
                 "tensor " + printable(n) + " appears with and without the transformer. prefix");
        }
    }

    safetensors_file out;
    for (const auto& [key, value] : hf.metadata)
    {
        if (key.rfind(metadata_prefix, 0) == 0)
        {
            out.metadata[key.substr(metadata_prefix.size())] = value;
        }
    }
    const auto take = [&](const std::string& from, const std::string& to)
    {
        const auto it = t.find(from);
        if (it == t.end())
        {
            fail(weights_path, "tensor " + from + " is missing");
        }
        out.tensors[to] = std::move(it->second);
        t.erase(it);
    };
    const std::size_t d = layout.d_model;
    for (std::size_t i = 0; i < layout.layers; ++i)
    {
        const std::string h = "h." + std::to_string(i) + ".", b = "blocks." + std::to_string(i) + ".";
        for (const char* n : { "ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias" })
        {
            take(h + n, b + n);
        }
        take(h + "attn.c_attn.weight", "qkv");
        take(h + "attn.c_attn.bias", "qkv_bias");
        const stored_tensor qkv = out.tensors["qkv"], qkv_bias = out.tensors["qkv_bias"];
        out.tensors.erase("qkv");
        out.tensors.erase("qkv_bias");
        if (qkv.values.dimension() != 2 || qkv.values.shape()[0] != d || qkv.values.shape()[1] != 3 * d ||
            qkv_bias.values.dimension() != 1 || qkv_bias.values.shape()[0] != 3 * d)
        {
            fail(weights_path,
                 h + "attn.c_attn has weight " +
                   shape_text(shape_t(qkv.values.shape().begin(), qkv.values.shape().end())) + " and bias " +
                   shape_text(shape_t(qkv_bias.values.shape().begin(), qkv_bias.values.shape().end())) +
                   "; config.json's n_embd " + std::to_string(d) + " needs (" + std::to_string(d) + ", " +
                   std::to_string(3 * d) + ") and (" + std::to_string(3 * d) + ",)");
        }
        const char* parts[] = { "Q", "K", "V" };
        for (std::size_t p = 0; p < 3; ++p)
        {
            out.tensors[b + "attn.W_" + parts[p]] = { qkv.dtype, columns(qkv.values, p * d, d) };
            out.tensors[b + "attn.b_" + parts[p]] = {
                qkv_bias.dtype, xt::view(qkv_bias.values, xt::range(p * d, (p + 1) * d))
            };
        }
        take(h + "attn.c_proj.weight", b + "attn.W_O");
        take(h + "attn.c_proj.bias", b + "attn.b_O");
        take(h + "mlp.c_fc.weight", b + "mlp.W_fc");
        take(h + "mlp.c_fc.bias", b + "mlp.b_fc");
        take(h + "mlp.c_proj.weight", b + "mlp.W_proj");
        take(h + "mlp.c_proj.bias", b + "mlp.b_proj");
    }
    take("wte.weight", "wte");
    take("wpe.weight", "wpe");
    take("ln_f.weight", "ln_f.weight");
    take("ln_f.bias", "ln_f.bias");
    if (const auto head = t.find("lm_head.weight"); head != t.end())
    {
        const array<double>& wte = out.tensors["wte"].values;
        if (head->second.values.shape() != wte.shape() || head->second.values != wte)
        {
            layout.tied_head = false;
            if (head->second.values.dimension() != 2)
            {
                fail(weights_path, "tensor lm_head.weight is not a matrix");
            }
            out.tensors["lm_head"] = { head->second.dtype, transposed(head->second.values) };
        }
        t.erase(head);
    }
    if (!t.empty())
    {
        fail(weights_path,
             "tensor " + printable(t.begin()->first) + " is not part of the GPT-2 layout with " +
               std::to_string(layout.layers) + " layers (config.json's n_layer)");
    }
    // A model converted from xgrad with fewer biases comes back as it was, if those biases are still zero.
    const bool from_xgrad = out.metadata.count("vocab_size") != 0;
    const std::string recorded = out.metadata.count("bias") ? out.metadata.at("bias")
                                 : from_xgrad               ? "mlp"
                                                            : "all";
    if (recorded == "mlp" || recorded == "none")
    {
        model_layout fewer = layout;
        models::read_field("bias", recorded, fewer.bias);
        const auto keep = fewer.tensor_shapes();
        bool zero = true;
        for (const auto& [name, tensor] : out.tensors)
        {
            zero = zero && (keep.count(name) || all_zero(tensor.values));
        }
        if (zero)
        {
            for (auto it = out.tensors.begin(); it != out.tensors.end();)
            {
                it = keep.count(it->first) ? std::next(it) : out.tensors.erase(it);
            }
            layout.bias = fewer.bias;
        }
    }
    for (auto& [name, tensor] : out.tensors)
    {
        tensor.dtype = tensor.dtype == "F64" ? "F64" : "F32"; // F16 and BF16 widen to F32 exactly
    }
    layout.to_metadata(out.metadata);
    check_tensors(out, layout, weights_path);
    return out;
}

void write_hf_gpt2(const std::string& folder, const safetensors_file& model, const model_layout& layout,
                   const std::map<std::string, std::string>& files)
{
    const auto refuse = [](const std::string& key, const std::string& value)
    {
        throw std::invalid_argument(
          "hf-gpt2 cannot express metadata \"" + key + "\" = " + value +
          " (GPT-2 is norm layernorm, position learned, mlp gelu_tanh or gelu, kv_heads = heads)");
    };
    // What GPT-2's files can say: its sizes with G = H, LayerNorm, learned positions, a GELU MLP of any
    // width, any biases, a tied or untied head. Anything else in the model is refused by name.
    models::gpt_config expressible = models::with_default_variant(layout);
    expressible.kv_heads = layout.heads;
    expressible.mlp = layout.mlp == models::mlp_kind::gelu ? models::mlp_kind::gelu : models::mlp_kind::gelu_tanh;
    expressible.mlp_hidden = layout.mlp_hidden;
    expressible.bias = layout.bias;
    expressible.tied_head = layout.tied_head;
    std::string value;
    if (const std::string key = models::first_difference(layout, expressible, &value); !key.empty())
    {
        refuse(key, value);
    }
    safetensors_file hf;
    hf.metadata["format"] = "pt";
    for (const auto& [key, value] : model.metadata)
    {
        hf.metadata[metadata_prefix + key] = value;
    }
    const auto tensor = [&](const std::string& name, std::size_t n)
    {
        const auto it = model.tensors.find(name);
        return it != model.tensors.end() ? it->second : zeros(n);
    };
    const std::size_t d = layout.d_model;
    for (const auto& [name, t] : model.tensors)
    {
        const std::string tail = name.size() >= 4 ? name.substr(name.size() - 4) : name;
        const bool joined = tail == ".W_Q" || tail == ".W_K" || tail == ".W_V" || tail == ".b_Q" ||
                            tail == ".b_K" || tail == ".b_V";
        if (!joined && name != "lm_head")
        {
            hf.tensors[hf_name(name)] = t;
        }
    }
    for (std::size_t i = 0; i < layout.layers; ++i)
    {
        const std::string h = "h." + std::to_string(i) + ".", b = "blocks." + std::to_string(i) + ".";
        const stored_tensor& q = model.tensors.at(b + "attn.W_Q");
        hf.tensors[h + "attn.c_attn.weight"] = { q.dtype,
                                                 xt::concatenate(
                                                   xt::xtuple(q.values,
                                                              model.tensors.at(b + "attn.W_K").values,
                                                              model.tensors.at(b + "attn.W_V").values),
                                                   1) };
        hf.tensors[h + "attn.c_attn.bias"] = { q.dtype,
                                               xt::concatenate(
                                                 xt::xtuple(tensor(b + "attn.b_Q", d).values,
                                                            tensor(b + "attn.b_K", d).values,
                                                            tensor(b + "attn.b_V", d).values)) };
        for (const char* n :
             { "attn.c_proj.bias", "mlp.c_fc.bias", "mlp.c_proj.bias", "ln_1.bias", "ln_2.bias" })
        {
            hf.tensors.emplace(h + n, zeros(std::string(n) == "mlp.c_fc.bias" ? layout.hidden() : d));
        }
    }
    hf.tensors.emplace("ln_f.bias", zeros(d));
    if (!layout.tied_head)
    {
        const stored_tensor& head = model.tensors.at("lm_head");
        hf.tensors["lm_head.weight"] = { head.dtype, transposed(head.values) };
    }
    json config = { { "model_type", "gpt2" },
                    { "architectures", { "GPT2LMHeadModel" } },
                    { "n_embd", d },
                    { "n_head", layout.heads },
                    { "n_layer", layout.layers },
                    { "n_positions", layout.block_size },
                    { "n_ctx", layout.block_size },
                    { "vocab_size", layout.vocab_size },
                    { "n_inner", nullptr },
                    { "layer_norm_epsilon", 1e-5 },
                    { "activation_function", layout.mlp == models::mlp_kind::gelu ? "gelu" : "gelu_new" },
                    { "tie_word_embeddings", layout.tied_head },
                    { "resid_pdrop", 0.0 },
                    { "embd_pdrop", 0.0 },
                    { "attn_pdrop", 0.0 } };
    if (layout.hidden() != 4 * d)
    {
        config["n_inner"] = layout.hidden();
    }
    staged_folder out(folder);
    out.write_file("config.json", config.dump(2) + "\n");
    for (const auto& [name, bytes] : files)
    {
        out.write_file(name, bytes);
    }
    write_safetensors(out.path("model.safetensors"), hf);
    out.commit();
}
} // namespace xgrad::io
