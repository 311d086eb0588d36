// safetensors (docs/spec.md, "Checkpoint file: safetensors"): an 8-byte little-endian header length N,
// N bytes of UTF-8 JSON naming each tensor's dtype, shape and byte range, then the data. Reading is strict;
// writing is atomic (a temporary file in the same folder, flushed, renamed over the final name) and
// streams each tensor to the file. safetensors_reader reads the header once and then only the tensors
// asked for, each straight into its final buffer; read_safetensors reads them all, widened to double.
// Both read xgrad's own files (F32 and F64) and, when asked, Hugging Face's (F16 and BF16 as well).
#pragma once

#include <cstdint>
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

// The longest JSON header read: the reference implementation refuses larger ones, and so does
// safetensors_reader, before allocating any.
constexpr std::uint64_t max_header_bytes = 100'000'000;

// Throws format_error "source: problem": every reader of io/ refuses a file through this one line.
[[noreturn]] void fail(const std::string& source, const std::string& problem);

// Which stored dtypes a reader accepts; any other dtype is refused with a message naming these.
enum class accepted_dtypes
{
    f32_and_f64,  // F32 and F64: xgrad's own files (checkpoints, gradients), the only dtypes xgrad writes
    any_float,    // F16 (IEEE half), BF16 (bfloat16), F32 and F64: Hugging Face's files
};

// One tensor: its dtype as stored (as tensor_info's), values as double (every stored value is exactly
// one). Only F32 and F64 are written. For writing, the values may instead be the caller's own float or
// double array, given by pointer and kept alive by the caller through the write: they are written as they
// are when their type is the dtype (a checkpoint's float32 parameters go to the file with no wider copy,
// bit for bit, NaN payloads included), converted once otherwise.
struct stored_tensor
{
    std::string dtype;
    array<double> values;  // of the stored shape; unused when a borrowed array is given
    const array<float>* borrowed_float = nullptr;
    const array<double>* borrowed_double = nullptr;
};

struct safetensors_file
{
    std::map<std::string, std::string> metadata;   // "__metadata__"
    std::map<std::string, stored_tensor> tensors;  // by name
};

// A tensor as the checked header describes it: its dtype, shape and byte range in the data buffer.
struct tensor_info
{
    std::string dtype;  // as stored: "F32" or "F64", or with accepted_dtypes::any_float also "F16" or "BF16"
    shape_t shape;
    std::uint64_t begin = 0, end = 0;
    std::size_t count() const;  // the number of values
};

// A safetensors file open for reading. The constructor reads and checks the whole header, exactly as
// read_safetensors does, and allocates nothing the header claims (only its table of entries); each
// read() then reads one tensor's bytes straight into the caller's buffer, converting the stored dtype to
// T once, in chunks, never through a wider copy.
class safetensors_reader
{
public:
    // Throws format_error as read_safetensors does.
    explicit safetensors_reader(const std::string& path,
                                accepted_dtypes accepted = accepted_dtypes::f32_and_f64);
    ~safetensors_reader();
    safetensors_reader(const safetensors_reader&) = delete;
    safetensors_reader& operator=(const safetensors_reader&) = delete;

    const std::string& path() const { return path_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const std::map<std::string, tensor_info>& tensors() const { return tensors_; }

    // Reads tensor `name` (one of tensors()) into `out`, which holds its count() values: F16 and BF16
    // widened exactly (every such value is a float), F32 and F64 as they are or converted. Throws
    // std::out_of_range for a name the file does not hold, format_error when the file turns out shorter
    // than its header said (it changed while being read).
    template <class T>
    void read(const std::string& name, T* out) const;
    // The tensor as an array of its shape.
    template <class T>
    array<T> read(const std::string& name) const;

private:
    std::string path_;
    int fd_ = -1;
    std::uint64_t data_start_ = 0;  // the data buffer's offset in the file
    std::map<std::string, std::string> metadata_;
    std::map<std::string, tensor_info> tensors_;
};

// `s` quoted for a message: one line, at most `limit` bytes shown, every byte outside printable ASCII
// (and the quote and backslash) escaped as \xNN.
std::string printable(const std::string& s, std::size_t limit = 80);

// Throws format_error naming the file and what is wrong (header longer than the file, JSON that does
// not parse, a dtype `accepted` does not name, offsets outside the buffer, overlapping or of the wrong
// length, bytes of the buffer no tensor covers, a shape that does not match its bytes, a metadata value
// that is not a string, ...). Every tensor of the file, read by safetensors_reader.
safetensors_file read_safetensors(const std::string& path, accepted_dtypes accepted = accepted_dtypes::f32_and_f64);

// Writes every tensor in its dtype, F32 or F64 ("F32" narrows the double values; any other dtype is
// std::invalid_argument), atomically, tensor by tensor through a small buffer. Throws std::runtime_error
// naming the path when it cannot write; the old file under `path` is then untouched.
void write_safetensors(const std::string& path, const safetensors_file& file);
}  // namespace xgrad::io
