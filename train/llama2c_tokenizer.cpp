// llama2.c's tokenizer.bin and tokenizer.model to and from a checkpoint's vocabulary metadata, joined with
// io/llama2c's model.bin into the whole folder.
#include "train/llama2c_tokenizer.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

#include "io/binary.hpp"
#include "io/llama2c.hpp"
#include "models/gpt_config.hpp"
#include "train/tokenizer.hpp"

namespace xgrad::train
{
namespace
{
namespace fs = std::filesystem;

constexpr std::uintmax_t max_tokenizer_bytes = 256u << 20;

struct vocabulary_file
{
    std::vector<std::string> pieces;
    std::vector<float> scores;
};

vocabulary_file read_tokenizer_bin(const std::string& path, std::size_t vocab)
{
    const std::string bytes = io::read_binary_file(path, max_tokenizer_bytes);
    io::binary_cursor c{ bytes, path };
    const std::int32_t max_length = c.next<std::int32_t>("max_token_length");
    if (max_length <= 0 || max_length > (1 << 16))
    {
        io::fail(path, "max_token_length is " + std::to_string(max_length));
    }
    vocabulary_file v;
    for (std::size_t i = 0; i < vocab; ++i)
    {
        const std::string token = "token " + std::to_string(i);
        if (c.at == bytes.size())
        {
            io::fail(path,
                 "holds " + std::to_string(i) + " tokens; model.bin's vocab_size is " +
                   std::to_string(vocab));
        }
        v.scores.push_back(c.next<float>("a score"));
        const std::int32_t length = c.next<std::int32_t>("a length");
        if (length < 0 || length > max_length || bytes.size() - c.at < std::size_t(length))
        {
            io::fail(path,
                 token + " has length " + std::to_string(length) + " (max_token_length " +
                   std::to_string(max_length) + ", " + std::to_string(bytes.size() - c.at) + " bytes left)");
        }
        v.pieces.push_back(bytes.substr(c.at, std::size_t(length)));
        c.at += std::size_t(length);
    }
    if (c.at != bytes.size())
    {
        io::fail(path, "holds more than model.bin's vocab_size of " + std::to_string(vocab) + " tokens");
    }
    return v;
}

// The vocabulary as checkpoint metadata: tokenizer.model when present (its pieces must be tokenizer.bin's),
// else a byte vocabulary when every piece is one byte, ascending; else none (the returned note says so).
std::string vocabulary_metadata(const std::string& folder, const vocabulary_file& v, metadata_map& metadata)
{
    const std::string model_path = (fs::path(folder) / "tokenizer.model").string();
    if (fs::exists(model_path))
    {
        std::shared_ptr<const sentencepiece_tokenizer> sp;
        try
        {
            sp =
              sentencepiece_tokenizer::from_serialized(io::read_binary_file(model_path, max_tokenizer_bytes));
        }
        catch (const std::invalid_argument& e)
        {
            io::fail(model_path, e.what());
        }
        for (std::size_t i = 0; i < v.pieces.size(); ++i)
        {
            if (sp->size() != v.pieces.size() || sp->piece(i) != v.pieces[i])
            {
                io::fail(model_path,
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
    byte_vocabulary::from_json(json + "]").to_metadata(metadata);
    return "";
}

std::string tokenizer_bin_bytes(const tokenizer& vocabulary)
{
    std::string tok;
    std::size_t max_length = 1;
    for (std::size_t i = 0; i < vocabulary.size(); ++i)
    {
        max_length = std::max(max_length, vocabulary.piece(i).size());
    }
    io::append_binary(tok, static_cast<std::int32_t>(max_length));
    for (std::size_t i = 0; i < vocabulary.size(); ++i)
    {
        const std::string piece = vocabulary.piece(i);
        io::append_binary(tok, vocabulary.score(i));
        io::append_binary(tok, static_cast<std::int32_t>(piece.size()));
        tok += piece;
    }
    return tok;
}
} // namespace

llama2c_model read_llama2c(const std::string& folder)
{
    llama2c_model result{ io::read_llama2c_model((fs::path(folder) / "model.bin").string()), "" };
    const std::size_t vocab = models::config_from_metadata(result.model.metadata).vocab_size;
    const vocabulary_file v = read_tokenizer_bin((fs::path(folder) / "tokenizer.bin").string(), vocab);
    result.note = vocabulary_metadata(folder, v, result.model.metadata);
    return result;
}

void write_llama2c(const std::string& folder,
                   const io::safetensors_file& model,
                   const io::model_layout& layout)
{
    const std::string model_bin = io::llama2c_model_bytes(model, layout);
    const auto vocabulary =
      tokenizer_from_metadata(model.metadata, "llama2c's tokenizer.bin needs the checkpoint's vocabulary");
    if (vocabulary->size() != layout.vocab_size)
    {
        throw std::invalid_argument("the checkpoint's tokenizer has " + std::to_string(vocabulary->size()) +
                                    " tokens but its metadata \"vocab_size\" is " +
                                    std::to_string(layout.vocab_size));
    }
    io::staged_folder out(folder);
    out.write_file("model.bin", model_bin);
    out.write_file("tokenizer.bin", tokenizer_bin_bytes(*vocabulary));
    if (const auto* sp = dynamic_cast<const sentencepiece_tokenizer*>(vocabulary.get()))
    {
        out.write_file("tokenizer.model", sp->serialized());
    }
    out.commit();
}
} // namespace xgrad::train
