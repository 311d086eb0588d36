// Bytes from a file, made safe to quote in a one-line error message: a corrupt header may hold control
// bytes (a 0x1d once went to stderr raw and split a consumer's line in two), so every reader quotes
// file content through escaped() or quoted(), and the tools pass each message through one_line().
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace xgrad::io
{
// Printable ASCII as is, a backslash as \\, every other byte (control, DEL, non-ASCII) as \xNN.
std::string escaped(std::string_view bytes);

// Control bytes (below 0x20, and DEL) as \xNN, every other byte as is: a message that stays on one line
// and keeps UTF-8 paths readable (a tool's last line of defence, after the readers' own escaping).
std::string one_line(std::string_view text);

// "0x1d": one byte in hex, as messages about a single byte name it.
std::string hex_byte(unsigned char c);

// escaped(bytes) in single quotes, cut after `limit` bytes of input with "..." before the closing quote.
std::string quoted(std::string_view bytes, std::size_t limit = 60);
}  // namespace xgrad::io
