// The byte vocabulary, SentencePiece models behind the tokenizer interface, and base64 for storing a
// model in a checkpoint's string metadata.
#include "train/tokenizer.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cctype>
#include <cstdio>
#include <stdexcept>
#include <unordered_map>

#include "io/escape.hpp"
#include "train/gpt2_tokenizer.hpp"
#include "train/option_error.hpp"
#include "train/sentencepiece_model_check.hpp"

namespace sentencepiece::logging
{
void SetMinLogLevel(int level); // in libsentencepiece, not declared by its public headers
}

namespace xgrad::train
{
// ---- bytes ----------------------------------------------------------------------------------------

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
    auto bad = [&](const std::string& why)
    {
        return std::invalid_argument("vocab metadata: " + why +
                                     " (expected a JSON array of ascending byte values)");
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
            throw bad("entry " + std::to_string(v.bytes_.size()) + " is " + std::to_string(value) +
                      ", above 255");
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
            throw std::invalid_argument("byte " + io::hex_byte(static_cast<unsigned char>(text[i])) +
                                        " at position " + std::to_string(i) +
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
        if (id < 0 || static_cast<std::size_t>(id) >= bytes_.size())
        {
            throw std::invalid_argument("decode: token " + std::to_string(id) +
                                        " is outside the vocabulary of " + std::to_string(bytes_.size()));
        }
        out.push_back(static_cast<char>(bytes_[static_cast<std::size_t>(id)]));
    }
    return out;
}

void byte_vocabulary::to_metadata(metadata_map& metadata) const
{
    for (const char* key : { "tokenizer", "tokenizer_model", "tokenizer_vocab", "tokenizer_merges" })
    {
        metadata.erase(key);
    }
    metadata["vocab"] = to_json();
}

// ---- the tokenizer option ----------------------------------------------------------------------------------

tokenizer_spec tokenizer_spec::parse(const std::string& text)
{
    const auto bad = [&]
    {
        return option_error("{}: '" + option_error::literal(text) +
                              "' is not one of bytes, bpe:N, unigram:N (N a vocabulary size, 8 to 65536), gpt2:DIR",
                            {"tokenizer"});
    };
    if (text == "bytes")
    {
        return {};
    }
    if (text.rfind("gpt2:", 0) == 0 && text.size() > 5)
    {
        tokenizer_spec spec;
        spec.type = kind::gpt2;
        spec.folder = text.substr(5);
        return spec;
    }
    const std::size_t colon = text.find(':');
    if (colon == std::string::npos)
    {
        throw bad();
    }
    const std::string name = text.substr(0, colon);
    const std::string number = text.substr(colon + 1);
    if ((name != "bpe" && name != "unigram") || number.empty() || number.size() > 5 ||
        number.find_first_not_of("0123456789") != std::string::npos)
    {
        throw bad();
    }
    tokenizer_spec spec;
    spec.type = name == "bpe" ? kind::bpe : kind::unigram;
    spec.vocab_size = std::stoul(number);
    if (spec.vocab_size < 8 || spec.vocab_size > 65536)
    {
        throw bad();
    }
    return spec;
}

std::string tokenizer_spec::to_string() const
{
    switch (type)
    {
        case kind::bpe:
            return "bpe:" + std::to_string(vocab_size);
        case kind::unigram:
            return "unigram:" + std::to_string(vocab_size);
        case kind::gpt2:
            return "gpt2:" + folder;
        default:
            return "bytes";
    }
}

// ---- SentencePiece --------------------------------------------------------------------------------

namespace
{
const char* const newline_piece = "\n";
// User-defined symbols: always one token each. The tab too, because SentencePiece's trainer reads a tab
// in a sentence as the start of a frequency column ("word<tab>freq") and so never learns it.
const char* const atomic_symbols = "\n,\t";
const char* const sentence_breaks = "\n\t";
const std::string word_mark = "\xe2\x96\x81"; // U+2581, SentencePiece's stand-in for a space

// The training split's pieces between newlines and tabs, one sentence each (empty ones skipped).
class line_iterator : public sentencepiece::SentenceIterator
{
public:
    explicit line_iterator(const std::string& text)
      : text_(text)
    {
        advance_to_line(0);
    }
    bool done() const override { return begin_ >= text_.size(); }
    void Next() override { advance_to_line(next_); }
    const std::string& value() const override { return line_; }
    sentencepiece::util::Status status() const override { return {}; }

private:
    // SentencePiece skips sentences longer than its max_sentence_length (4192 bytes): a longer line is cut
    // before a space (pieces never span one, so nothing is lost), or else at a character boundary.
    static constexpr std::size_t longest = 4000;

    void advance_to_line(std::size_t from)
    {
        begin_ = std::min(text_.find_first_not_of(sentence_breaks, from), text_.size());
        std::size_t end = std::min(text_.find_first_of(sentence_breaks, begin_), text_.size());
        next_ = end + 1;
        if (end - begin_ > longest)
        {
            const std::size_t space = text_.rfind(' ', begin_ + longest);
            end = space != std::string::npos && space > begin_ ? space : begin_ + longest;
            while (end > begin_ + 1 && (static_cast<unsigned char>(text_[end]) & 0xc0) == 0x80)
            {
                --end;  // not inside a UTF-8 character
            }
            next_ = end;
        }
        line_ = begin_ < text_.size() ? text_.substr(begin_, end - begin_) : std::string();
    }
    const std::string& text_;
    std::size_t begin_ = 0, next_ = 0;
    std::string line_;
};

// The byte length of the UTF-8 character starting with `lead` (1 for a byte that starts none).
std::size_t utf8_length(unsigned char lead)
{
    return lead >= 0xf0 && lead < 0xf8 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
}

std::vector<int> checked_ids(const std::vector<std::int32_t>& ids, std::size_t size)
{
    for (std::int32_t id : ids)
    {
        if (id < 0 || static_cast<std::size_t>(id) >= size)
        {
            throw std::invalid_argument("decode: token " + std::to_string(id) +
                                        " is outside the vocabulary of " + std::to_string(size));
        }
    }
    return std::vector<int>(ids.begin(), ids.end());
}
} // namespace

struct sentencepiece_tokenizer::processor
{
    sentencepiece::SentencePieceProcessor sp;
    int newline_id = -1;
};

sentencepiece_tokenizer::sentencepiece_tokenizer(const std::string& serialized)
  : processor_(std::make_unique<processor>())
  , serialized_(serialized)
{
    check_sentencepiece_model(serialized);
    const auto status = processor_->sp.LoadFromSerializedProto(serialized);
    if (!status.ok())
    {
        throw std::invalid_argument("tokenizer_model: not a SentencePiece model (" + status.ToString() + ")");
    }
    processor_->newline_id = processor_->sp.PieceToId(newline_piece);
    if (processor_->sp.IsUnknown(processor_->newline_id))
    {
        throw std::invalid_argument("tokenizer_model: the SentencePiece model has no newline piece");
    }
}

sentencepiece_tokenizer::~sentencepiece_tokenizer() = default;

std::shared_ptr<const sentencepiece_tokenizer> sentencepiece_tokenizer::train(
  const tokenizer_spec& spec,
  const std::string& training_text)
{
    if (spec.type == tokenizer_spec::kind::bytes)
    {
        throw std::invalid_argument("sentencepiece_tokenizer::train: the bytes tokenizer needs no training");
    }
    const std::unordered_map<std::string, std::string> settings = {
        { "model_type", spec.type == tokenizer_spec::kind::bpe ? "bpe" : "unigram" },
        { "vocab_size", std::to_string(spec.vocab_size) },
        { "character_coverage", "1.0" },
        { "num_threads", "1" },
        { "shuffle_input_sentence", "false" },
        { "input_sentence_size", "0" },
        { "normalization_rule_name", "identity" },
        { "remove_extra_whitespaces", "false" },
        { "add_dummy_prefix", "false" },
        { "user_defined_symbols", atomic_symbols },
        { "hard_vocab_limit", "false" },
        { "minloglevel", "2" },
    };
    sentencepiece::logging::SetMinLogLevel(2);
    sentencepiece::SetRandomGeneratorSeed(1);
    line_iterator lines(training_text);
    if (lines.done())
    {
        throw option_error("{} " + option_error::literal(spec.to_string()) + ": the training split has no text to train on", {"tokenizer"},
                           option_problem::disagrees_with_files);
    }
    std::string serialized;
    const auto status = sentencepiece::SentencePieceTrainer::Train(settings, &lines, &serialized);
    if (!status.ok())
    {
        throw option_error("{} " + option_error::literal(spec.to_string()) +
                               ": SentencePiece cannot train on the training split (" +
                               option_error::literal(status.ToString()) + ")", {"tokenizer"},
                           option_problem::disagrees_with_files);
    }
    return from_serialized(serialized);
}

std::shared_ptr<const sentencepiece_tokenizer> sentencepiece_tokenizer::from_serialized(
  const std::string& serialized)
{
    sentencepiece::logging::SetMinLogLevel(2);
    return std::shared_ptr<const sentencepiece_tokenizer>(new sentencepiece_tokenizer(serialized));
}

std::size_t sentencepiece_tokenizer::size() const
{
    return static_cast<std::size_t>(processor_->sp.GetPieceSize());
}

std::vector<std::int32_t> sentencepiece_tokenizer::encode_lines(const std::string& text,
                                                                bool allow_unknown) const
{
    std::vector<std::int32_t> ids;
    std::vector<int> line_ids;
    std::size_t begin = 0;
    while (begin <= text.size())
    {
        const std::size_t end = std::min(text.find('\n', begin), text.size());
        line_ids.clear();
        if (end > begin)
        {
            processor_->sp.Encode(text.substr(begin, end - begin), &line_ids).IgnoreError();
        }
        for (int id : line_ids)
        {
            if (!allow_unknown && processor_->sp.IsUnknown(id))
            {
                for (std::size_t i = begin; i < end; i += utf8_length(static_cast<unsigned char>(text[i])))
                {
                    const std::string c = text.substr(i, utf8_length(static_cast<unsigned char>(text[i])));
                    if (processor_->sp.IsUnknown(processor_->sp.PieceToId(c == " " ? word_mark : c)))
                    {
                        throw std::invalid_argument("the character starting with byte " +
                                                    io::hex_byte(static_cast<unsigned char>(text[i])) +
                                                    " at position " + std::to_string(i) +
                                                    " is not in the tokenizer's vocabulary");
                    }
                }
                throw std::invalid_argument("line at byte " + std::to_string(begin) +
                                            " holds text the tokenizer cannot encode");
            }
            ids.push_back(id);
        }
        if (end < text.size())
        {
            ids.push_back(processor_->newline_id);
        }
        begin = end + 1;
    }
    return ids;
}

std::vector<std::int32_t> sentencepiece_tokenizer::encode(const std::string& text) const
{
    return encode_lines(text, false);
}

std::vector<std::int32_t> sentencepiece_tokenizer::encode_allowing_unknown(const std::string& text) const
{
    return encode_lines(text, true);
}

std::string sentencepiece_tokenizer::decode(const std::vector<std::int32_t>& ids) const
{
    const std::vector<int> all = checked_ids(ids, size());
    std::string out, line_text;
    std::vector<int> line;
    for (std::size_t i = 0; i <= all.size(); ++i)
    {
        if (i < all.size() && all[i] != processor_->newline_id)
        {
            line.push_back(all[i]);
            continue;
        }
        processor_->sp.Decode(line, &line_text).IgnoreError();
        out += line_text;
        out += i < all.size() ? "\n" : "";
        line.clear();
    }
    return out;
}

std::string sentencepiece_tokenizer::piece(std::size_t id) const
{
    std::string p =
      processor_->sp.IdToPiece(static_cast<int>(checked_ids({ static_cast<std::int32_t>(id) }, size())[0]));
    for (std::size_t at = p.find(word_mark); at != std::string::npos; at = p.find(word_mark, at + 1))
    {
        p.replace(at, word_mark.size(), " ");
    }
    return p;
}

float sentencepiece_tokenizer::score(std::size_t id) const
{
    return processor_->sp.GetScore(
      static_cast<int>(checked_ids({ static_cast<std::int32_t>(id) }, size())[0]));
}

void sentencepiece_tokenizer::to_metadata(metadata_map& metadata) const
{
    for (const char* key : { "vocab", "tokenizer_vocab", "tokenizer_merges" })
    {
        metadata.erase(key);
    }
    metadata["tokenizer"] = "sentencepiece";
    metadata["tokenizer_model"] = to_base64(serialized_);
}

// ---- from metadata --------------------------------------------------------------------------------

std::shared_ptr<const tokenizer> tokenizer_from_metadata(const metadata_map& metadata,
                                                         const std::string& source)
{
    const auto kind = metadata.find("tokenizer");
    if (kind == metadata.end() || kind->second == "bytes")
    {
        const auto vocab = metadata.find("vocab");
        if (vocab == metadata.end())
        {
            throw std::invalid_argument(source +
                                        ": no \"vocab\" metadata (a model trained on text stores its bytes)");
        }
        try
        {
            return std::make_shared<byte_vocabulary>(byte_vocabulary::from_json(vocab->second));
        }
        catch (const std::invalid_argument& e)
        {
            throw std::invalid_argument(source + ": " + e.what());
        }
    }
    if (kind->second == "gpt2")
    {
        return gpt2_tokenizer_from_metadata(metadata, source);
    }
    if (kind->second != "sentencepiece")
    {
        throw std::invalid_argument(source + ": metadata \"tokenizer\" is '" + kind->second.substr(0, 40) +
                                    "'; allowed: bytes, sentencepiece, gpt2");
    }
    const auto model = metadata.find("tokenizer_model");
    if (model == metadata.end())
    {
        throw std::invalid_argument(
          source + ": metadata \"tokenizer\" is sentencepiece but \"tokenizer_model\" is missing");
    }
    try
    {
        return sentencepiece_tokenizer::from_serialized(from_base64(model->second));
    }
    catch (const std::invalid_argument& e)
    {
        throw std::invalid_argument(source + ": " + e.what());
    }
}

// ---- base64 ---------------------------------------------------------------------------------------

namespace
{
const char* const base64_alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
    {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z')
    {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9')
    {
        return c - '0' + 52;
    }
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}
} // namespace

std::string to_base64(const std::string& bytes)
{
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (std::size_t i = 0; i < bytes.size(); i += 3)
    {
        std::uint32_t group = 0;
        const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
        for (std::size_t k = 0; k < 3; ++k)
        {
            group = group << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
        }
        for (std::size_t k = 0; k < 4; ++k)
        {
            out += k <= n ? base64_alphabet[(group >> (18 - 6 * k)) & 63] : '=';
        }
    }
    return out;
}

std::string from_base64(const std::string& text)
{
    if (text.size() % 4 != 0)
    {
        throw std::invalid_argument("tokenizer_model: not base64 (length " + std::to_string(text.size()) +
                                    " is not a multiple of 4)");
    }
    std::string out;
    out.reserve(text.size() / 4 * 3);
    for (std::size_t i = 0; i < text.size(); i += 4)
    {
        const bool last = i + 4 == text.size();
        const std::size_t padding =
          last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
        std::uint32_t group = 0;
        for (std::size_t k = 0; k < 4; ++k)
        {
            const int v = k >= 4 - padding ? 0 : base64_value(text[i + k]);
            if (v < 0)
            {
                throw std::invalid_argument("tokenizer_model: not base64 (character " +
                                            std::to_string(i + k) + ")");
            }
            group = group << 6 | static_cast<std::uint32_t>(v);
        }
        for (std::size_t k = 0; k < 3 - padding; ++k)
        {
            out += static_cast<char>((group >> (16 - 8 * k)) & 0xff);
        }
    }
    return out;
}
} // namespace xgrad::train
