// llama2.c's legacy model.bin and tokenizer.bin to and from xgrad's names: weights transposed between
// (in, out) and nn.Linear's (out, in), the seven-int header from and to the metadata's sizes.
#include "io/llama2c.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "train/tokenizer.hpp"

namespace xgrad::io
{
namespace
{
namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& source, const std::string& problem)
{
    throw format_error(source + ": " + problem);
}

constexpr std::int32_t version_magic = 0x616b3432; // "ak42": version 1 and later
constexpr std::int32_t max_size_field = 1 << 24;
constexpr std::uintmax_t max_tokenizer_bytes = 256u << 20;
constexpr std::size_t header_ints = 7;

std::string read_file(const std::string& path, std::uintmax_t limit)
{
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec)
    {
        fail(path, "cannot read (" + ec.message() + ")");
    }
    if (size > limit)
    {
        fail(path, "is " + std::to_string(size) + " bytes, more than its header can describe");
    }
    std::ifstream in(path, std::ios::binary);
    std::string bytes(size, '\0');
    if (!in.read(bytes.data(), static_cast<std::streamsize>(size)))
    {
        fail(path, "cannot read");
    }
    return bytes;
}

// Reads consecutive little-endian values, refusing to run past the end.
struct cursor
{
    const std::string& bytes;
    const std::string& path;
    std::size_t at = 0;

    template<class V>
    V next(const char* what)
    {
        if (bytes.size() - at < sizeof(V))
        {
            fail(path, std::string("truncated at byte ") + std::to_string(at) + " (reading " + what + ")");
        }
        V v;
        std::memcpy(&v, bytes.data() + at, sizeof(V));
        at += sizeof(V);
        return v;
    }
    // rows x columns float32 as stored; transposed to (columns, rows) when asked.
    array<double> matrix(std::size_t rows, std::size_t columns, bool transpose)
    {
        array<double> out =
          array<double>::from_shape(transpose ? shape_t{ columns, rows } : shape_t{ rows, columns });
        for (std::size_t r = 0; r < rows; ++r)
        {
            for (std::size_t c = 0; c < columns; ++c)
            {
                (transpose ? out(c, r) : out(r, c)) = next<float>("weights");
            }
        }
        return out;
    }
    array<double> vector(std::size_t n)
    {
        array<double> out = array<double>::from_shape({ n });
        for (double& v : out)
        {
            v = next<float>("weights");
        }
        return out;
    }
};

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

header read_header(cursor& c)
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

struct vocabulary_file
{
    std::vector<std::string> pieces;
    std::vector<float> scores;
};

vocabulary_file read_tokenizer_bin(const std::string& path, std::size_t vocab)
{
    const std::string bytes = read_file(path, max_tokenizer_bytes);
    cursor c{ bytes, path };
    const std::int32_t max_length = c.next<std::int32_t>("max_token_length");
    if (max_length <= 0 || max_length > (1 << 16))
    {
        fail(path, "max_token_length is " + std::to_string(max_length));
    }
    vocabulary_file v;
    for (std::size_t i = 0; i < vocab; ++i)
    {
        const std::string token = "token " + std::to_string(i);
        if (c.at == bytes.size())
        {
            fail(path,
                 "holds " + std::to_string(i) + " tokens; model.bin's vocab_size is " +
                   std::to_string(vocab));
        }
        v.scores.push_back(c.next<float>("a score"));
        const std::int32_t length = c.next<std::int32_t>("a length");
        if (length < 0 || length > max_length || bytes.size() - c.at < std::size_t(length))
        {
            fail(path,
                 token + " has length " + std::to_string(length) + " (max_token_length " +
                   std::to_string(max_length) + ", " + std::to_string(bytes.size() - c.at) + " bytes left)");
        }
        v.pieces.push_back(bytes.substr(c.at, std::size_t(length)));
        c.at += std::size_t(length);
    }
    if (c.at != bytes.size())
    {
        fail(path, "holds more than model.bin's vocab_size of " + std::to_string(vocab) + " tokens");
    }
    return v;
}

// The vocabulary as checkpoint metadata: tokenizer.model when present (its pieces must be tokenizer.bin's),
// else a byte vocabulary when every piece is one byte, ascending; else none (the returned note says so).
std::string vocabulary_metadata(const std::string& folder,
                                const vocabulary_file& v,
                                std::map<std::string, std::string>& metadata)
{
    const std::string model_path = (fs::path(folder) / "tokenizer.model").string();
    if (fs::exists(model_path))
    {
        std::shared_ptr<const train::sentencepiece_tokenizer> sp;
        try
        {
            sp = train::sentencepiece_tokenizer::from_serialized(read_file(model_path, max_tokenizer_bytes));
        }
        catch (const std::invalid_argument& e)
        {
            fail(model_path, e.what());
        }
        for (std::size_t i = 0; i < v.pieces.size(); ++i)
        {
            if (sp->size() != v.pieces.size() || sp->piece(i) != v.pieces[i])
            {
                fail(model_path,
                     "disagrees with tokenizer.bin (" + std::to_string(sp->size()) + " pieces against " +
                       std::to_string(v.pieces.size()) + ", first difference at token " + std::to_string(i) +
                       ")");
            }
        }
        sp->to_metadata(metadata);
        return "";
    }
    std::string json = "[";
    for (std::size_t i = 0; i < v.pieces.size(); ++i)
    {
        if (v.pieces[i].size() != 1 ||
            (i && (unsigned char)v.pieces[i][0] <= (unsigned char)v.pieces[i - 1][0]))
        {
            return "tokenizer.bin is not a byte vocabulary and no tokenizer.model is beside it: the "
                   "checkpoint has no tokenizer";
        }
        json += (i ? ", " : "") + std::to_string((unsigned char)v.pieces[i][0]);
    }
    train::byte_vocabulary::from_json(json + "]").to_metadata(metadata);
    return "";
}

void put_int(std::string& out, std::int32_t v)
{
    out.append(reinterpret_cast<const char*>(&v), 4);
}

void put_float(std::string& out, float v)
{
    out.append(reinterpret_cast<const char*>(&v), 4);
}

// A (rows, columns) matrix as float32, transposed first when asked (xgrad (in, out) -> nn.Linear (out, in)).
void put_matrix(std::string& out, const array<double>& m, bool transpose)
{
    const std::size_t rows = m.shape()[0], columns = m.dimension() == 2 ? m.shape()[1] : 1;
    if (!transpose || m.dimension() == 1)
    {
        for (double v : m)
        {
            put_float(out, static_cast<float>(v));
        }
        return;
    }
    for (std::size_t c = 0; c < columns; ++c)
    {
        for (std::size_t r = 0; r < rows; ++r)
        {
            put_float(out, static_cast<float>(m(r, c)));
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
            put_float(out, static_cast<float>(sine ? std::sin(angle) : std::cos(angle)));
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

llama2c_model read_llama2c(const std::string& folder)
{
    const std::string model_path = (fs::path(folder) / "model.bin").string();
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(model_path, ec);
    if (ec)
    {
        fail(model_path, "cannot read (" + ec.message() + ")");
    }
    std::string head_bytes;
    {
        std::ifstream in(model_path, std::ios::binary);
        head_bytes.resize(std::min<std::uintmax_t>(size, 4 * header_ints));
        in.read(head_bytes.data(), static_cast<std::streamsize>(head_bytes.size()));
    }
    cursor hc{ head_bytes, model_path };
    const header h = read_header(hc);
    const unsigned __int128 wide = 4 * header_ints + 4 * h.floats();
    const std::uint64_t expected = wide > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(wide);
    if (size != expected)
    {
        fail(model_path,
             "is " + std::to_string(size) + " bytes; its header (dim " + std::to_string(h.dim) + ", " +
               std::to_string(h.layers) + " layers, vocab " + std::to_string(h.vocab) + ") implies " +
               std::to_string(expected));
    }
    const std::string bytes = read_file(model_path, expected);
    cursor c{ bytes, model_path, 4 * header_ints };

    llama2c_model result;
    auto& t = result.model.tensors;
    const std::size_t kv = h.kv_heads * h.head_dim();
    const auto layered = [&](const char* name, std::size_t rows, std::size_t columns, bool matrix)
    {
        for (std::size_t i = 0; i < h.layers; ++i)
        {
            t["blocks." + std::to_string(i) + "." + name] = { "F32",
                                                              matrix ? c.matrix(rows, columns, true)
                                                                     : c.vector(rows) };
        }
    };
    t["wte"] = { "F32", c.matrix(h.vocab, h.dim, false) };
    layered("ln_1.weight", h.dim, 1, false);
    layered("attn.W_Q", h.dim, h.dim, true);
    layered("attn.W_K", kv, h.dim, true);
    layered("attn.W_V", kv, h.dim, true);
    layered("attn.W_O", h.dim, h.dim, true);
    layered("ln_2.weight", h.dim, 1, false);
    layered("mlp.W_gate", h.hidden, h.dim, true);
    layered("mlp.W_down", h.dim, h.hidden, true);
    layered("mlp.W_up", h.hidden, h.dim, true);
    t["ln_f.weight"] = { "F32", c.vector(h.dim) };
    c.at += 4 * h.seq_len * h.head_dim(); // freqs_cos and freqs_sin: implied by the rotary embedding
    if (!h.shared)
    {
        t["lm_head"] = { "F32", c.matrix(h.vocab, h.dim, true) };
    }

    model_layout layout;
    layout.vocab_size = h.vocab;
    layout.block_size = h.seq_len;
    layout.layers = h.layers;
    layout.d_model = h.dim;
    layout.heads = h.heads;
    layout.kv_heads = h.kv_heads;
    layout.norm = "rmsnorm";
    layout.position = "rope";
    layout.mlp = "swiglu";
    layout.mlp_hidden = h.hidden;
    layout.bias = "none";
    layout.tied_head = h.shared;
    layout.to_metadata(result.model.metadata);
    check_tensors(result.model, layout, model_path);
    const vocabulary_file v = read_tokenizer_bin((fs::path(folder) / "tokenizer.bin").string(), h.vocab);
    result.note = vocabulary_metadata(folder, v, result.model.metadata);
    return result;
}

void write_llama2c(const std::string& folder, const safetensors_file& model, const model_layout& layout)
{
    refuse_unless(layout.norm == "rmsnorm", "norm", layout.norm);
    refuse_unless(layout.position == "rope", "position", layout.position);
    refuse_unless(layout.rope_base == 10000,
                  "rope_base",
                  model.metadata.count("rope_base") ? model.metadata.at("rope_base") : "");
    refuse_unless(layout.mlp == "swiglu", "mlp", layout.mlp);
    refuse_unless(layout.bias == "none", "bias", layout.bias);
    const auto vocabulary = train::tokenizer_from_metadata(
      model.metadata, "llama2c's tokenizer.bin needs the checkpoint's vocabulary");
    if (vocabulary->size() != layout.vocab_size)
    {
        throw std::invalid_argument("the checkpoint's tokenizer has " + std::to_string(vocabulary->size()) +
                                    " tokens but its metadata \"vocab_size\" is " +
                                    std::to_string(layout.vocab_size));
    }

    std::string bin;
    const std::size_t sizes[header_ints] = { layout.d_model,   layout.hidden(), layout.layers,
                                             layout.heads,     layout.kv_heads, layout.vocab_size,
                                             layout.block_size };
    for (std::size_t i = 0; i < header_ints; ++i)
    {
        const std::int32_t v = static_cast<std::int32_t>(sizes[i]);
        put_int(bin, i == 5 && !layout.tied_head ? -v : v);
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

    std::string tok;
    std::size_t max_length = 1;
    for (std::size_t i = 0; i < vocabulary->size(); ++i)
    {
        max_length = std::max(max_length, vocabulary->piece(i).size());
    }
    put_int(tok, static_cast<std::int32_t>(max_length));
    for (std::size_t i = 0; i < vocabulary->size(); ++i)
    {
        const std::string piece = vocabulary->piece(i);
        put_float(tok, vocabulary->score(i));
        put_int(tok, static_cast<std::int32_t>(piece.size()));
        tok += piece;
    }

    staged_folder out(folder);
    out.write_file("model.bin", bin);
    out.write_file("tokenizer.bin", tok);
    if (const auto* sp = dynamic_cast<const train::sentencepiece_tokenizer*>(vocabulary.get()))
    {
        out.write_file("tokenizer.model", sp->serialized());
    }
    out.commit();
}
} // namespace xgrad::io
