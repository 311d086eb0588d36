// Binary files of fixed-width fields in the machine's byte order (little-endian wherever xgrad builds), as
// llama2.c lays out model.bin (io/llama2c.hpp) and tokenizer.bin (train/llama2c_tokenizer.hpp): the whole
// file read under a size limit, a cursor that refuses to run past the end, values appended to a buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace xgrad::io
{
// The bytes of `path`. Throws format_error starting with `path`: it cannot be read, or it holds more than
// `limit` bytes (more than its header can describe).
std::string read_binary_file(const std::string& path, std::uintmax_t limit);

// Reads consecutive values of `bytes` (the contents of `path`), refusing to run past the end.
struct binary_cursor
{
    const std::string& bytes;
    const std::string& path;
    std::size_t at = 0;

    template<class V>
    V next(const char* what)
    {
        if (bytes.size() - at < sizeof(V))
        {
            truncated(what);
        }
        V v;
        std::memcpy(&v, bytes.data() + at, sizeof(V));
        at += sizeof(V);
        return v;
    }
    // Throws format_error "path: truncated at byte `at` (reading `what`)".
    [[noreturn]] void truncated(const char* what) const;
};

template<class V>
void append_binary(std::string& out, V v)
{
    out.append(reinterpret_cast<const char*>(&v), sizeof(V));
}
} // namespace xgrad::io
