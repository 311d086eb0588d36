#include "train/text_data.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>

namespace xgrad::train
{
byte_vocabulary byte_vocabulary::of_text(const std::string& text)
{
    std::array<bool, 256> seen{};
    for (unsigned char c : text)
    {
        seen[c] = true;
    }
    byte_vocabulary v;
    for (int b = 0; b < 256; ++b)
    {
        if (seen[b])
        {
            v.id_of_[b] = static_cast<int>(v.bytes_.size());
            v.bytes_.push_back(static_cast<std::uint8_t>(b));
        }
    }
    return v;
}

byte_vocabulary byte_vocabulary::from_json(const std::string& json)
{
    auto bad = [&](const std::string& why) {
        return std::invalid_argument("vocab metadata: " + why + " (expected a JSON array of ascending byte values)");
    };
    std::size_t i = json.find_first_not_of(" \t\r\n");
    if (i == std::string::npos || json[i] != '[')
    {
        throw bad("does not start with '['");
    }
    byte_vocabulary v;
    ++i;
    while (true)
    {
        i = json.find_first_not_of(" \t\r\n", i);
        if (i == std::string::npos)
        {
            throw bad("unterminated array");
        }
        if (json[i] == ']' && v.bytes_.empty())
        {
            break;
        }
        std::size_t end = i;
        while (end < json.size() && std::isdigit(static_cast<unsigned char>(json[end])) && end - i < 4)
        {
            ++end;
        }
        if (end == i)
        {
            throw bad("entry " + std::to_string(v.bytes_.size()) + " is not a non-negative integer");
        }
        const int value = std::stoi(json.substr(i, end - i));
        if (value > 255)
        {
            throw bad("entry " + std::to_string(v.bytes_.size()) + " is " + std::to_string(value) + ", above 255");
        }
        if (!v.bytes_.empty() && value <= v.bytes_.back())
        {
            throw bad("entry " + std::to_string(v.bytes_.size()) + " (" + std::to_string(value) +
                      ") is not above the one before");
        }
        v.id_of_[value] = static_cast<int>(v.bytes_.size());
        v.bytes_.push_back(static_cast<std::uint8_t>(value));
        i = json.find_first_not_of(" \t\r\n", end);
        if (i != std::string::npos && json[i] == ',')
        {
            ++i;
            continue;
        }
        if (i != std::string::npos && json[i] == ']')
        {
            break;
        }
        throw bad("expected ',' or ']' after entry " + std::to_string(v.bytes_.size() - 1));
    }
    if (json.find_first_not_of(" \t\r\n", i + 1) != std::string::npos)
    {
        throw bad("text after the closing ']'");
    }
    if (v.bytes_.empty())
    {
        throw bad("empty");
    }
    return v;
}

std::string byte_vocabulary::to_json() const
{
    std::string out = "[";
    for (std::size_t i = 0; i < bytes_.size(); ++i)
    {
        out += (i ? ", " : "") + std::to_string(bytes_[i]);
    }
    return out + "]";
}

std::vector<std::int32_t> byte_vocabulary::encode(const std::string& text) const
{
    std::vector<std::int32_t> ids(text.size());
    for (std::size_t i = 0; i < text.size(); ++i)
    {
        const int id = id_of_[static_cast<unsigned char>(text[i])];
        if (id < 0)
        {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned char>(text[i]));
            throw std::invalid_argument("byte " + std::string(hex) + " at position " + std::to_string(i) +
                                        " is not in the model's vocabulary");
        }
        ids[i] = id;
    }
    return ids;
}

std::string byte_vocabulary::decode(const std::vector<std::int32_t>& ids) const
{
    std::string out;
    out.reserve(ids.size());
    for (std::int32_t id : ids)
    {
        out.push_back(static_cast<char>(byte(static_cast<std::size_t>(id))));
    }
    return out;
}

text_corpus text_corpus::of_text(const std::string& text, std::size_t block_size, const std::string& name)
{
    if (text.empty())
    {
        throw std::runtime_error(name + " is empty");
    }
    text_corpus c;
    c.vocabulary = byte_vocabulary::of_text(text);
    const std::vector<std::int32_t> ids = c.vocabulary.encode(text);
    const std::size_t train_length = text.size() * 9 / 10;  // floor(0.9 n)
    c.train.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(train_length));
    c.validation.assign(ids.begin() + static_cast<std::ptrdiff_t>(train_length), ids.end());
    for (const auto& [split, tokens] : {std::pair{"training", &c.train}, std::pair{"validation", &c.validation}})
    {
        if (tokens->size() < block_size + 1)
        {
            throw std::runtime_error(name + ": the " + std::string(split) + " split has " +
                                     std::to_string(tokens->size()) + " tokens, fewer than block + 1 = " +
                                     std::to_string(block_size + 1) + " (the file has " +
                                     std::to_string(text.size()) + " bytes)");
        }
    }
    return c;
}

text_corpus text_corpus::load(const std::string& path, std::size_t block_size)
{
    std::error_code not_regular;  // a FIFO or /dev/zero would be read without end
    if (std::filesystem::exists(path, not_regular) && !std::filesystem::is_regular_file(path, not_regular))
    {
        throw std::runtime_error(path + " is not a regular file");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in)
    {
        throw std::runtime_error("cannot read " + path);
    }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad())
    {
        throw std::runtime_error("cannot read " + path);
    }
    return of_text(text, block_size, path);
}

std::string prose_sample(const text_corpus& corpus, std::size_t length)
{
    const std::string text = corpus.vocabulary.decode(corpus.validation);
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
    if (split_length < block_size + 1 || max_windows == 0)
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

token_batch make_batch(const std::vector<std::int32_t>& split, const std::vector<std::size_t>& offsets,
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
