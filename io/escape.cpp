// Escaping file content for error messages.
#include "io/escape.hpp"

namespace xgrad::io
{
namespace
{
void append_hex_digits(std::string& out, unsigned char c)
{
    static constexpr char hex[] = "0123456789abcdef";
    out += hex[c >> 4];
    out += hex[c & 0xf];
}

void append_hex(std::string& out, unsigned char c)
{
    out += "\\x";
    append_hex_digits(out, c);
}
}  // namespace

std::string escaped(std::string_view bytes)
{
    std::string out;
    out.reserve(bytes.size());
    for (const char ch : bytes)
    {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '\\')
        {
            out += "\\\\";
        }
        else if (c >= 0x20 && c < 0x7f)
        {
            out += ch;
        }
        else
        {
            append_hex(out, c);
        }
    }
    return out;
}

std::string one_line(std::string_view text)
{
    std::string out;
    out.reserve(text.size());
    for (const char ch : text)
    {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f)
        {
            append_hex(out, c);
        }
        else
        {
            out += ch;
        }
    }
    return out;
}

std::string hex_byte(unsigned char c)
{
    std::string out = "0x";
    append_hex_digits(out, c);
    return out;
}

std::string quoted(std::string_view bytes, std::size_t limit)
{
    const bool cut = bytes.size() > limit;
    return "'" + escaped(bytes.substr(0, limit)) + (cut ? "...'" : "'");
}
}  // namespace xgrad::io
