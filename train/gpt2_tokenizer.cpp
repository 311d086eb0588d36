// GPT-2's byte-level BPE: the reader of vocab.json and merges.txt, the pre-tokenizing pattern on PCRE2,
// the byte-to-unicode table, merges by rank (a heap, so a long word costs n log n), and UTF-8 with
// Python's errors="replace".
#include "train/gpt2_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <queue>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "io/escape.hpp"
#include "train/option_error.hpp"

namespace xgrad::train
{
namespace
{
namespace fs = std::filesystem;
using json = nlohmann::json;

[[noreturn]] void throw_invalid(const std::string& source, const std::string& problem)
{
    throw std::invalid_argument(source + ": " + problem);
}

// encoder.py's pattern. Python's `regex` module reads \s as Unicode's White_Space property, which is
// [\t-\r\x{85}\p{Z}]; PCRE2's \s differs from it (it also takes U+180E), so the pattern spells it out.
const char* const pretokenizing_pattern =
  R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\t-\r\x{85}\p{Z}\p{L}\p{N}]+)"
  R"(|[\t-\r\x{85}\p{Z}]+(?![^\t-\r\x{85}\p{Z}])|[\t-\r\x{85}\p{Z}]+)";
const std::string end_of_text = "<|endoftext|>";

std::string utf8_of(std::uint32_t cp)
{
    std::string s;
    if (cp < 0x80)
    {
        s += static_cast<char>(cp);
    }
    else if (cp < 0x800)
    {
        s += static_cast<char>(0xc0 | cp >> 6);
        s += static_cast<char>(0x80 | (cp & 0x3f));
    }
    else if (cp < 0x10000)
    {
        s += static_cast<char>(0xe0 | cp >> 12);
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        s += static_cast<char>(0x80 | (cp & 0x3f));
    }
    else
    {
        s += static_cast<char>(0xf0 | cp >> 18);
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        s += static_cast<char>(0x80 | (cp & 0x3f));
    }
    return s;
}

// encoder.py's bytes_to_unicode: the printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ stand for themselves; the
// other 68 bytes, in ascending order, for U+0100, U+0101, ...
std::array<std::uint32_t, 256> byte_to_code_point()
{
    std::array<std::uint32_t, 256> table{};
    std::uint32_t next = 256;
    for (std::uint32_t b = 0; b < 256; ++b)
    {
        const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        table[b] = printable ? b : next++;
    }
    return table;
}

// The range the byte after UTF-8 lead byte `lead` must fall in, and the character's length (0: no lead).
struct utf8_lead
{
    std::size_t length;
    unsigned char second_low, second_high;
};

utf8_lead lead_of(unsigned char c)
{
    if (c < 0x80)
    {
        return { 1, 0, 0 };
    }
    if (c >= 0xc2 && c <= 0xdf)
    {
        return { 2, 0x80, 0xbf };
    }
    if (c >= 0xe0 && c <= 0xef)
    {
        return { 3,
                 static_cast<unsigned char>(c == 0xe0 ? 0xa0 : 0x80),
                 static_cast<unsigned char>(c == 0xed ? 0x9f : 0xbf) }; // no overlong form, no surrogate
    }
    if (c >= 0xf0 && c <= 0xf4)
    {
        return { 4,
                 static_cast<unsigned char>(c == 0xf0 ? 0x90 : 0x80),
                 static_cast<unsigned char>(c == 0xf4 ? 0x8f : 0xbf) }; // nothing past U+10FFFF
    }
    return { 0, 0, 0 };
}

// How many bytes from `at` are a valid prefix of a UTF-8 character (the whole character when valid).
std::size_t valid_prefix(const std::string& text, std::size_t at, std::size_t& needed)
{
    const utf8_lead lead = lead_of(static_cast<unsigned char>(text[at]));
    needed = lead.length;
    if (lead.length <= 1)
    {
        return lead.length;
    }
    std::size_t n = 1;
    while (n < lead.length && at + n < text.size())
    {
        const auto c = static_cast<unsigned char>(text[at + n]);
        const bool ok = n == 1 ? c >= lead.second_low && c <= lead.second_high : c >= 0x80 && c <= 0xbf;
        if (!ok)
        {
            break;
        }
        ++n;
    }
    return n;
}

// ---- vocab.json: a streaming parse, so that no document tree is built ---------------------------------

// Receives vocab.json's events: one flat object of piece -> non-negative integer, nothing else.
class vocabulary_reader : public nlohmann::json_sax<json>
{
public:
    explicit vocabulary_reader(const std::string& source)
      : source_(source)
    {
    }
    std::vector<std::pair<std::string, std::uint64_t>> entries;

    bool start_object(std::size_t) override
    {
        if (depth_++ > 0)
        {
            not_flat("an object");
        }
        return true;
    }
    bool end_object() override
    {
        --depth_;
        return true;
    }
    bool key(string_t& k) override
    {
        if (k.size() > gpt2_limits::max_piece_bytes)
        {
            throw_invalid(source_,
                 "piece " + io::quoted(k) + " is " + std::to_string(k.size()) + " bytes long, more than " +
                   std::to_string(gpt2_limits::max_piece_bytes));
        }
        if (entries.size() == gpt2_limits::max_tokens)
        {
            throw_invalid(source_, "holds more than " + std::to_string(gpt2_limits::max_tokens) + " tokens");
        }
        key_ = k;
        return true;
    }
    bool number_unsigned(number_unsigned_t v) override
    {
        if (depth_ == 0)
        {
            return not_id("a number");
        }
        entries.emplace_back(std::move(key_), v);
        return true;
    }
    bool number_integer(number_integer_t v) override
    {
        if (v >= 0)
        {
            return number_unsigned(static_cast<number_unsigned_t>(v));
        }
        return not_id("a negative number");
    }
    bool number_float(number_float_t, const string_t&) override
    {
        return not_id("a number with a fraction or an exponent (1.5, 258.0, 1e30), not an integer");
    }
    bool null() override { return not_id("null"); }
    bool boolean(bool) override { return not_id("a boolean"); }
    bool string(string_t&) override { return not_id("a string"); }
    bool binary(binary_t&) override { return not_id("binary"); }
    bool start_array(std::size_t) override { return not_id("an array"); }
    bool end_array() override { return true; }
    bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override
    {
        throw_invalid(source_, "is not valid JSON (at byte " + std::to_string(position) + ")");
    }

private:
    [[noreturn]] void not_flat(const char* what)
    {
        throw_invalid(source_,
                      std::string("holds ") + what + " inside the object; expected an object of piece -> id");
    }
    bool not_id(const char* what)
    {
        if (depth_ == 0)
        {
            throw_invalid(source_, std::string("is ") + what + ", not a JSON object of piece -> id");
        }
        throw_invalid(source_,
                      "the id of piece " + io::quoted(key_) + " is " + what + ", not a non-negative integer");
    }
    std::string source_, key_;
    int depth_ = 0;
};

std::string read_bounded_file(const std::string& path)
{
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
    {
        throw_invalid(path, fs::exists(path, ec) ? "is not a regular file" : "does not exist");
    }
    const auto size = fs::file_size(path, ec);
    if (ec)
    {
        throw_invalid(path, "cannot read (" + ec.message() + ")");
    }
    if (size > gpt2_limits::max_file_bytes)
    {
        throw_invalid(path,
             "is " + std::to_string(size) + " bytes, more than the " +
               std::to_string(gpt2_limits::max_file_bytes) + " GPT-2's tokenizer files may have");
    }
    std::ifstream in(path, std::ios::binary);
    std::string bytes(size, '\0');
    if (!in.read(bytes.data(), static_cast<std::streamsize>(size)))
    {
        throw_invalid(path, "cannot read");
    }
    return bytes;
}

std::uint64_t pair_key(std::int32_t left, std::int32_t right)
{
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32 |
           static_cast<std::uint32_t>(right);
}

struct merge_rule
{
    std::int32_t rank, merged;
};

// The pieces of one merges.txt line, split at spaces (GPT-2's pieces never hold one).
std::vector<std::string> split_at_spaces(const std::string& line)
{
    std::vector<std::string> parts;
    std::size_t i = 0;
    while (i < line.size())
    {
        const std::size_t begin = line.find_first_not_of(" \t", i);
        if (begin == std::string::npos)
        {
            break;
        }
        const std::size_t end = std::min(line.find_first_of(" \t", begin), line.size());
        parts.push_back(line.substr(begin, end - begin));
        i = end;
    }
    return parts;
}
} // namespace

// ---- the tables ---------------------------------------------------------------------------------------

struct gpt2_tokenizer::tables
{
    std::string vocab_json, merges_txt;
    std::vector<std::string> bytes_of;                   // id -> the bytes it decodes to
    std::unordered_map<std::string, std::int32_t> id_of; // vocab.json's piece -> id
    std::array<std::int32_t, 256> byte_token{};          // byte -> the id of its one-character piece
    std::unordered_map<std::uint64_t, merge_rule> merges;
    std::int32_t end_of_text_id = -1;
    pcre2_code* pattern = nullptr;

    tables() = default;
    tables(const tables&) = delete;
    tables& operator=(const tables&) = delete;
    ~tables() { pcre2_code_free(pattern); }
    void read_vocabulary(const std::string& source);
    void read_merges(const std::string& source);
    void compile_pattern();
};

void gpt2_tokenizer::tables::read_vocabulary(const std::string& source)
{
    vocabulary_reader reader(source);
    json::sax_parse(vocab_json, &reader, json::input_format_t::json, true);
    if (reader.entries.empty())
    {
        throw_invalid(source, "has no tokens");
    }
    const std::size_t n = reader.entries.size();
    std::vector<const std::string*> piece_of(n, nullptr);
    id_of.reserve(n);
    for (const auto& [piece, id] : reader.entries)
    {
        if (id >= n)
        {
            throw_invalid(source,
                 "piece " + io::quoted(piece) + " has id " + std::to_string(id) + ", outside 0.." +
                   std::to_string(n - 1) + " for " + std::to_string(n) +
                   " tokens (ids must be 0..V-1, each once)");
        }
        if (piece_of[id])
        {
            throw_invalid(source,
                 "pieces " + io::quoted(*piece_of[id]) + " and " + io::quoted(piece) + " share id " +
                   std::to_string(id));
        }
        if (!id_of.emplace(piece, static_cast<std::int32_t>(id)).second)
        {
            throw_invalid(source, "piece " + io::quoted(piece) + " appears twice");
        }
        piece_of[id] = &id_of.find(piece)->first;
    }
    // n ids, all below n, none shared: every id 0..n-1 is used once, with no gap.
    const std::array<std::uint32_t, 256> code_point = byte_to_code_point();
    std::unordered_map<std::string, char> byte_of_character;
    for (std::uint32_t b = 0; b < 256; ++b)
    {
        byte_of_character[utf8_of(code_point[b])] = static_cast<char>(b);
        const auto it = id_of.find(utf8_of(code_point[b]));
        if (it == id_of.end())
        {
            throw_invalid(source,
                 "has no token for byte " + io::hex_byte(static_cast<unsigned char>(b)) + " (its piece " +
                   io::quoted(utf8_of(code_point[b])) + ")");
        }
        byte_token[b] = it->second;
    }
    bytes_of.resize(n);
    for (std::size_t id = 0; id < n; ++id)
    {
        // A piece made of the table's characters decodes to their bytes; any other (an added token)
        // decodes to its own text.
        const std::string& piece = *piece_of[id];
        std::string bytes;
        for (std::size_t i = 0; i < piece.size();)
        {
            const std::size_t length = utf8_character_length(piece, i);
            const auto it = byte_of_character.find(piece.substr(i, length));
            if (length == 0 || it == byte_of_character.end())
            {
                bytes = piece;
                break;
            }
            bytes += it->second;
            i += length;
        }
        bytes_of[id] = std::move(bytes);
    }
    const auto eot = id_of.find(end_of_text);
    end_of_text_id = eot == id_of.end() ? -1 : eot->second;
}

void gpt2_tokenizer::tables::read_merges(const std::string& source)
{
    if (merges_txt.rfind("#version", 0) != 0)
    {
        throw_invalid(source, "does not start with its \"#version\" line (encoder.py skips the first line)");
    }
    std::size_t line_start = merges_txt.find('\n');
    std::int32_t rank = 0;
    for (std::size_t number = 2; line_start != std::string::npos; ++number)
    {
        const std::size_t begin = line_start + 1;
        const std::size_t end = std::min(merges_txt.find('\n', begin), merges_txt.size());
        line_start = end < merges_txt.size() ? end : std::string::npos;
        std::string line = merges_txt.substr(begin, end - begin);
        if (!line.empty() && line.back() == '\r')
        {
            line.pop_back(); // Python's text mode reads \r\n as \n
        }
        const std::vector<std::string> parts = split_at_spaces(line);
        if (parts.empty())
        {
            continue;
        }
        const std::string where = "line " + std::to_string(number);
        if (parts.size() != 2)
        {
            throw_invalid(source,
                          where + " is " + io::quoted(line) + ", not two pieces separated by a space");
        }
        if (static_cast<std::size_t>(rank) == gpt2_limits::max_tokens)
        {
            throw_invalid(source, "holds more than " + std::to_string(gpt2_limits::max_tokens) + " merges");
        }
        std::int32_t ids[3];
        const std::string pieces[3] = { parts[0], parts[1], parts[0] + parts[1] };
        for (int k = 0; k < 3; ++k)
        {
            const auto it = id_of.find(pieces[k]);
            if (it == id_of.end())
            {
                throw_invalid(source,
                     where + ": " + (k < 2 ? "piece " : "the merged piece ") + io::quoted(pieces[k]) +
                       " is not in the vocabulary");
            }
            ids[k] = it->second;
        }
        merges[pair_key(ids[0], ids[1])] = { rank++, ids[2] }; // a repeated pair takes its last rank
    }
}

void gpt2_tokenizer::tables::compile_pattern()
{
    int error = 0;
    PCRE2_SIZE offset = 0;
    pattern = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pretokenizing_pattern),
                            PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK,
                            &error,
                            &offset,
                            nullptr);
    if (!pattern)
    {
        throw std::logic_error("gpt2_tokenizer: PCRE2 does not compile the pattern (error " +
                               std::to_string(error) + ")");
    }
    pcre2_jit_compile(pattern, PCRE2_JIT_COMPLETE); // where JIT is missing, matching is interpreted
}

// ---- encoding -----------------------------------------------------------------------------------------

namespace
{
// One word's merges: symbols in a linked list, candidate pairs in a heap by (rank, position). A pass
// merges every occurrence of the lowest-ranked pair left to right before any pair it creates is
// considered, as encoder.py's loop does.
class word_merger
{
public:
    explicit word_merger(const std::unordered_map<std::uint64_t, merge_rule>& merges)
      : merges_(merges)
    {
    }

    void merge(std::vector<std::int32_t>& ids)
    {
        const std::size_t n = ids.size();
        id_ = ids;
        next_.resize(n);
        prev_.resize(n);
        for (std::size_t i = 0; i < n; ++i)
        {
            next_[i] = static_cast<std::int32_t>(i + 1);
            prev_[i] = static_cast<std::int32_t>(i) - 1;
        }
        heap_ = {};
        for (std::size_t i = 0; i + 1 < n; ++i)
        {
            push(static_cast<std::int32_t>(i), static_cast<std::int32_t>(i + 1));
        }
        while (!heap_.empty())
        {
            const std::int32_t rank = heap_.top().rank;
            pending_.clear();
            while (!heap_.empty() && heap_.top().rank == rank)
            {
                const candidate c = heap_.top();
                heap_.pop();
                if (valid(c))
                {
                    join(c);
                }
            }
            for (const auto& [left, right] : pending_)
            {
                push(left, right);
            }
        }
        ids.clear();
        for (std::int32_t i = 0; i < static_cast<std::int32_t>(n); i = next_[i])
        {
            ids.push_back(id_[i]);
        }
    }

private:
    struct candidate
    {
        std::int32_t rank, left, right, left_id, right_id;
        bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };

    void push(std::int32_t left, std::int32_t right)
    {
        if (right >= static_cast<std::int32_t>(id_.size()))
        {
            return;
        }
        const auto it = merges_.find(pair_key(id_[left], id_[right]));
        if (it != merges_.end())
        {
            heap_.push({ it->second.rank, left, right, id_[left], id_[right] });
        }
    }
    bool valid(const candidate& c) const
    {
        return id_[c.left] == c.left_id && next_[c.left] == c.right && id_[c.right] == c.right_id &&
               prev_[c.right] == c.left;
    }
    // Symbols left and right become one at left; the pairs it makes with its neighbours wait for the pass.
    void join(const candidate& c)
    {
        id_[c.left] = merges_.at(pair_key(c.left_id, c.right_id)).merged;
        id_[c.right] = -1;
        next_[c.left] = next_[c.right];
        if (next_[c.right] < static_cast<std::int32_t>(id_.size()))
        {
            prev_[next_[c.right]] = c.left;
        }
        if (prev_[c.left] >= 0)
        {
            pending_.emplace_back(prev_[c.left], c.left);
        }
        pending_.emplace_back(c.left, next_[c.left]);
    }

    const std::unordered_map<std::uint64_t, merge_rule>& merges_;
    std::vector<std::int32_t> id_, next_, prev_;
    std::vector<std::pair<std::int32_t, std::int32_t>> pending_;
    std::priority_queue<candidate, std::vector<candidate>, std::greater<candidate>> heap_;
};

struct match_data_deleter
{
    void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

// Calls piece(begin, end) for each piece of valid UTF-8 text[begin, end) that the pattern cuts.
template<class F>
void for_each_piece(const pcre2_code* pattern,
                    const std::string& text,
                    std::size_t begin,
                    std::size_t end,
                    F piece)
{
    std::unique_ptr<pcre2_match_data, match_data_deleter> match(pcre2_match_data_create(1, nullptr));
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    for (std::size_t at = begin; at < end;)
    {
        // Every character is a letter, a number, white space or other, so a piece starts at every end.
        const int found =
          pcre2_match(pattern, subject, end, at, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, match.get(), nullptr);
        if (found < 0)
        {
            throw std::logic_error("gpt2_tokenizer: the pattern matches nothing at byte " +
                                   std::to_string(at) + " (PCRE2 error " + std::to_string(found) + ")");
        }
        const std::size_t stop = pcre2_get_ovector_pointer(match.get())[1];
        piece(at, stop);
        at = stop;
    }
}
} // namespace

gpt2_tokenizer::gpt2_tokenizer(std::unique_ptr<tables> t)
  : tables_(std::move(t))
{
}

gpt2_tokenizer::~gpt2_tokenizer() = default;

std::shared_ptr<const gpt2_tokenizer> gpt2_tokenizer::from_files(const std::string& vocab_json,
                                                                 const std::string& merges_txt,
                                                                 const std::string& vocab_name,
                                                                 const std::string& merges_name)
{
    for (const auto& [bytes, name] :
         { std::pair(&vocab_json, &vocab_name), std::pair(&merges_txt, &merges_name) })
    {
        if (bytes->size() > gpt2_limits::max_file_bytes)
        {
            throw_invalid(*name,
                 "is " + std::to_string(bytes->size()) + " bytes, more than the " +
                   std::to_string(gpt2_limits::max_file_bytes) + " GPT-2's tokenizer files may have");
        }
    }
    auto t = std::make_unique<tables>();
    t->vocab_json = vocab_json;
    t->merges_txt = merges_txt;
    t->read_vocabulary(vocab_name);
    t->read_merges(merges_name);
    t->compile_pattern();
    return std::shared_ptr<const gpt2_tokenizer>(new gpt2_tokenizer(std::move(t)));
}

std::shared_ptr<const gpt2_tokenizer> gpt2_tokenizer::from_folder(const std::string& folder)
{
    const std::string vocab = (fs::path(folder) / "vocab.json").string();
    const std::string merges = (fs::path(folder) / "merges.txt").string();
    const std::string vocab_bytes = read_bounded_file(vocab);
    return from_files(vocab_bytes, read_bounded_file(merges), vocab, merges);
}

std::size_t gpt2_tokenizer::size() const
{
    return tables_->bytes_of.size();
}

std::vector<std::string> gpt2_tokenizer::pretokenize(const std::string& text) const
{
    for (std::size_t i = 0; i < text.size();)
    {
        const std::size_t length = utf8_character_length(text, i);
        if (length == 0)
        {
            throw std::invalid_argument("byte " + io::hex_byte(static_cast<unsigned char>(text[i])) +
                                        " at position " + std::to_string(i) + " is not valid UTF-8");
        }
        i += length;
    }
    std::vector<std::string> pieces;
    for_each_piece(tables_->pattern,
                   text,
                   0,
                   text.size(),
                   [&](std::size_t b, std::size_t e) { pieces.push_back(text.substr(b, e - b)); });
    return pieces;
}

std::vector<std::int32_t> gpt2_tokenizer::encode_text(const std::string& text, bool allow_invalid) const
{
    const tables& t = *tables_;
    std::vector<std::int32_t> ids;
    std::unordered_map<std::string, std::vector<std::int32_t>> cache; // merged words, cleared when full
    word_merger merger(t.merges);
    std::vector<std::int32_t> word;
    const auto encode_piece = [&](std::size_t begin, std::size_t end)
    {
        if (end - begin == 1)
        {
            ids.push_back(t.byte_token[static_cast<unsigned char>(text[begin])]);
            return;
        }
        std::string key = text.substr(begin, end - begin);
        if (const auto hit = cache.find(key); hit != cache.end())
        {
            ids.insert(ids.end(), hit->second.begin(), hit->second.end());
            return;
        }
        word.clear();
        for (std::size_t i = begin; i < end; ++i)
        {
            word.push_back(t.byte_token[static_cast<unsigned char>(text[i])]);
        }
        merger.merge(word);
        ids.insert(ids.end(), word.begin(), word.end());
        if (key.size() > gpt2_limits::max_cached_word_bytes)
        {
            return;
        }
        if (cache.size() == gpt2_limits::cache_words)
        {
            cache.clear();
        }
        cache.emplace(std::move(key), word);
    };
    // Runs of valid UTF-8 go through the pattern; a byte outside one is an error or its own token.
    const auto encode_span = [&](std::size_t begin, std::size_t end)
    {
        std::size_t run = begin;
        for (std::size_t i = begin; i < end;)
        {
            const std::size_t length = utf8_character_length(text, i);
            if (length > 0 && i + length <= end)
            {
                i += length;
                continue;
            }
            if (!allow_invalid)
            {
                throw std::invalid_argument("byte " + io::hex_byte(static_cast<unsigned char>(text[i])) +
                                            " at position " + std::to_string(i) + " is not valid UTF-8");
            }
            for_each_piece(t.pattern, text, run, i, encode_piece);
            ids.push_back(t.byte_token[static_cast<unsigned char>(text[i])]);
            run = ++i;
        }
        for_each_piece(t.pattern, text, run, end, encode_piece);
    };
    std::size_t begin = 0;
    while (begin <= text.size())
    {
        const std::size_t special = t.end_of_text_id >= 0 ? text.find(end_of_text, begin) : std::string::npos;
        const std::size_t end = std::min(special, text.size());
        encode_span(begin, end);
        if (special == std::string::npos)
        {
            break;
        }
        ids.push_back(t.end_of_text_id);
        begin = special + end_of_text.size();
    }
    return ids;
}

std::vector<std::int32_t> gpt2_tokenizer::encode(const std::string& text) const
{
    return encode_text(text, false);
}

std::vector<std::int32_t> gpt2_tokenizer::encode_allowing_unknown(const std::string& text) const
{
    return encode_text(text, true);
}

std::string gpt2_tokenizer::decode_bytes(const std::vector<std::int32_t>& ids) const
{
    std::string out;
    for (std::int32_t id : ids)
    {
        if (id < 0 || static_cast<std::size_t>(id) >= size())
        {
            throw std::invalid_argument("decode: token " + std::to_string(id) +
                                        " is outside the vocabulary of " + std::to_string(size()));
        }
        out += tables_->bytes_of[static_cast<std::size_t>(id)];
    }
    return out;
}

std::string gpt2_tokenizer::decode(const std::vector<std::int32_t>& ids) const
{
    return replace_invalid_utf8(decode_bytes(ids));
}

std::string gpt2_tokenizer::piece(std::size_t id) const
{
    return decode_bytes({ static_cast<std::int32_t>(std::min<std::size_t>(id, INT32_MAX)) });
}

void gpt2_tokenizer::to_metadata(metadata_map& metadata) const
{
    metadata.erase("vocab");
    metadata.erase("tokenizer_model");
    metadata["tokenizer"] = "gpt2";
    metadata["tokenizer_vocab"] = to_base64(tables_->vocab_json);
    metadata["tokenizer_merges"] = to_base64(tables_->merges_txt);
}

const std::string& gpt2_tokenizer::vocab_json() const
{
    return tables_->vocab_json;
}

const std::string& gpt2_tokenizer::merges_txt() const
{
    return tables_->merges_txt;
}

std::shared_ptr<const gpt2_tokenizer> gpt2_tokenizer_from_metadata(const metadata_map& metadata,
                                                                   const std::string& source)
{
    std::string files[2];
    const char* const keys[2] = { "tokenizer_vocab", "tokenizer_merges" };
    for (int k = 0; k < 2; ++k)
    {
        const auto it = metadata.find(keys[k]);
        if (it == metadata.end())
        {
            throw_invalid(source,
                          std::string("metadata \"tokenizer\" is gpt2 but \"") + keys[k] + "\" is missing");
        }
        try
        {
            files[k] = from_base64(it->second);
        }
        catch (const std::invalid_argument&)
        {
            throw_invalid(source, std::string("metadata \"") + keys[k] + "\" is not base64");
        }
    }
    return gpt2_tokenizer::from_files(files[0],
                                      files[1],
                                      source + ": metadata \"tokenizer_vocab\" (vocab.json)",
                                      source + ": metadata \"tokenizer_merges\" (merges.txt)");
}

std::shared_ptr<const gpt2_tokenizer> gpt2_tokenizer_of(const tokenizer_spec& spec)
{
    try
    {
        return gpt2_tokenizer::from_folder(spec.folder);
    }
    catch (const std::invalid_argument& e)
    {
        throw option_error("{} gpt2:" + option_error::literal(spec.folder) + ": " +
                             option_error::literal(e.what()),
                           { "tokenizer" }); // a flag naming files that are not a tokenizer: exit 2
    }
}

void read_hf_gpt2_tokenizer(const std::string& folder, metadata_map& metadata)
{
    std::error_code ec;
    const bool vocab = fs::exists(fs::path(folder) / "vocab.json", ec);
    const bool merges = fs::exists(fs::path(folder) / "merges.txt", ec);
    if (vocab != merges)
    {
        throw_invalid((fs::path(folder) / (vocab ? "vocab.json" : "merges.txt")).string(),
             std::string("has no ") + (vocab ? "merges.txt" : "vocab.json") +
               " beside it (GPT-2's tokenizer is the two files)");
    }
    if (vocab)
    {
        gpt2_tokenizer::from_folder(folder)->to_metadata(metadata);
    }
}

std::map<std::string, std::string> take_hf_gpt2_tokenizer(metadata_map& metadata, const std::string& source)
{
    const auto kind = metadata.find("tokenizer");
    if (kind == metadata.end() || kind->second != "gpt2")
    {
        return {};
    }
    const auto tokenizer = gpt2_tokenizer_from_metadata(metadata, source);
    for (const char* key : { "tokenizer", "tokenizer_vocab", "tokenizer_merges" })
    {
        metadata.erase(key);
    }
    return { { "vocab.json", tokenizer->vocab_json() }, { "merges.txt", tokenizer->merges_txt() } };
}

// ---- UTF-8 --------------------------------------------------------------------------------------------

std::size_t utf8_character_length(const std::string& text, std::size_t at)
{
    std::size_t needed = 0;
    const std::size_t valid = valid_prefix(text, at, needed);
    return valid == needed ? valid : 0;
}

std::string replace_invalid_utf8(const std::string& bytes)
{
    static const std::string replacement = "\xef\xbf\xbd"; // U+FFFD
    std::string out;
    out.reserve(bytes.size());
    for (std::size_t i = 0; i < bytes.size();)
    {
        std::size_t needed = 0;
        const std::size_t valid = valid_prefix(bytes, i, needed);
        if (valid == needed && valid > 0)
        {
            out.append(bytes, i, valid);
            i += valid;
        }
        else
        {
            out += replacement; // one for the maximal subpart: the lead and the continuations that fit it
            i += std::max<std::size_t>(valid, 1);
        }
    }
    return out;
}
} // namespace xgrad::train
