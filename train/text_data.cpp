// Text as tokens: the 90/10 split at a byte, each split encoded by the corpus's tokenizer (bytes or a
// SentencePiece model trained on the training split), bits per byte, and the windows of a step.
#include "train/text_data.hpp"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include "train/gpt2_tokenizer.hpp"

namespace xgrad::train
{
std::size_t token_split::width_for(std::size_t vocab_size)
{
    return vocab_size <= 256 ? 1 : vocab_size <= 65536 ? 2 : 4;
}

token_split::token_split(std::size_t vocab_size) : width_(width_for(vocab_size)) {}

void token_split::append(const std::vector<std::int32_t>& ids)
{
    const std::size_t at = raw_.size();
    raw_.resize(at + ids.size() * width_);
    std::uint8_t* out = raw_.data() + at;
    for (const std::int32_t id : ids)
    {
        const auto value = static_cast<std::uint32_t>(id);
        if (width_ == 1)
        {
            *out = static_cast<std::uint8_t>(value);
        }
        else if (width_ == 2)
        {
            const auto narrow = static_cast<std::uint16_t>(value);
            std::memcpy(out, &narrow, 2);
        }
        else
        {
            std::memcpy(out, &value, 4);
        }
        out += width_;
    }
}

std::int32_t token_split::operator[](std::size_t i) const
{
    const std::uint8_t* at = raw_.data() + i * width_;
    if (width_ == 1)
    {
        return *at;
    }
    if (width_ == 2)
    {
        std::uint16_t narrow = 0;
        std::memcpy(&narrow, at, 2);
        return narrow;
    }
    std::int32_t value = 0;
    std::memcpy(&value, at, 4);
    return value;
}

std::vector<std::int32_t> token_split::ids() const
{
    std::vector<std::int32_t> out(size());
    for (std::size_t i = 0; i < out.size(); ++i)
    {
        out[i] = (*this)[i];
    }
    return out;
}

namespace
{
void check_split_length(const std::string& name, const char* split, std::size_t tokens, std::size_t block_size,
                        std::size_t file_bytes)
{
    if (tokens < block_size + 1)
    {
        throw std::runtime_error(name + ": the " + std::string(split) + " split has " + std::to_string(tokens) +
                                 " tokens, fewer than block + 1 = " + std::to_string(block_size + 1) +
                                 " (the file has " + std::to_string(file_bytes) + " bytes)");
    }
}
// The file's bytes in a string of exactly their size (reading through a stream iterator grows the string
// by doubling: up to three times the file at once).
std::string read_text_file(const std::string& path)
{
    std::error_code not_regular;  // a FIFO or /dev/zero would be read without end
    if (std::filesystem::exists(path, not_regular) && !std::filesystem::is_regular_file(path, not_regular))
    {
        throw std::runtime_error(path + " is not a regular file");
    }
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in)
    {
        throw std::runtime_error("cannot read " + path);
    }
    const std::streamoff size = in.tellg();
    std::string text(size > 0 ? static_cast<std::size_t>(size) : 0, '\0');
    in.seekg(0);
    if (size < 0 || !in.read(text.data(), static_cast<std::streamsize>(text.size())) || in.peek() != EOF)
    {
        throw std::runtime_error("cannot read " + path + " (it changed while being read)");
    }
    return text;
}

// The tokens of text[begin, end), encoded piece by piece without copying the split: each piece ends after
// a newline (or at `end`), and SentencePiece encodes line by line, so the pieces' tokens are the split's.
// Bytes encode to exactly one token each: their split is sized once, never grown by doubling.
token_split encode_split(const tokenizer& t, const std::string& text, std::size_t begin, std::size_t end)
{
    constexpr std::size_t piece_bytes = std::size_t(1) << 20;
    token_split ids(t.size());
    if (dynamic_cast<const byte_vocabulary*>(&t))
    {
        ids.reserve(end - begin);
    }
    for (std::size_t at = begin; at < end;)
    {
        const std::size_t newline =
            at + piece_bytes < end ? text.find('\n', at + piece_bytes) : std::string::npos;
        const std::size_t stop = newline < end ? newline + 1 : end;
        ids.append(t.encode_allowing_unknown(text.substr(at, stop - at)));
        at = stop;
    }
    return ids;
}
}  // namespace

text_corpus text_corpus::of_text(const std::string& text, std::size_t block_size, const std::string& name,
                                 const tokenizer_spec& spec)
{
    if (text.empty())
    {
        throw std::runtime_error(name + " is empty");
    }
    text_corpus c;
    c.vocabulary = byte_vocabulary::of_text(text);
    c.train_bytes = text.size() * 9 / 10;  // floor(0.9 n)
    c.validation_bytes = text.size() - c.train_bytes;
    if (spec.type == tokenizer_spec::kind::bytes)
    {
        c.tokens = std::make_shared<byte_vocabulary>(c.vocabulary);
    }
    else if (spec.type == tokenizer_spec::kind::gpt2)
    {
        c.tokens = gpt2_tokenizer_of(spec);
    }
    else
    {
        c.tokens = sentencepiece_tokenizer::train(spec, text.substr(0, c.train_bytes));
    }
    c.train = encode_split(*c.tokens, text, 0, c.train_bytes);
    c.validation = encode_split(*c.tokens, text, c.train_bytes, text.size());
    check_split_length(name, "training", c.train.size(), block_size, text.size());
    check_split_length(name, "validation", c.validation.size(), block_size, text.size());
    return c;
}

text_corpus text_corpus::load(const std::string& path, std::size_t block_size, const tokenizer_spec& spec)
{
    return of_text(read_text_file(path), block_size, path, spec);
}

double text_corpus::validation_bits_per_byte(double nats_per_token) const
{
    return nats_per_token * static_cast<double>(validation.size()) / static_cast<double>(validation_bytes) /
           std::log(2.0);
}

std::string prose_sample(const text_corpus& corpus, std::size_t length)
{
    const std::string text = corpus.tokens->decode(corpus.validation.ids());
    std::size_t start = 0;
    for (std::size_t i = 1; i < text.size(); ++i)
    {
        if (text[i - 1] == '\n' && std::isalpha(static_cast<unsigned char>(text[i])))
        {
            start = i;
            break;
        }
    }
    return text.substr(start, std::min(length, text.size() - start));
}

namespace
{
// SplitMix64: turns (seed, step) into a well-mixed 64-bit seed for the step's generator.
std::uint64_t mix(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// A uniform integer in [0, n) by rejection (no modulo bias; the same on every platform).
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n)
{
    const std::uint64_t limit = std::uint64_t(-1) - std::uint64_t(-1) % n;
    std::uint64_t r;
    do
    {
        r = rng();
    } while (r >= limit);
    return r % n;
}
}  // namespace

std::vector<std::size_t> training_offsets(std::size_t split_length, std::size_t block_size, std::size_t count,
                                          std::uint64_t seed, std::uint64_t step)
{
    if (split_length < block_size + 1)
    {
        throw std::invalid_argument("training_offsets: split of " + std::to_string(split_length) +
                                    " tokens is shorter than block + 1 = " + std::to_string(block_size + 1));
    }
    std::mt19937_64 rng(mix(mix(seed) ^ step));
    const std::uint64_t choices = split_length - block_size;  // offsets 0 .. n - T - 1
    std::vector<std::size_t> offsets(count);
    for (auto& o : offsets)
    {
        o = static_cast<std::size_t>(uniform_below(rng, choices));
    }
    return offsets;
}

std::vector<std::size_t> validation_offsets(std::size_t split_length, std::size_t block_size,
                                            std::size_t max_windows)
{
    if (max_windows == 0)
    {
        throw std::invalid_argument("validation_offsets: max_windows must be at least 1");
    }
    if (split_length < block_size + 1)
    {
        throw std::invalid_argument("validation_offsets: split of " + std::to_string(split_length) +
                                    " tokens is shorter than block + 1 = " + std::to_string(block_size + 1));
    }
    const std::size_t last = split_length - block_size - 1;  // the last possible offset
    const std::size_t count = std::min(max_windows, last + 1);
    std::vector<std::size_t> offsets(count);
    for (std::size_t i = 0; i < count; ++i)
    {
        offsets[i] = count == 1 ? 0 : i * last / (count - 1);
    }
    return offsets;
}

token_batch make_batch(const token_split& split, const std::vector<std::size_t>& offsets,
                       std::size_t block_size, std::size_t first, std::size_t count)
{
    count = std::min(count, offsets.size() - std::min(first, offsets.size()));
    token_batch b{ids_t::from_shape({count, block_size}), ids_t::from_shape({count, block_size})};
    for (std::size_t r = 0; r < count; ++r)
    {
        const std::size_t o = offsets[first + r];
        if (o + block_size + 1 > split.size())
        {
            throw std::invalid_argument("make_batch: window at " + std::to_string(o) + " runs past the split's " +
                                        std::to_string(split.size()) + " tokens");
        }
        for (std::size_t t = 0; t < block_size; ++t)
        {
            b.inputs(r, t) = split[o + t];
            b.targets(r, t) = split[o + t + 1];
        }
    }
    return b;
}
}  // namespace xgrad::train
