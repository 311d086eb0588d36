// The GPT's config as text: every field read and written through the rows of visit_config.
#include "models/gpt_config.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "autodiff/shape.hpp"

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
    if (position == position_kind::rope && head_width() % 2 != 0)
    {
        fail(op, "position = rope needs an even head width dh = d / H, got d=" + std::to_string(d_model) +
                     " H=" + std::to_string(heads) + " dh=" + std::to_string(head_width()));
    }
    // Checked with any position: a checkpoint holds rope_base whenever it differs from the default, and
    // its reader takes positive numbers only.
    if (!(rope_base > 0 && std::isfinite(rope_base)))
    {
        fail(op, "rope_base must be a positive number, got " + std::to_string(rope_base));
    }
    if (!(logit_softcap >= 0 && std::isfinite(logit_softcap)))
    {
        fail(op, "logit_softcap must be a decimal number >= 0 (0 off), got " + field_text(logit_softcap));
    }
}

variant_error::variant_error(std::string k, std::string v, std::string a)
    : std::invalid_argument("'" + k + "' = '" + v + "' is not " + (a.find(',') == std::string::npos ? "" : "one of ") +
                            a),
      key(std::move(k)), value(std::move(v)), allowed(std::move(a))
{
}

namespace
{
std::string listed_sizes()
{
    std::string s;
    for (const std::string& key : size_keys())
    {
        s += (s.size() ? ", " : " ") + key;
    }
    return s;
}
}  // namespace

missing_size_error::missing_size_error(std::string k)
    : std::invalid_argument("metadata has no '" + k + "' (a checkpoint stores every size:" + listed_sizes() + ")"),
      key(std::move(k))
{
}

std::vector<std::string> size_keys()
{
    std::vector<std::string> keys;
    gpt_config c;
    visit_config(c, [&keys](const config_field& f, const auto&) {
        if (f.is_size)
        {
            keys.push_back(f.key);
        }
    });
    return keys;
}

// ---- one value as text ---------------------------------------------------------------------------

std::string field_text(std::size_t v) { return std::to_string(v); }

// The shortest decimal that reads back as the same double.
std::string field_text(double v)
{
    char buffer[64];
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
    return ec == std::errc() ? std::string(buffer, end) : std::to_string(v);
}

std::string field_text(bool v) { return v ? "true" : "false"; }

std::string allowed_text(std::size_t) { return "a positive decimal integer"; }
std::string allowed_text(double) { return "a positive decimal number"; }
std::string allowed_text(bool) { return "true, false"; }
std::string allowed_text(off_when_zero<std::size_t>) { return "a decimal integer >= 0 (0 off)"; }
std::string allowed_text(off_when_zero<double>) { return "a decimal number >= 0 (0 off)"; }

// Sizes are decimal integers that fit 64 bits; what they multiply to is checked by the readers' own
// limits (io/checkpoint_limits.hpp, io/size_limits.hpp), which saturate instead of wrapping. Leading zeros
// are allowed ("016", "00"). False for any other text.
namespace
{
bool read_decimal(const std::string& text, std::size_t& n)
{
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    return !text.empty() && ec == std::errc() && end == text.data() + text.size() &&
           text.find_first_not_of("0123456789") == std::string::npos;
}
}  // namespace

void read_field(const std::string& key, const std::string& text, std::size_t& out)
{
    std::size_t n = 0;
    if (!read_decimal(text, n) || n == 0)
    {
        throw variant_error(key, text, allowed_text(out));
    }
    out = n;
}

void read_field(const std::string& key, const std::string& text, double& out)
{
    double x = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !(x > 0) || !std::isfinite(x))
    {
        throw variant_error(key, text, allowed_text(out));
    }
    out = x;
}

void read_field(const std::string& key, const std::string& text, off_when_zero<std::size_t>& out)
{
    std::size_t n = 0;
    if (!read_decimal(text, n))
    {
        throw variant_error(key, text, allowed_text(out));
    }
    out = n;  // 0, in any spelling ("0", "00"), is off
}

void read_field(const std::string& key, const std::string& text, off_when_zero<double>& out)
{
    double x = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
    const bool whole = !text.empty() && ec == std::errc() && end == text.data() + text.size();
    if (!whole || !(x >= 0) || !std::isfinite(x))
    {
        throw variant_error(key, text, allowed_text(out));
    }
    out = x == 0 ? 0.0 : x;  // -0 reads as 0
}

void read_field(const std::string& key, const std::string& text, bool& out)
{
    if (text != "true" && text != "false")
    {
        throw variant_error(key, text, allowed_text(out));
    }
    out = text == "true";
}

// ---- the whole config as text --------------------------------------------------------------------

gpt_config normalised(gpt_config c)
{
    c.kv_heads = c.kv_head_count();
    if (c.mlp_hidden == 4 * c.d_model)
    {
        c.mlp_hidden = 0;
    }
    return c;
}

gpt_config explicit_widths(gpt_config c)
{
    c.kv_heads = c.kv_head_count();
    c.mlp_hidden = c.hidden_width();
    return c;
}

namespace
{
struct field_value
{
    config_field field;
    std::string text;
    bool listed_value;  // a later value of an earlier field (named in model_keys)
};

std::vector<field_value> texts_of(const gpt_config& c)
{
    std::vector<field_value> all;
    gpt_config copy = c;
    visit_config(copy, [&all](const config_field& f, const auto& member) {
        all.push_back({f, field_text(member), is_listed_value(member)});
    });
    return all;
}

const std::string model_keys_key = "model_keys";
}  // namespace

std::map<std::string, std::string> config_metadata(const gpt_config& c)
{
    // The variant fields' defaults do not depend on the sizes (mlp_hidden's default is 0, "4 d").
    const std::vector<field_value> values = texts_of(normalised(c)), defaults = texts_of(normalised(gpt_config{}));
    std::map<std::string, std::string> m;
    std::string listed;
    for (std::size_t k = 0; k < values.size(); ++k)
    {
        const field_value& v = values[k];
        if (!v.field.is_size && v.text == defaults[k].text)
        {
            continue;
        }
        m[v.field.key] = v.text;
        if (!v.field.is_size && (v.field.listed || v.listed_value))
        {
            listed += (listed.empty() ? "" : ",") + std::string(v.field.key);
        }
    }
    if (!listed.empty())
    {
        m[model_keys_key] = listed;
    }
    return m;
}

bool is_config_key(const std::string& key)
{
    bool found = key == model_keys_key;
    gpt_config c;
    visit_config(c, [&](const config_field& f, const auto&) { found = found || key == f.key; });
    return found;
}

namespace
{
// Each key named in the comma-separated list must be a field of the config.
void check_model_keys(const std::string& list)
{
    std::size_t start = 0;
    while (start <= list.size())
    {
        const std::size_t comma = std::min(list.find(',', start), list.size());
        const std::string key = list.substr(start, comma - start);
        if (key == model_keys_key || !is_config_key(key))
        {
            throw variant_error(model_keys_key, key, "a model key this build knows (a newer xgrad wrote it?)");
        }
        start = comma + 1;
    }
}
}  // namespace

gpt_config config_from_metadata(const std::map<std::string, std::string>& metadata)
{
    if (const auto found = metadata.find(model_keys_key); found != metadata.end())
    {
        check_model_keys(found->second);
    }
    gpt_config c;
    visit_config(c, [&metadata](const config_field& f, auto& member) {
        const auto found = metadata.find(f.key);
        if (found != metadata.end())
        {
            read_field(f.key, found->second, member);
        }
        else if (f.is_size)
        {
            throw missing_size_error(f.key);
        }
    });
    return normalised(c);
}

gpt_config config_with_values(gpt_config c, const std::map<std::string, std::string>& values)
{
    for (const auto& [key, text] : values)
    {
        if (key == model_keys_key || !is_config_key(key))
        {
            std::string fields;  // "'key' = 'qk_normm' is not one of vocab_size, block_size, ..."
            visit_config(c, [&fields](const config_field& f, const auto&) {
                fields += (fields.empty() ? "" : ", ") + std::string(f.key);
            });
            throw variant_error("key", key, fields);
        }
    }
    visit_config(c, [&values](const config_field& f, auto& member) {
        if (const auto found = values.find(f.key); found != values.end())
        {
            read_field(f.key, found->second, member);
        }
    });
    return normalised(c);
}

gpt_config with_default_variant(const gpt_config& c)
{
    std::map<std::string, std::string> sizes;
    for (const field_value& v : texts_of(normalised(c)))
    {
        if (v.field.is_size && v.text != "0")
        {
            sizes[v.field.key] = v.text;
        }
    }
    return config_with_values(gpt_config{}, sizes);
}

std::string first_difference(const gpt_config& a, const gpt_config& b, std::string* value)
{
    const std::vector<field_value> ta = texts_of(explicit_widths(a)), tb = texts_of(explicit_widths(b));
    for (const bool sizes : {false, true})  // a variant names the difference better than a width does
    {
        for (std::size_t k = 0; k < ta.size(); ++k)
        {
            if (ta[k].field.is_size == sizes && ta[k].text != tb[k].text)
            {
                if (value)
                {
                    *value = ta[k].text;
                }
                return ta[k].field.key;
            }
        }
    }
    return "";
}

std::string variant_line(const gpt_config& c)
{
    std::string s;
    for (const field_value& v : texts_of(explicit_widths(c)))
    {
        if (!v.field.is_size)
        {
            s += (s.empty() ? "" : ", ") + std::string(v.field.key) + " = " + v.text;
        }
    }
    return s;
}

std::string describe(const gpt_config& c)
{
    const std::map<std::string, std::string> written = config_metadata(c);
    std::string s;
    for (const field_value& v : texts_of(c))
    {
        if (written.count(v.field.key))
        {
            s += (s.empty() ? "" : ", ") + std::string(v.field.key) + " = " + written.at(v.field.key);
        }
    }
    return s;
}
}  // namespace xgrad::models
