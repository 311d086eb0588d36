// Text as training data (docs/spec.md, "Training on text"): tokens (bytes or SentencePiece), a 90/10
// split, and the windows a step trains on. Everything here is a pure function of the file, the seed and the step, so a
// run that resumes, or that is split across processes, draws exactly the windows of an unbroken run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/xtensor.hpp"
#include "train/tokenizer.hpp"

namespace xgrad::train
{
// A split's tokens, each in the fewest bytes that hold every id of its vocabulary: one for V <= 256 (every
// byte vocabulary), two for V <= 65536, four above. A 400 MB text of bytes holds 400 MB of tokens, not the
// 1.6 GB of one int32 each.
class token_split
{
public:
    token_split() = default;
    explicit token_split(std::size_t vocab_size);

    // Appends `ids` (each in [0, V), as the vocabulary's tokenizer makes them).
    void append(const std::vector<std::int32_t>& ids);
    void reserve(std::size_t tokens) { raw_.reserve(tokens * width_); }

    std::size_t size() const { return raw_.size() / width_; }
    bool empty() const { return raw_.empty(); }
    std::int32_t operator[](std::size_t i) const;
    std::int32_t front() const { return (*this)[0]; }
    // Every token as an int32 (what tokenizer::decode takes): a copy.
    std::vector<std::int32_t> ids() const;
    std::size_t bytes_per_token() const { return width_; }
    // The bytes a token of a vocabulary of `vocab_size` ids takes: 1, 2 or 4.
    static std::size_t width_for(std::size_t vocab_size);

private:
    std::size_t width_ = 4;
    std::vector<std::uint8_t> raw_;  // width_ bytes a token, in the machine's byte order
};

// A text file as tokens: the first floor(0.9 n) bytes train, the rest validate. With a SentencePiece
// tokenizer the model is trained on the training split's bytes only, and each split is encoded alone.
struct text_corpus
{
    std::shared_ptr<const tokenizer> tokens;  // encodes, decodes, and stores itself in a checkpoint
    byte_vocabulary vocabulary;               // the text's bytes (the tokenizer itself under "bytes")
    token_split train;
    token_split validation;
    std::size_t train_bytes = 0;
    std::size_t validation_bytes = 0;

    // Throws std::runtime_error with one clear line: the file cannot be read, is empty, the tokenizer
    // cannot be trained, or a split holds fewer than block_size + 1 tokens.
    static text_corpus load(const std::string& path, std::size_t block_size, const tokenizer_spec& spec = {});
    static text_corpus of_text(const std::string& text, std::size_t block_size, const std::string& name = "text",
                               const tokenizer_spec& spec = {});

    // Validation loss in bits per byte of text: nats per token x tokens / bytes / ln 2, so that models with
    // different tokenizers compare (docs/spec.md, "Training on text": val_bpb).
    double validation_bits_per_byte(double nats_per_token) const;
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
token_batch make_batch(const token_split& split, const std::vector<std::size_t>& offsets,
                       std::size_t block_size, std::size_t first = 0, std::size_t count = std::size_t(-1));
}  // namespace xgrad::train
