// safetensors (docs/spec.md, "Checkpoint file: safetensors"): an 8-byte little-endian header length N,
// N bytes of UTF-8 JSON naming each tensor's dtype, shape and byte range, then the data. Reading is strict;
// writing is atomic (a temporary file in the same folder, flushed, renamed over the final name).
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "autodiff/xtensor.hpp"

namespace xgrad::io
{
// A file that does not follow the format; the message names the file and the problem.
struct format_error : std::runtime_error
{
    using std::runtime_error::runtime_error;
};

// One tensor: "F32" or "F64" as stored, values widened to double (exact for F32).
struct stored_tensor
{
    std::string dtype;
    array<double> values;  // of the stored shape
};

struct safetensors_file
{
    std::map<std::string, std::string> metadata;   // "__metadata__"
    std::map<std::string, stored_tensor> tensors;  // by name
};

// `s` quoted for a message: one line, at most `limit` bytes shown, every byte outside printable ASCII
// (and the quote and backslash) escaped as \xNN.
std::string printable(const std::string& s, std::size_t limit = 80);

// Throws format_error naming the file and what is wrong (header longer than the file, JSON that does
// not parse, a dtype other than F32/F64, offsets outside the buffer, overlapping or of the wrong length,
// a shape that does not match its bytes, a metadata value that is not a string, ...).
safetensors_file read_safetensors(const std::string& path);

// Writes every tensor in its dtype ("F32" narrows the double values), atomically. Throws
// std::runtime_error naming the path when it cannot write; the old file under `path` is then untouched.
void write_safetensors(const std::string& path, const safetensors_file& file);
}  // namespace xgrad::io
