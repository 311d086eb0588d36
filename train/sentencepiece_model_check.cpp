// The protobuf wire format, as far as the check needs it: each field is a varint key (field number << 3 |
// wire type) and a value: a varint (type 0), 8 bytes (1), a varint length and that many bytes (2), or 4
// bytes (5). Groups (3, 4) are not used by SentencePiece's messages and are refused.
#include "train/sentencepiece_model_check.hpp"

#include <stdexcept>

namespace xgrad::train
{
namespace
{
[[noreturn]] void refuse(const std::string& what)
{
    throw std::invalid_argument("tokenizer_model: " + what);
}

// One field of a message: its number, wire type, and for a length-delimited field its bytes.
struct wire_field
{
    std::uint64_t number = 0;
    unsigned type = 0;
    const char* bytes = nullptr;
    std::size_t length = 0;
};

class wire_reader
{
public:
    wire_reader(const char* begin, std::size_t size, const char* message)
      : at_(begin)
      , end_(begin + size)
      , message_(message)
    {
    }

    bool done() const { return at_ == end_; }

    wire_field next()
    {
        const std::uint64_t key = varint();
        wire_field f;
        f.number = key >> 3;
        f.type = static_cast<unsigned>(key & 7);
        if (f.number == 0)
        {
            malformed("a field numbered 0");
        }
        switch (f.type)
        {
            case 0:
                varint();
                break;
            case 1:
                skip(8);
                break;
            case 2:
            {
                const std::uint64_t length = varint();
                if (length > remaining())
                {
                    malformed("a field of " + std::to_string(length) + " bytes where " +
                              std::to_string(remaining()) + " remain");
                }
                f.bytes = at_;
                f.length = static_cast<std::size_t>(length);
                skip(f.length);
                break;
            }
            case 5:
                skip(4);
                break;
            default:
                malformed("wire type " + std::to_string(f.type) + " (field " + std::to_string(f.number) +
                          ")");
        }
        return f;
    }

private:
    std::size_t remaining() const { return static_cast<std::size_t>(end_ - at_); }

    [[noreturn]] void malformed(const std::string& what) const
    {
        refuse(std::string("not a SentencePiece model: its ") + message_ + " holds " + what);
    }

    // At most 10 bytes of 7 bits each.
    std::uint64_t varint()
    {
        std::uint64_t value = 0;
        for (unsigned shift = 0; shift < 70; shift += 7)
        {
            if (at_ == end_)
            {
                malformed("a number cut short");
            }
            const auto byte = static_cast<unsigned char>(*at_++);
            value |= std::uint64_t(byte & 0x7f) << (shift < 64 ? shift : 63);
            if ((byte & 0x80) == 0)
            {
                return value;
            }
        }
        malformed("a number longer than 10 bytes");
    }

    void skip(std::size_t n)
    {
        if (n > remaining())
        {
            malformed("a field cut short");
        }
        at_ += n;
    }

    const char* at_;
    const char* end_;
    const char* message_;
};

// The normaliser must be the identity: no precompiled character map.
void check_normalizer(const wire_field& spec)
{
    wire_reader in(spec.bytes, spec.length, "normalizer_spec");
    while (!in.done())
    {
        const wire_field f = in.next();
        if (f.number == 2 && f.length > 0)
        {
            refuse("the model's normaliser has a precompiled_charsmap of " + std::to_string(f.length) +
                   " bytes; xgrad reads only models with the identity normaliser");
        }
    }
}

// A piece is a non-empty string without a NUL byte: the library's tries (Darts) take C strings, and a NUL
// makes a key of zero length, which they refuse by an exception that ends the process.
void check_piece(const wire_field& piece, std::uint64_t index)
{
    wire_reader in(piece.bytes, piece.length, "SentencePiece");
    while (!in.done())
    {
        const wire_field f = in.next();
        if (f.number == 1 && (f.type != 2 || f.length == 0 ||
                              std::string(f.bytes, f.length).find('\0') != std::string::npos))
        {
            refuse("piece " + std::to_string(index) + " is empty or holds a NUL byte");
        }
    }
}
} // namespace

void check_sentencepiece_model(const std::string& serialized)
{
    if (serialized.size() > max_sentencepiece_model_bytes)
    {
        refuse("the model has " + std::to_string(serialized.size()) + " bytes; at most " +
               std::to_string(max_sentencepiece_model_bytes) + " are read");
    }
    wire_reader in(serialized.data(), serialized.size(), "ModelProto");
    std::uint64_t pieces = 0;
    while (!in.done())
    {
        const wire_field f = in.next();
        if (f.type != 2 && f.number >= 1 && f.number <= 5)
        {
            refuse("not a SentencePiece model: field " + std::to_string(f.number) + " is not a message");
        }
        if (f.number == 1 && ++pieces > max_sentencepiece_pieces)
        {
            refuse("the model has more than " + std::to_string(max_sentencepiece_pieces) + " pieces");
        }
        if (f.number == 1)
        {
            check_piece(f, pieces - 1);
        }
        if (f.number == 3)
        {
            check_normalizer(f);
        }
        if (f.number == 5)
        {
            refuse("the model has a denormaliser (denormalizer_spec); xgrad reads only models without one");
        }
    }
}
} // namespace xgrad::train
