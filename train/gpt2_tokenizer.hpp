// GPT-2's byte-level BPE (docs/tokenizers.md, "GPT-2's tokenizer"): the vocabulary (vocab.json, piece ->
// id) and the merges (merges.txt, one "left right" pair per line in rank order) read and checked, and text
// encoded and ids decoded exactly as OpenAI's encoder.py does:
//   1. the text is cut into pieces by encoder.py's pattern (contractions, letter runs, number runs, other
//      runs, each with an optional leading space, and whitespace runs), matched by PCRE2;
//   2. each piece's UTF-8 bytes become printable characters (the byte-to-unicode table), one token each;
//   3. adjacent pairs are merged, always the pair of lowest rank first, every occurrence of it left to
//      right, until no pair has a rank.
// One addition to encoder.py, as Hugging Face's GPT-2 tokenizer does: the text "<|endoftext|>" is the
// vocabulary's <|endoftext|> token when the vocabulary has one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "train/tokenizer.hpp"

namespace xgrad::train
{
// What the reader accepts. GPT-2's own files are 1.0 MB and 0.46 MB for 50257 tokens; the limits keep a
// hostile file from sizing anything, and the two files base64-encoded within a checkpoint's header.
struct gpt2_limits
{
    static constexpr std::size_t max_file_bytes = 16u << 20; // each of vocab.json and merges.txt
    static constexpr std::size_t max_tokens = 1u << 21;
    static constexpr std::size_t max_piece_bytes = 1024;      // a vocabulary piece, as UTF-8
    static constexpr std::size_t cache_words = 1u << 16;      // merged words remembered by one encode
    static constexpr std::size_t max_cached_word_bytes = 256; // longer words are merged every time
};

class gpt2_tokenizer : public tokenizer
{
public:
    // The two files' bytes. Throws std::invalid_argument with one line naming the file and the problem:
    // vocab.json that is not a JSON object of string -> integer (or nests, or holds too many tokens), ids
    // that collide or leave a gap in 0..V-1, a byte without its one-character token; merges.txt without
    // its "#version" first line, a line that is not two pieces, a piece or a merged pair not in the
    // vocabulary.
    // `vocab_name` and `merges_name` start the messages.
    static std::shared_ptr<const gpt2_tokenizer> from_files(const std::string& vocab_json,
                                                            const std::string& merges_txt,
                                                            const std::string& vocab_name = "vocab.json",
                                                            const std::string& merges_name = "merges.txt");
    // `folder`/vocab.json and `folder`/merges.txt, each refused past gpt2_limits::max_file_bytes unread.
    static std::shared_ptr<const gpt2_tokenizer> from_folder(const std::string& folder);
    ~gpt2_tokenizer() override;

    std::size_t size() const override;
    // Throws std::invalid_argument naming the first byte that is not valid UTF-8 and its position.
    std::vector<std::int32_t> encode(const std::string& text) const override;
    // As encode, but a byte that is not valid UTF-8 becomes its own byte token (a piece of its own).
    std::vector<std::int32_t> encode_allowing_unknown(const std::string& text) const override;
    // The tokens' bytes with each ill-formed UTF-8 subpart replaced by U+FFFD, as Python's
    // bytes.decode("utf-8", errors="replace") does (encoder.py's decode). Throws for an id outside [0, V).
    std::string decode(const std::vector<std::int32_t>& ids) const override;
    // The tokens' bytes as they are.
    std::string decode_bytes(const std::vector<std::int32_t>& ids) const;
    std::string piece(std::size_t id) const override; // the token's bytes
    float score(std::size_t) const override { return 0.0f; }
    // "tokenizer" = "gpt2", "tokenizer_vocab" and "tokenizer_merges": the two files' bytes in base64.
    void to_metadata(metadata_map& metadata) const override;

    // The pieces encoder.py's pattern cuts valid UTF-8 `text` into (step 1 above).
    std::vector<std::string> pretokenize(const std::string& text) const;
    const std::string& vocab_json() const;
    const std::string& merges_txt() const;

private:
    struct tables;
    explicit gpt2_tokenizer(std::unique_ptr<tables> t);
    std::vector<std::int32_t> encode_text(const std::string& text, bool allow_invalid) const;
    std::unique_ptr<tables> tables_;
};

// The tokenizer of a checkpoint whose metadata "tokenizer" is "gpt2": "tokenizer_vocab" and
// "tokenizer_merges" in base64. Throws std::invalid_argument starting with `source`, naming the key.
std::shared_ptr<const gpt2_tokenizer> gpt2_tokenizer_from_metadata(const metadata_map& metadata,
                                                                   const std::string& source);

// --tokenizer gpt2:DIR: the two files of spec.folder. Throws option_error (a bad value) naming --tokenizer
// and the file.
std::shared_ptr<const gpt2_tokenizer> gpt2_tokenizer_of(const tokenizer_spec& spec);

// Hugging Face GPT-2 folders hold the tokenizer as vocab.json and merges.txt beside the model. Reads
// both into `metadata` (to_metadata's keys) when `folder` has them; does nothing when it has neither.
// Throws std::invalid_argument naming the file when only one is there or they do not parse.
void read_hf_gpt2_tokenizer(const std::string& folder, metadata_map& metadata);
// The files that give `metadata`'s GPT-2 tokenizer back ("vocab.json" and "merges.txt" -> their bytes),
// the keys that held them taken out of `metadata`; no files when the metadata's tokenizer is not GPT-2's.
std::map<std::string, std::string> take_hf_gpt2_tokenizer(metadata_map& metadata, const std::string& source);

// `bytes` with each maximal ill-formed subpart of UTF-8 replaced by U+FFFD (Unicode's recommended practice,
// which Python's errors="replace" follows): valid UTF-8 comes back unchanged.
std::string replace_invalid_utf8(const std::string& bytes);

// The length of the valid UTF-8 character at `text[at]`, or 0 when the bytes there do not start one.
std::size_t utf8_character_length(const std::string& text, std::size_t at);
} // namespace xgrad::train
