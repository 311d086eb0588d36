// llama2.c's legacy model.bin to and from xgrad's names: weights transposed between (in, out) and
// nn.Linear's (out, in), the seven-int header from and to the metadata's sizes.
#include "io/llama2c.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "io/binary.hpp"

namespace xgrad::io
{
namespace
{
namespace fs = std::filesystem;

constexpr std::int32_t version_magic = 0x616b3432; // "ak42": version 1 and later
constexpr std::int32_t max_size_field = 1 << 24;
constexpr std::size_t header_ints = 7;

// rows x columns float32 as stored; transposed to (columns, rows) when asked.
array<double> read_matrix(binary_cursor& c, std::size_t rows, std::size_t columns, bool transpose)
{
    array<double> out =
      array<double>::from_shape(transpose ? shape_t{ columns, rows } : shape_t{ rows, columns });
    for (std::size_t r = 0; r < rows; ++r)
    {
        for (std::size_t col = 0; col < columns; ++col)
        {
            (transpose ? out(col, r) : out(r, col)) = c.next<float>("weights");
        }
    }
    return out;
}

array<double> read_vector(binary_cursor& c, std::size_t n)
{
    array<double> out = array<double>::from_shape({ n });
    for (double& v : out)
    {
        v = c.next<float>("weights");
    }
    return out;
}

struct header
{
    std::size_t dim, hidden, layers, heads, kv_heads, vocab, seq_len;
    bool shared;
    std::size_t head_dim() const { return dim / heads; }
    unsigned __int128 floats() const // each field below 2^24: no overflow in 128 bits
    {
        using wide = unsigned __int128;
        const wide d = dim, kv = wide(kv_heads) * head_dim();
        return wide(vocab) * d * (shared ? 1 : 2) +
               wide(layers) * (2 * d + 2 * d * d + 2 * d * kv + 3 * d * hidden) + d +
               wide(seq_len) * head_dim();
    }
};

header read_header(binary_cursor& c)
{
    if (c.bytes.size() >= 4 && c.next<std::int32_t>("magic") == version_magic)
    {
        fail(c.path,
             "starts with llama2.c's magic \"ak42\" (version 1 or later); only version 0 (legacy) files are "
             "read");
    }
    c.at = 0;
    const char* names[header_ints] = { "dim",        "hidden_dim", "n_layers",   "n_heads",
                                       "n_kv_heads", "vocab_size", "max_seq_len" };
    std::int64_t v[header_ints];
    for (std::size_t i = 0; i < header_ints; ++i)
    {
        v[i] = c.next<std::int32_t>(names[i]);
        const std::int64_t magnitude = i == 5 ? std::llabs(v[i]) : v[i];
        if (magnitude <= 0 || magnitude > max_size_field)
        {
            fail(c.path,
                 std::string("header field ") + names[i] + " is " + std::to_string(v[i]) +
                   ", not a size in 1.." + std::to_string(max_size_field));
        }
    }
    header h{ std::size_t(v[0]), std::size_t(v[1]), std::size_t(v[2]),
              std::size_t(v[3]), std::size_t(v[4]), std::size_t(std::llabs(v[5])),
              std::size_t(v[6]), v[5] > 0 };
    if (h.dim % h.heads != 0 || h.heads % h.kv_heads != 0 || h.head_dim() % 2 != 0)
    {
        fail(c.path,
             "header dim " + std::to_string(h.dim) + ", n_heads " + std::to_string(h.heads) +
               ", n_kv_heads " + std::to_string(h.kv_heads) +
               ": dim % n_heads, n_heads % n_kv_heads and the head width's parity must be 0");
    }
    return h;
}

void put_float(std::string& out, double v)
{
    append_binary(out, static_cast<float>(v));
}

// A (rows, columns) matrix as float32, transposed first when asked (xgrad (in, out) -> nn.Linear (out, in)).
void put_matrix(std::string& out, const array<double>& m, bool transpose)
{
    const std::size_t rows = m.shape()[0], columns = m.dimension() == 2 ? m.shape()[1] : 1;
    if (!transpose || m.dimension() == 1)
    {
        for (double v : m)
        {
            put_float(out, v);
        }
        return;
    }
    for (std::size_t c = 0; c < columns; ++c)
    {
        for (std::size_t r = 0; r < rows; ++r)
        {
            put_float(out, m(r, c));
        }
    }
}

// freqs_cos / freqs_sin as llama2.c's precompute_freqs_cis makes them: angle t * base^(-2i / head_dim).
void put_frequencies(std::string& out, std::size_t seq_len, std::size_t head_dim, bool sine)
{
    for (std::size_t t = 0; t < seq_len; ++t)
    {
        for (std::size_t i = 0; i < head_dim / 2; ++i)
        {
            const double angle = double(t) * std::pow(10000.0, -double(2 * i) / double(head_dim));
            put_float(out, sine ? std::sin(angle) : std::cos(angle));
        }
    }
}

void refuse_unless(bool ok, const std::string& key, const std::string& value)
{
    if (!ok)
    {
        throw std::invalid_argument(
          "llama2c cannot express metadata \"" + key + "\" = " + value +
          " (llama2.c is norm rmsnorm, position rope, rope_base 10000, mlp swiglu, bias none)");
    }
}
} // namespace

safetensors_file read_llama2c_model(const std::string& path)
{
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(path, ec);
    if (ec)
    {
        fail(path, "cannot read (" + ec.message() + ")");
    }
    std::string head_bytes;
    {
        std::ifstream in(path, std::ios::binary);
        head_bytes.resize(std::min<std::uintmax_t>(size, 4 * header_ints));
        in.read(head_bytes.data(), static_cast<std::streamsize>(head_bytes.size()));
    }
    binary_cursor hc{ head_bytes, path };
    const header h = read_header(hc);
    const unsigned __int128 wide = 4 * header_ints + 4 * h.floats();
    const std::uint64_t expected = wide > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(wide);
    if (size != expected)
    {
        fail(path,
             "is " + std::to_string(size) + " bytes; its header (dim " + std::to_string(h.dim) + ", " +
               std::to_string(h.layers) + " layers, vocab " + std::to_string(h.vocab) + ") implies " +
               std::to_string(expected));
    }
    const std::string bytes = read_binary_file(path, expected);
    binary_cursor c{ bytes, path, 4 * header_ints };

    safetensors_file model;
    auto& t = model.tensors;
    const std::size_t kv = h.kv_heads * h.head_dim();
    const auto layered = [&](const char* name, std::size_t rows, std::size_t columns, bool matrix)
    {
        for (std::size_t i = 0; i < h.layers; ++i)
        {
            t["blocks." + std::to_string(i) + "." + name] = { "F32",
                                                              matrix ? read_matrix(c, rows, columns, true)
                                                                     : read_vector(c, rows) };
        }
    };
    t["wte"] = { "F32", read_matrix(c, h.vocab, h.dim, false) };
    layered("ln_1.weight", h.dim, 1, false);
    layered("attn.W_Q", h.dim, h.dim, true);
    layered("attn.W_K", kv, h.dim, true);
    layered("attn.W_V", kv, h.dim, true);
    layered("attn.W_O", h.dim, h.dim, true);
    layered("ln_2.weight", h.dim, 1, false);
    layered("mlp.W_gate", h.hidden, h.dim, true);
    layered("mlp.W_down", h.dim, h.hidden, true);
    layered("mlp.W_up", h.hidden, h.dim, true);
    t["ln_f.weight"] = { "F32", read_vector(c, h.dim) };
    c.at += 4 * h.seq_len * h.head_dim(); // freqs_cos and freqs_sin: implied by the rotary embedding
    if (!h.shared)
    {
        t["lm_head"] = { "F32", read_matrix(c, h.vocab, h.dim, true) };
    }

    model_layout layout;
    layout.vocab_size = h.vocab;
    layout.block_size = h.seq_len;
    layout.layers = h.layers;
    layout.d_model = h.dim;
    layout.heads = h.heads;
    layout.kv_heads = h.kv_heads;
    layout.norm = models::norm_kind::rmsnorm;
    layout.position = models::position_kind::rope;
    layout.mlp = models::mlp_kind::swiglu;
    layout.mlp_hidden = h.hidden;
    layout.bias = models::bias_kind::none;
    layout.tied_head = h.shared;
    layout.to_metadata(model.metadata);
    check_tensors(model, layout, path);
    return model;
}

std::string llama2c_model_bytes(const safetensors_file& model, const model_layout& layout)
{
    // What llama2.c's model.bin can say: its sizes (G free), RMSNorm, RoPE of base 10000, a SwiGLU MLP
    // of any width without biases, a shared or separate head. Anything else is refused by name.
    models::gpt_config expressible = models::with_default_variant(layout);
    expressible.norm = models::norm_kind::rmsnorm;
    expressible.position = models::position_kind::rope;
    expressible.mlp = models::mlp_kind::swiglu;
    expressible.mlp_hidden = layout.mlp_hidden;
    expressible.bias = models::bias_kind::none;
    expressible.tied_head = layout.tied_head;
    std::string value;
    const std::string key = models::first_difference(layout, expressible, &value);
    refuse_unless(key.empty(), key, value);

    std::string bin;
    const std::size_t sizes[header_ints] = { layout.d_model,   layout.hidden(), layout.layers,
                                             layout.heads,     layout.kv_heads, layout.vocab_size,
                                             layout.block_size };
    for (std::size_t i = 0; i < header_ints; ++i)
    {
        const std::int32_t v = static_cast<std::int32_t>(sizes[i]);
        append_binary<std::int32_t>(bin, i == 5 && !layout.tied_head ? -v : v);
    }
    const auto& t = model.tensors;
    const auto layered = [&](const char* name, bool transpose)
    {
        for (std::size_t i = 0; i < layout.layers; ++i)
        {
            put_matrix(bin, t.at("blocks." + std::to_string(i) + "." + name).values, transpose);
        }
    };
    put_matrix(bin, t.at("wte").values, false);
    layered("ln_1.weight", false);
    for (const char* w : { "attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O" })
    {
        layered(w, true);
    }
    layered("ln_2.weight", false);
    for (const char* w : { "mlp.W_gate", "mlp.W_down", "mlp.W_up" })
    {
        layered(w, true);
    }
    put_matrix(bin, t.at("ln_f.weight").values, false);
    put_frequencies(bin, layout.block_size, layout.head_dim(), false);
    put_frequencies(bin, layout.block_size, layout.head_dim(), true);
    if (!layout.tied_head)
    {
        put_matrix(bin, t.at("lm_head").values, true);
    }
    return bin;
}
} // namespace xgrad::io
