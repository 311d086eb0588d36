// Text as training data (../shared/SPEC.md, "Training on text"): byte tokens, a 90/10 split, and the
// windows a step trains on. Everything here is a pure function of the file, the seed and the step, so a
// run that resumes, or that is split across processes, draws exactly the windows of an unbroken run.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "autodiff/xtensor.hpp"

namespace xgrad::train
{
// Token id -> byte value, ascending: the distinct bytes of a text (so V <= 256).
class byte_vocabulary
{
public:
    byte_vocabulary() { id_of_.fill(-1); }
    static byte_vocabulary of_text(const std::string& text);
    // The checkpoint's "vocab" metadata: a JSON array of byte values, e.g. "[10, 32, 33]". Throws
    // std::invalid_argument naming the problem (not an array, a value outside 0..255, not ascending).
    static byte_vocabulary from_json(const std::string& json);
    std::string to_json() const;

    std::size_t size() const { return bytes_.size(); }
    std::uint8_t byte(std::size_t id) const { return bytes_.at(id); }
    int id(std::uint8_t byte) const { return id_of_[byte]; }  // -1 when the byte is not in the vocabulary
    // Throws std::invalid_argument naming the first byte that has no token.
    std::vector<std::int32_t> encode(const std::string& text) const;
    std::string decode(const std::vector<std::int32_t>& ids) const;

private:
    std::vector<std::uint8_t> bytes_;
    std::array<int, 256> id_of_{};
};

// A text file as tokens: the first floor(0.9 n) bytes train, the rest validate.
struct text_corpus
{
    byte_vocabulary vocabulary;
    std::vector<std::int32_t> train;
    std::vector<std::int32_t> validation;

    // Throws std::runtime_error with one clear line: the file cannot be read, is empty, or a split holds
    // fewer than block_size + 1 tokens.
    static text_corpus load(const std::string& path, std::size_t block_size);
    static text_corpus of_text(const std::string& text, std::size_t block_size, const std::string& name = "text");
};

// Up to `length` characters of the validation split, starting at its first line that begins with a
// letter (prose reads better on a picture's axes than indentation): the attention maps' sentence.
std::string prose_sample(const text_corpus& corpus, std::size_t length);

// A batch of windows: inputs (B, T) and targets (B, T), the inputs shifted by one.
struct token_batch
{
    ids_t inputs;
    ids_t targets;
};

// Offsets of `count` windows of block_size + 1 tokens drawn for one training step, from a generator
// seeded by (seed, step): the same for every process, resumed or not.
std::vector<std::size_t> training_offsets(std::size_t split_length, std::size_t block_size, std::size_t count,
                                          std::uint64_t seed, std::uint64_t step);

// Offsets of the validation windows: evenly spaced over the split, at most max_windows of them (every
// possible window when the split has fewer).
std::vector<std::size_t> validation_offsets(std::size_t split_length, std::size_t block_size,
                                            std::size_t max_windows);

// The windows at `offsets` (a sub-range [first, first + count) of them, for one process's share).
token_batch make_batch(const std::vector<std::int32_t>& split, const std::vector<std::size_t>& offsets,
                       std::size_t block_size, std::size_t first = 0, std::size_t count = std::size_t(-1));
}  // namespace xgrad::train
