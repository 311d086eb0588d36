// Layouts from metadata, the tensors each variant declares, and staged output folders.
#include "io/model_layout.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <vector>

namespace xgrad::io
{
namespace
{
namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& source, const std::string& problem)
{
    throw format_error(source + ": " + problem);
}

std::size_t size_value(const std::map<std::string, std::string>& m,
                       const char* key,
                       const std::string& source)
{
    const auto it = m.find(key);
    if (it == m.end())
    {
        fail(source, std::string("metadata has no \"") + key + "\"");
    }
    const std::string& v = it->second;
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos ||
        std::stoul(v) == 0)
    {
        fail(source,
             std::string("metadata \"") + key + "\" is " + printable(v) + ", not a positive decimal integer");
    }
    return std::stoul(v);
}

std::string choice(const std::map<std::string, std::string>& m,
                   const char* key,
                   std::initializer_list<const char*> allowed,
                   const std::string& source)
{
    const auto it = m.find(key);
    if (it == m.end())
    {
        return *allowed.begin();
    }
    std::string list;
    for (const char* a : allowed)
    {
        if (it->second == a)
        {
            return a;
        }
        list += (list.empty() ? "" : ", ") + std::string(a);
    }
    fail(source, std::string("metadata \"") + key + "\" is " + printable(it->second) + "; allowed: " + list);
}

// Sets `key` to `value` when it is not the default; otherwise keeps an equal explicit entry.
void set_variant(std::map<std::string, std::string>& m,
                 const std::string& key,
                 const std::string& value,
                 bool is_default,
                 bool present_equal)
{
    if (!is_default)
    {
        m[key] = value;
    }
    else if (!present_equal)
    {
        m.erase(key);
    }
}

std::string decimal(double x)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    return buf;
}
} // namespace

std::string shape_text(const shape_t& shape)
{
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i)
    {
        s += (i ? ", " : "") + std::to_string(shape[i]);
    }
    return s + (shape.size() == 1 ? ",)" : ")");
}

model_layout model_layout::from_metadata(const std::map<std::string, std::string>& m,
                                         const std::string& source)
{
    model_layout l;
    l.vocab_size = size_value(m, "vocab_size", source);
    l.block_size = size_value(m, "block_size", source);
    l.layers = size_value(m, "layers", source);
    l.d_model = size_value(m, "d_model", source);
    l.heads = size_value(m, "heads", source);
    l.kv_heads = size_value(m, "kv_heads", source);
    if (l.d_model % l.heads != 0 || l.heads % l.kv_heads != 0)
    {
        fail(source,
             "metadata d_model " + std::to_string(l.d_model) + ", heads " + std::to_string(l.heads) +
               ", kv_heads " + std::to_string(l.kv_heads) + ": d % H and H % G must be 0");
    }
    l.norm = choice(m, "norm", { "layernorm", "rmsnorm" }, source);
    l.position = choice(m, "position", { "learned", "rope", "none" }, source);
    l.mlp = choice(m, "mlp", { "gelu_tanh", "gelu", "swiglu" }, source);
    l.bias = choice(m, "bias", { "mlp", "all", "none" }, source);
    l.tied_head = choice(m, "tied_head", { "true", "false" }, source) == "true";
    if (const auto it = m.find("rope_base"); it != m.end())
    {
        char* end = nullptr;
        l.rope_base = std::strtod(it->second.c_str(), &end);
        if (it->second.empty() || *end != '\0' || !(l.rope_base > 0) || l.rope_base > 1e300)
        {
            fail(source,
                 "metadata \"rope_base\" is " + printable(it->second) + ", not a positive decimal number");
        }
    }
    if (m.count("mlp_hidden"))
    {
        l.mlp_hidden = size_value(m, "mlp_hidden", source);
    }
    if (l.position == "rope" && l.head_dim() % 2 != 0)
    {
        fail(source,
             "metadata position is rope but the head width " + std::to_string(l.head_dim()) + " is odd");
    }
    return l;
}

void model_layout::to_metadata(std::map<std::string, std::string>& m) const
{
    const std::pair<const char*, std::size_t> sizes[] = {
        { "vocab_size", vocab_size }, { "block_size", block_size }, { "layers", layers },
        { "d_model", d_model },       { "heads", heads },           { "kv_heads", kv_heads }
    };
    for (const auto& [key, value] : sizes)
    {
        m[key] = std::to_string(value);
    }
    const auto has = [&](const char* key, const std::string& v) { return m.count(key) && m.at(key) == v; };
    set_variant(m, "norm", norm, norm == "layernorm", has("norm", norm));
    set_variant(m, "position", position, position == "learned", has("position", position));
    set_variant(m, "mlp", mlp, mlp == "gelu_tanh", has("mlp", mlp));
    set_variant(m, "bias", bias, bias == "mlp", has("bias", bias));
    set_variant(m, "tied_head", "false", tied_head, has("tied_head", "true"));
    const bool rope_default = rope_base == 10000;
    set_variant(m,
                "rope_base",
                decimal(rope_base),
                rope_default,
                m.count("rope_base") && std::strtod(m.at("rope_base").c_str(), nullptr) == rope_base);
    set_variant(m,
                "mlp_hidden",
                std::to_string(hidden()),
                hidden() == 4 * d_model,
                has("mlp_hidden", std::to_string(hidden())));
}

std::map<std::string, shape_t> model_layout::tensor_shapes() const
{
    const std::size_t d = d_model, kv = kv_heads * head_dim(), h = hidden();
    std::map<std::string, shape_t> s;
    s["wte"] = { vocab_size, d };
    if (position == "learned")
    {
        s["wpe"] = { block_size, d };
    }
    const auto norm_tensors = [&](const std::string& name)
    {
        s[name + ".weight"] = { d };
        if (norm_biases())
        {
            s[name + ".bias"] = { d };
        }
    };
    for (std::size_t i = 0; i < layers; ++i)
    {
        const std::string b = "blocks." + std::to_string(i) + ".";
        norm_tensors(b + "ln_1");
        norm_tensors(b + "ln_2");
        s[b + "attn.W_Q"] = { d, d };
        s[b + "attn.W_K"] = { d, kv };
        s[b + "attn.W_V"] = { d, kv };
        s[b + "attn.W_O"] = { d, d };
        if (attention_biases())
        {
            s[b + "attn.b_Q"] = { d };
            s[b + "attn.b_K"] = { kv };
            s[b + "attn.b_V"] = { kv };
            s[b + "attn.b_O"] = { d };
        }
        const bool swiglu = mlp == "swiglu";
        const std::vector<std::string> inputs =
          swiglu ? std::vector<std::string>{ "gate", "up" } : std::vector<std::string>{ "fc" };
        for (const std::string& in : inputs)
        {
            s[b + "mlp.W_" + in] = { d, h };
            if (mlp_biases())
            {
                s[b + "mlp.b_" + in] = { h };
            }
        }
        const std::string out = swiglu ? "down" : "proj";
        s[b + "mlp.W_" + out] = { h, d };
        if (mlp_biases())
        {
            s[b + "mlp.b_" + out] = { d };
        }
    }
    norm_tensors("ln_f");
    if (!tied_head)
    {
        s["lm_head"] = { d, vocab_size };
    }
    return s;
}

void check_tensors(safetensors_file& file, const model_layout& layout, const std::string& source)
{
    for (auto it = file.tensors.begin(); it != file.tensors.end();)
    {
        it = it->first.rfind("optim.", 0) == 0 ? file.tensors.erase(it) : std::next(it);
    }
    const auto expected = layout.tensor_shapes();
    for (const auto& [name, shape] : expected)
    {
        const auto it = file.tensors.find(name);
        if (it == file.tensors.end())
        {
            fail(source,
                 "tensor " + name + " is missing (the metadata's variant declares it, shape " +
                   shape_text(shape) + ")");
        }
        const shape_t got(it->second.values.shape().begin(), it->second.values.shape().end());
        if (got != shape)
        {
            fail(source,
                 "tensor " + name + " has shape " + shape_text(got) + ", the metadata implies " +
                   shape_text(shape));
        }
    }
    for (const auto& [name, tensor] : file.tensors)
    {
        if (!expected.count(name))
        {
            fail(source,
                 "tensor " + printable(name) + " is not a parameter of the model its metadata describes");
        }
    }
}

safetensors_file read_model_checkpoint(const std::string& path, model_layout& layout)
{
    safetensors_file file = read_safetensors(path);
    layout = model_layout::from_metadata(file.metadata, path);
    check_tensors(file, layout, path);
    return file;
}

// ---- staged folders -------------------------------------------------------------------------------

namespace
{
void sync_path(const std::string& path, int flags)
{
    const int fd = ::open(path.c_str(), flags);
    if (fd >= 0)
    {
        ::fsync(fd);
        ::close(fd);
    }
}
} // namespace

staged_folder::staged_folder(const std::string& final_path)
  : final_(final_path)
{
    if (final_.empty())
    {
        throw std::runtime_error("output path is empty");
    }
    std::error_code ec;
    if (fs::exists(final_, ec) && !(fs::is_directory(final_, ec) && fs::is_empty(final_, ec)))
    {
        throw std::runtime_error(final_ +
                                 " exists and is not an empty folder; remove it or choose another name");
    }
    const fs::path parent = fs::absolute(final_).parent_path();
    std::string pattern =
      (parent / ("." + fs::path(final_).filename().string() + ".partial-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
    {
        throw std::runtime_error("cannot create a folder beside " + final_ + " (" + std::strerror(errno) +
                                 ")");
    }
    staging_ = pattern;
}

staged_folder::~staged_folder()
{
    if (!committed_)
    {
        std::error_code ec;
        fs::remove_all(staging_, ec);
    }
}

std::string staged_folder::path(const std::string& name) const
{
    return (fs::path(staging_) / name).string();
}

void staged_folder::write_file(const std::string& name, const std::string& bytes) const
{
    const std::string p = path(name);
    {
        std::ofstream out(p, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        out.flush();
        if (!out)
        {
            throw std::runtime_error("cannot write " + p);
        }
    }
    sync_path(p, O_RDONLY);
}

void staged_folder::commit()
{
    sync_path(staging_, O_RDONLY | O_DIRECTORY);
    std::error_code ec;
    fs::rename(staging_, final_, ec);
    if (ec)
    {
        throw std::runtime_error("cannot move the output into place at " + final_ + " (" + ec.message() +
                                 ")");
    }
    committed_ = true;
    sync_path(fs::absolute(final_).parent_path().string(), O_RDONLY | O_DIRECTORY);
}
} // namespace xgrad::io
