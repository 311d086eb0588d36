// Tokenizers for training on text (docs/spec.md, "Training on text"): the byte vocabulary (token id =
// position in the ascending list of a text's distinct bytes) and SentencePiece models (BPE or unigram)
// trained on the training split with fixed settings, so the same flags give the same model bytes. Both
// implement one interface: encode, decode, vocabulary size, and the checkpoint metadata that restores them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace xgrad::train
{
using metadata_map = std::map<std::string, std::string>;

class tokenizer
{
public:
    virtual ~tokenizer() = default;
    virtual std::size_t size() const = 0; // the vocabulary size V
    // Throws std::invalid_argument naming the first character that has no token and its byte position.
    virtual std::vector<std::int32_t> encode(const std::string& text) const = 0;
    // As encode, but a character without a token becomes the unknown token (SentencePiece's id 0); for the
    // validation split, which may hold characters the training split never showed.
    virtual std::vector<std::int32_t> encode_allowing_unknown(const std::string& text) const = 0;
    // Throws std::invalid_argument for an id outside [0, V).
    virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;
    // The text token `id` stands for, as an exporter writes it (a byte; a SentencePiece piece with its
    // word-boundary mark U+2581 written as a space), and its score (0 for bytes).
    virtual std::string piece(std::size_t id) const = 0;
    virtual float score(std::size_t id) const = 0;
    // Writes the keys that restore this tokenizer: "vocab" for bytes; "tokenizer" and "tokenizer_model"
    // for SentencePiece. Removes the other kind's keys.
    virtual void to_metadata(metadata_map& metadata) const = 0;
};

// Token id -> byte value, ascending: the distinct bytes of a text (so V <= 256).
class byte_vocabulary : public tokenizer
{
public:
    byte_vocabulary() { id_of_.fill(-1); }
    static byte_vocabulary of_text(const std::string& text);
    // The checkpoint's "vocab" metadata: a JSON array of byte values, e.g. "[10, 32, 33]". Throws
    // std::invalid_argument naming the problem (not an array, a value outside 0..255, not ascending).
    static byte_vocabulary from_json(const std::string& json);
    std::string to_json() const;

    std::size_t size() const override { return bytes_.size(); }
    std::uint8_t byte(std::size_t id) const { return bytes_.at(id); }
    int id(std::uint8_t byte) const { return id_of_[byte]; } // -1 when the byte is not in the vocabulary
    std::vector<std::int32_t> encode(const std::string& text) const override;
    std::vector<std::int32_t> encode_allowing_unknown(const std::string& text) const override
    {
        return encode(text);
    }
    std::string decode(const std::vector<std::int32_t>& ids) const override;
    std::string piece(std::size_t id) const override { return std::string(1, static_cast<char>(byte(id))); }
    float score(std::size_t) const override { return 0.0f; }
    void to_metadata(metadata_map& metadata) const override;

private:
    std::vector<std::uint8_t> bytes_;
    std::array<int, 256> id_of_{};
};

// What `--tokenizer` asks for: "bytes", "bpe:N", "unigram:N" or "gpt2:DIR" (GPT-2's vocab.json and
// merges.txt in DIR, train/gpt2_tokenizer.hpp).
struct tokenizer_spec
{
    enum class kind
    {
        bytes,
        bpe,
        unigram,
        gpt2
    };
    kind type = kind::bytes;
    std::size_t vocab_size = 0; // N for bpe and unigram
    std::string folder;         // DIR for gpt2

    // Throws std::invalid_argument naming "--tokenizer", the value and the forms allowed.
    static tokenizer_spec parse(const std::string& text);
    std::string to_string() const;
};

// A SentencePiece model. Ids 0, 1, 2 are <unk>, <s>, </s> (SentencePiece's and Llama's defaults), id 3 is
// the newline and id 4 the tab: text is encoded line by line, lines joined by the newline token, so the
// model sees exactly the bytes of the file. No normalisation, no dummy prefix, no byte fallback:
// decode(encode(text)) == text for every text whose characters the training split holds.
class sentencepiece_tokenizer : public tokenizer
{
public:
    // Trains on `training_text` (split into lines) with pinned settings: one thread, no sampling or
    // shuffling of sentences, a fixed seed, every character covered. Throws std::runtime_error with
    // SentencePiece's message when it cannot train (e.g. a text too small for N).
    static std::shared_ptr<const sentencepiece_tokenizer> train(const tokenizer_spec& spec,
                                                                const std::string& training_text);
    // Throws std::invalid_argument when `serialized` is not a SentencePiece model with the newline token.
    static std::shared_ptr<const sentencepiece_tokenizer> from_serialized(const std::string& serialized);
    ~sentencepiece_tokenizer() override;

    std::size_t size() const override;
    std::vector<std::int32_t> encode(const std::string& text) const override;
    std::vector<std::int32_t> encode_allowing_unknown(const std::string& text) const override;
    std::string decode(const std::vector<std::int32_t>& ids) const override;
    std::string piece(std::size_t id) const override;
    float score(std::size_t id) const override;
    void to_metadata(metadata_map& metadata) const override;
    const std::string& serialized() const { return serialized_; }

private:
    struct processor;
    explicit sentencepiece_tokenizer(const std::string& serialized);
    std::vector<std::int32_t> encode_lines(const std::string& text, bool allow_unknown) const;
    std::unique_ptr<processor> processor_;
    std::string serialized_;
};

// The tokenizer a checkpoint's metadata describes: "tokenizer" absent or "bytes" -> "vocab";
// "sentencepiece" -> "tokenizer_model" (base64); "gpt2" -> "tokenizer_vocab" and "tokenizer_merges".
// Throws std::invalid_argument starting with `source` and
// naming the key: missing, an unknown "tokenizer" value (and the values allowed), base64 or a model that
// does not parse.
std::shared_ptr<const tokenizer> tokenizer_from_metadata(const metadata_map& metadata,
                                                         const std::string& source);

// Standard base64 (RFC 4648, with padding). from_base64 throws std::invalid_argument on any other text.
std::string to_base64(const std::string& bytes);
std::string from_base64(const std::string& text);
} // namespace xgrad::train
