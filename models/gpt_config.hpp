// The GPT's config, described once (docs/spec.md, "The model" and "Architecture variants"). Each field —
// its key, its command-line flag, its help text, its type, its default and the values it allows — is one
// row of `visit_config`, and everything that reads or writes a config walks those rows: the checkpoint's
// metadata, the converters' layouts, the tools' flags (tools/model_flags.hpp), the Python keyword
// arguments and the docs' variant table (tests/test_gpt_config.cpp checks docs/spec.md against it).
//
// A new architecture variant is one enum (or number) field here, one row in visit_config, and its math
// where the model computes (models/layers.cpp, the twin in models/manual_*.cpp).
#pragma once

#include <cstddef>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "models/mha_config.hpp"

namespace xgrad::models
{
// The values of the variant fields. Each enum's names are in enum_names below, in the enums' order.
enum class norm_kind
{
    layernorm,  // (x - mean) / sqrt(var + 1e-5) * weight + bias
    rmsnorm,    // x / sqrt(mean(x^2) + 1e-5) * weight
};
enum class position_kind
{
    learned,  // wpe added to the token embedding
    rope,     // rotary embedding of every query and key head
    none,     // only the causal mask
};
enum class mlp_kind
{
    gelu_tanh,  // GELU, tanh approximation (GPT-2)
    gelu,       // exact GELU, 0.5 x (1 + erf(x / sqrt 2))
    swiglu,     // (silu(x W_gate + b_gate) * (x W_up + b_up)) W_down + b_down
    relu2,      // relu(x)^2, on the tensors of gelu_tanh
};
enum class bias_kind
{
    mlp,   // the norms' and the MLP's biases
    all,   // also b_Q, b_K, b_V, b_O
    none,  // none at all, the norms' included
};
enum class qk_norm_kind
{
    none,  // q and k as the projections (and RoPE) make them
    rms,   // every query and key head vector q becomes q / sqrt(mean(q^2) + 1e-5), no gain
};

// A number whose 0 means "off" (logit_softcap, attention_window): 0 or a positive N, which metadata and
// flags write and read as a decimal.
template <class N>
struct off_when_zero
{
    N value = 0;
    off_when_zero(N v = 0) : value(v) {}
    operator N() const { return value; }
    bool on() const { return value != 0; }
};
template <class V>
struct is_off_when_zero : std::false_type
{
};
template <class N>
struct is_off_when_zero<off_when_zero<N>> : std::true_type
{
};

// The names of an enum's values as metadata, flags and Python spell them. Values from index `listed` on
// are later additions: a checkpoint using one names its key in "model_keys" (docs/spec.md).
template <class E>
struct enum_names;
template <>
struct enum_names<norm_kind>
{
    static constexpr const char* names[] = {"layernorm", "rmsnorm"};
    static constexpr std::size_t listed = 2;
};
template <>
struct enum_names<position_kind>
{
    static constexpr const char* names[] = {"learned", "rope", "none"};
    static constexpr std::size_t listed = 3;
};
template <>
struct enum_names<mlp_kind>
{
    static constexpr const char* names[] = {"gelu_tanh", "gelu", "swiglu", "relu2"};
    static constexpr std::size_t listed = 3;
};
template <>
struct enum_names<bias_kind>
{
    static constexpr const char* names[] = {"mlp", "all", "none"};
    static constexpr std::size_t listed = 3;
};
template <>
struct enum_names<qk_norm_kind>
{
    static constexpr const char* names[] = {"none", "rms"};
    static constexpr std::size_t listed = 2;
};

struct gpt_config
{
    std::size_t vocab_size = 0;  // V
    std::size_t block_size = 0;  // the longest T
    std::size_t layers = 0;      // L
    std::size_t d_model = 0;     // d
    std::size_t heads = 1;       // H
    std::size_t kv_heads = 0;    // G; 0 means G = H

    norm_kind norm = norm_kind::layernorm;
    position_kind position = position_kind::learned;
    double rope_base = 10000;    // b of the rotary frequencies t * b^(-2i/dh)
    mlp_kind mlp = mlp_kind::gelu_tanh;
    std::size_t mlp_hidden = 0;  // h; 0 means 4 d
    bias_kind bias = bias_kind::mlp;
    bool tied_head = true;       // logits = N(x) wte^T; false: N(x) lm_head
    qk_norm_kind qk_norm = qk_norm_kind::none;
    off_when_zero<double> logit_softcap = 0;            // c: logits = c tanh(logits / c); 0 off
    off_when_zero<std::size_t> attention_window = 0;    // w: query t sees keys t - w < s <= t; 0 off

    mha_config attention() const { return {d_model, heads, kv_heads}; }
    std::size_t kv_head_count() const { return kv_heads ? kv_heads : heads; }
    std::size_t head_width() const { return d_model / heads; }
    std::size_t hidden_width() const { return mlp_hidden ? mlp_hidden : 4 * d_model; }
    bool norm_has_bias() const { return norm == norm_kind::layernorm && bias != bias_kind::none; }
    bool mlp_has_bias() const { return bias != bias_kind::none; }
    bool attention_has_bias() const { return bias == bias_kind::all; }
    // Throws std::invalid_argument naming `op`: any size zero, d % H != 0, H % G != 0, dh odd with RoPE,
    // a rope_base that is not a positive finite number.
    void validate(const char* op) const;
};

// One field of the config: what every reader and writer of a config needs to know about it.
struct config_field
{
    const char* key;   // the metadata key and the Python keyword
    const char* flag;  // the tools' flag; "" when no tool takes it (vocab_size comes from the tokenizer)
    const char* help;  // one line, for --help and the docs
    bool is_size;      // a size: always in the metadata, required when reading it
    bool listed;       // a later variant: named in "model_keys" when it is not the default
};

// Every field of the config, in docs/spec.md's order: f(field, member). Adding a field to gpt_config means
// adding its row here; the members' types (std::size_t, double, bool, an enum above) say how its text
// reads and writes. A bool field's flag sets the opposite of the default (--untied-head).
template <class Config, class F>
void visit_config(Config& c, F&& f)
{
    f(config_field{"vocab_size", "", "vocabulary size V", true, false}, c.vocab_size);
    f(config_field{"block_size", "--block", "context length T", true, false}, c.block_size);
    f(config_field{"layers", "--layers", "transformer blocks L", true, false}, c.layers);
    f(config_field{"d_model", "--d-model", "width d", true, false}, c.d_model);
    f(config_field{"heads", "--heads", "query heads H (d % H == 0)", true, false}, c.heads);
    f(config_field{"kv_heads", "--kv-heads", "key/value heads G (H % G == 0; default H)", true, false}, c.kv_heads);
    f(config_field{"norm", "--norm", "the norm of ln_1, ln_2, ln_f", false, false}, c.norm);
    f(config_field{"position", "--position", "the position signal", false, false}, c.position);
    f(config_field{"rope_base", "--rope-base", "base b of the rotary frequencies", false, false}, c.rope_base);
    f(config_field{"mlp", "--mlp", "the MLP's activation", false, false}, c.mlp);
    f(config_field{"mlp_hidden", "--mlp-hidden", "the MLP's hidden width h (default 4 d)", false, false},
      c.mlp_hidden);
    f(config_field{"bias", "--bias", "which biases exist", false, false}, c.bias);
    f(config_field{"tied_head", "--untied-head", "a separate lm_head (d, V) instead of wte^T", false, false},
      c.tied_head);
    f(config_field{"qk_norm", "--qk-norm", "RMS-normalise every query and key head (no gain)", false, true},
      c.qk_norm);
    f(config_field{"logit_softcap", "--logit-softcap", "soft cap c of the logits, c tanh(logits / c)", false, true},
      c.logit_softcap);
    f(config_field{"attention_window", "--attention-window", "sliding attention window w (positions)", false, true},
      c.attention_window);
}

// A field's value that is not allowed: what() is "'key' = 'value' is not one of a, b, c". `key` is the
// field's key (or the flag, when a tool parsed it).
struct variant_error : std::invalid_argument
{
    variant_error(std::string key, std::string value, std::string allowed);
    std::string key, value, allowed;  // allowed: "layernorm, rmsnorm" or "a positive decimal integer"
};

// A size missing from metadata: "metadata has no 'layers' (a checkpoint stores every size: ...)".
struct missing_size_error : std::invalid_argument
{
    explicit missing_size_error(std::string key);
    std::string key;
};
// The keys of the sizes, in the config's order: vocab_size, block_size, layers, d_model, heads, kv_heads.
std::vector<std::string> size_keys();

// The text of a value, as metadata and flags write it, and back. read_field throws variant_error naming
// `key`. `allowed_text` says what a field takes ("layernorm, rmsnorm", "a positive decimal number").
std::string field_text(std::size_t v);
std::string field_text(double v);
std::string field_text(bool v);
template <class N>
std::string field_text(off_when_zero<N> v)
{
    return field_text(v.value);
}
template <class E>
std::string field_text(E v)
{
    return enum_names<E>::names[static_cast<std::size_t>(v)];
}
void read_field(const std::string& key, const std::string& text, std::size_t& out);
void read_field(const std::string& key, const std::string& text, double& out);
void read_field(const std::string& key, const std::string& text, bool& out);
void read_field(const std::string& key, const std::string& text, off_when_zero<std::size_t>& out);
void read_field(const std::string& key, const std::string& text, off_when_zero<double>& out);
std::string allowed_text(std::size_t);
std::string allowed_text(double);
std::string allowed_text(bool);
std::string allowed_text(off_when_zero<std::size_t>);
std::string allowed_text(off_when_zero<double>);
template <class E>
std::string allowed_text(E)
{
    std::string s;
    for (const char* name : enum_names<E>::names)
    {
        s += (s.empty() ? "" : ", ") + std::string(name);
    }
    return s;
}
template <class E>
void read_field(const std::string& key, const std::string& text, E& out)
{
    std::size_t k = 0;
    for (const char* name : enum_names<E>::names)
    {
        if (text == name)
        {
            out = static_cast<E>(k);
            return;
        }
        ++k;
    }
    throw variant_error(key, text, allowed_text(out));
}
template <class E>
bool is_listed_value(E v)
{
    return static_cast<std::size_t>(v) >= enum_names<E>::listed;
}
inline bool is_listed_value(std::size_t) { return false; }
inline bool is_listed_value(double) { return false; }
inline bool is_listed_value(bool) { return false; }
template <class N>
bool is_listed_value(off_when_zero<N>)
{
    return false;
}

// A field with later values (mlp's relu2): with the later variants (config_field::listed), the fields whose
// values a checkpoint's tensors may be run as (models::run_as, the flags of xgrad-sample and xgrad-gpt-npy).
template <class E>
bool has_later_values(E)
{
    if constexpr (std::is_enum_v<E>)
    {
        return enum_names<E>::listed < std::size(enum_names<E>::names);
    }
    return false;
}

template <class E>
const char* name_of(E v)
{
    return enum_names<E>::names[static_cast<std::size_t>(v)];
}

// The config with its defaults spelled out: kv_heads = H, mlp_hidden 0 when it is 4 d. Two configs of one
// model are equal in this form.
gpt_config normalised(gpt_config c);

// The config with its widths spelled out (kv_heads = G, mlp_hidden = h), another form in which two configs
// of one model are equal.
gpt_config explicit_widths(gpt_config c);

// The checkpoint's metadata of a config: the six sizes always, every other field when it is not its
// default (so a default model's metadata is what it always was), and "model_keys" naming the later keys
// it uses (docs/spec.md, "Keys a reader does not know").
std::map<std::string, std::string> config_metadata(const gpt_config& c);

// The metadata keys a config owns (every field's key and "model_keys").
bool is_config_key(const std::string& key);
// The key of the config's field `member`: key_of(&gpt_config::layers) is "layers".
template <class M>
const char* key_of(M gpt_config::*member)
{
    gpt_config c;
    const char* key = "";
    visit_config(c, [&](const config_field& f, const auto& value) {
        if (static_cast<const void*>(&value) == static_cast<const void*>(&(c.*member)))
        {
            key = f.key;
        }
    });
    return key;
}

// A config from metadata: the six sizes must be there; a variant key that is absent keeps its default.
// Keys that are not the config's are ignored, except that every key named in "model_keys" must be one of
// the config's. Throws variant_error naming the key (key "model_keys" for an unknown one there, with the
// key as value). Does not validate the sizes against each other (gpt_config::validate does).
gpt_config config_from_metadata(const std::map<std::string, std::string>& metadata);
// A config from keyword values (Python's GPT(...), xgrad.train.run): `sizes` holds the sizes already
// given; every key of `values` must be a field (an unknown key throws variant_error with key "key" and the
// key as value, the fields listed as allowed).
gpt_config config_with_values(gpt_config sizes, const std::map<std::string, std::string>& values);

// The default model of c's sizes (every other field at its default).
gpt_config with_default_variant(const gpt_config& c);
// The key of the first field (variants before sizes) in which a and b describe different models, or ""
// when they are one model;
// `value` gets a's text of it. How a converter finds what its format cannot express: it builds the config
// it can write back and compares.
std::string first_difference(const gpt_config& a, const gpt_config& b, std::string* value = nullptr);

// "norm = layernorm, position = learned, ..., tied_head = true": every field but the sizes, the MLP's
// width explicit.
std::string variant_line(const gpt_config& c);
// "vocab_size = 65, block_size = 64, ..., norm = rmsnorm": the sizes and every non-default field.
std::string describe(const gpt_config& c);
}  // namespace xgrad::models
