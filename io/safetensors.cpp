// The safetensors reader and writer. Reading checks the whole header before a byte of data is read:
// the length against the file, the JSON, every entry's dtype, shape and byte range, and that the ranges
// tile the data buffer exactly (the format's rule: no holes, no overlaps, no trailing bytes, so that a
// file cannot carry hidden content). Half-precision data (Hugging Face's F16 and BF16) is widened on
// reading. Writing goes to a temporary file beside the target, which is flushed to disk and then renamed
// over it.
#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error                                                                                                       \
  "io/safetensors.cpp reads and writes little-endian data in place; port it before using a big-endian host"
#endif

namespace xgrad::io
{
void fail(const std::string& source, const std::string& problem)
{
    throw format_error(source + ": " + problem);
}

namespace
{
using json = nlohmann::json;

constexpr std::size_t length_field_bytes = 8;
constexpr std::size_t header_alignment = 8;  // the data buffer starts on an 8-byte boundary
constexpr int max_json_depth = 16;           // a valid header nests 3 deep
constexpr std::size_t max_dimensions = 64;   // as NumPy's NPY_MAXDIMS; shapes in messages stay short

// At most `limit` bytes of `s` on one line, every byte outside printable ASCII (and, when asked, the
// quote and the backslash) as \xNN.
std::string escaped(const std::string& s, std::size_t limit, bool escape_quotes)
{
    std::string out;
    for (std::size_t i = 0; i < s.size() && i < limit; ++i)
    {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f && !(escape_quotes && (c == '\\' || c == '\'')))
        {
            out += static_cast<char>(c);
        }
        else
        {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        }
    }
    return out + (s.size() > limit ? "..." : "");
}

std::string list_str(std::uint64_t a, std::uint64_t b)
{
    return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

// The bytes of one value of each dtype this file reads; 0 for any other.
std::size_t dtype_bytes(const std::string& dtype)
{
    return dtype == "F64" ? 8 : dtype == "F32" ? 4 : dtype == "F16" || dtype == "BF16" ? 2 : 0;
}

bool accepts(accepted_dtypes accepted, const std::string& dtype)
{
    const bool half = dtype == "F16" || dtype == "BF16";
    return dtype == "F32" || dtype == "F64" || (half && accepted == accepted_dtypes::any_float);
}

std::string accepted_names(accepted_dtypes accepted)
{
    return accepted == accepted_dtypes::any_float ? "F16, BF16, F32 and F64" : "F32 and F64";
}

// ---- the header -----------------------------------------------------------------------------------

// One tensor as the header describes it, checked against the buffer's size.
struct entry
{
    std::string name;
    std::string dtype;
    shape_t shape;
    std::uint64_t begin = 0, end = 0;  // byte offsets into the data buffer
};

// JSON text to a value; duplicate keys (which JSON parsers resolve differently) and deep nesting are
// refused while parsing.
json parse_header(const std::string& path, const std::string& text)
{
    std::vector<std::set<std::string>> open_objects;
    auto check = [&](int depth, json::parse_event_t event, json& parsed)
    {
        if (depth > max_json_depth)
        {
            fail(path, "header JSON is nested more than " + std::to_string(max_json_depth) + " levels deep");
        }
        if (event == json::parse_event_t::object_start)
        {
            open_objects.emplace_back();
        }
        else if (event == json::parse_event_t::object_end)
        {
            open_objects.pop_back();
        }
        else if (event == json::parse_event_t::key &&
                 !open_objects.back().insert(parsed.get<std::string>()).second)
        {
            fail(path,
                 "header JSON has the key " + printable(parsed.get<std::string>()) + " twice in one object");
        }
        return true;
    };
    try
    {
        return json::parse(text, check);
    }
    catch (const json::exception& e)
    {
        std::string what = e.what();  // "[json.exception.parse_error.101] parse error at ..."
        const std::size_t tag_end = what.find("] ");
        if (what.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos)
        {
            what = what.substr(tag_end + 2);
        }
        fail(path, "header is not valid JSON (" + escaped(what, 200, false) + ")");
    }
}

const char* json_kind(const json& v)
{
    if (v.is_number_float())
    {
        return "a non-integer number";
    }
    if (v.is_number_integer() && !v.is_number_unsigned())
    {
        return "a negative integer";
    }
    return v.type_name();  // "null", "boolean", "string", "array", "object", "number"
}

std::map<std::string, std::string> read_metadata(const std::string& path, const json& m)
{
    if (!m.is_object())
    {
        fail(path, "'__metadata__' must be an object of strings, it is " + std::string(json_kind(m)));
    }
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : m.items())
    {
        if (!value.is_string())
        {
            fail(path, "metadata " + printable(key) + " must be a string, it is " + json_kind(value));
        }
        out.emplace(key, value.get<std::string>());
    }
    return out;
}

std::uint64_t non_negative_integer(const std::string& path, const std::string& where, const json& v)
{
    if (!v.is_number_unsigned())
    {
        fail(path, where + " must hold non-negative integers, found " + json_kind(v) + " " +
                     printable(v.dump(), 40));
    }
    return v.get<std::uint64_t>();
}

entry read_entry(const std::string& path, const std::string& name, const json& v, std::uint64_t buffer_size,
                 accepted_dtypes accepted)
{
    const std::string tensor = "tensor " + printable(name);
    if (!v.is_object())
    {
        fail(path, tensor + " must be an object with dtype, shape and data_offsets, it is " + json_kind(v));
    }
    for (const auto& [key, value] : v.items())
    {
        if (key != "dtype" && key != "shape" && key != "data_offsets")
        {
            fail(path, tensor + " has an unknown field " + printable(key) +
                         " (expected dtype, shape and data_offsets)");
        }
    }
    for (const char* key : {"dtype", "shape", "data_offsets"})
    {
        if (!v.contains(key))
        {
            fail(path, tensor + " has no '" + key + "'");
        }
    }

    entry e;
    e.name = name;
    const json& dtype = v.at("dtype");
    if (!dtype.is_string())
    {
        fail(path, tensor + ": dtype must be a string, it is " + json_kind(dtype));
    }
    e.dtype = dtype.get<std::string>();
    if (!accepts(accepted, e.dtype))
    {
        fail(path, tensor + " has dtype " + printable(e.dtype) + "; only " + accepted_names(accepted) +
                     " are supported");
    }

    const json& shape = v.at("shape");
    if (!shape.is_array())
    {
        fail(path, tensor + ": shape must be a list of non-negative integers, it is " + json_kind(shape));
    }
    if (shape.size() > max_dimensions)
    {
        fail(path, tensor + ": shape has " + std::to_string(shape.size()) + " dimensions, more than the " +
                     std::to_string(max_dimensions) + " this reader accepts");
    }
    // The byte size, and the strides' span (the product of the sizes with a 0 counted as 1: an empty
    // tensor of shape (0, 2^32, 2^32) still has strides that must fit a signed 64-bit integer).
    std::uint64_t count = 1, span = 1;
    bool overflow = false;
    for (const json& s : shape)
    {
        const std::uint64_t n = non_negative_integer(path, tensor + ": shape", s);
        e.shape.push_back(static_cast<std::size_t>(n));
        overflow = overflow || __builtin_mul_overflow(count, n, &count) ||
                   __builtin_mul_overflow(span, std::max<std::uint64_t>(n, 1), &span);
    }
    std::uint64_t bytes = 0, span_bytes = 0;
    overflow = overflow || __builtin_mul_overflow(count, dtype_bytes(e.dtype), &bytes) ||
               __builtin_mul_overflow(span, dtype_bytes(e.dtype), &span_bytes) ||
               span_bytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    if (overflow)
    {
        fail(path, tensor + " has shape " + shape_str(e.shape) + ", too large (its byte size overflows)");
    }

    const json& offsets = v.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2)
    {
        fail(path,
             tensor + ": data_offsets must be a list [begin, end], it is " + printable(offsets.dump(), 40));
    }
    e.begin = non_negative_integer(path, tensor + ": data_offsets", offsets[0]);
    e.end = non_negative_integer(path, tensor + ": data_offsets", offsets[1]);
    const std::string range = "data_offsets " + list_str(e.begin, e.end);
    if (e.end < e.begin)
    {
        fail(path, tensor + " has " + range + " with end before begin");
    }
    if (e.end > buffer_size)
    {
        fail(path, tensor + " has " + range + " outside the data buffer (" + std::to_string(buffer_size) +
                     " bytes)");
    }
    if (e.end - e.begin != bytes)
    {
        fail(path, tensor + " has " + range + " (" + std::to_string(e.end - e.begin) + " bytes) but shape " +
                     shape_str(e.shape) + " of " + e.dtype + " needs " + std::to_string(bytes) + " bytes");
    }
    return e;
}

// The byte ranges, in order, must tile [0, buffer_size): each starts where the previous one ended.
void check_coverage(const std::string& path, std::vector<entry> entries, std::uint64_t buffer_size)
{
    std::sort(entries.begin(), entries.end(),
              [](const entry& a, const entry& b)
              { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    std::uint64_t covered = 0;
    const entry* previous = nullptr;
    for (const entry& e : entries)
    {
        if (e.begin < covered)
        {
            fail(path, "tensor " + printable(e.name) + " data_offsets " + list_str(e.begin, e.end) +
                         " overlap tensor " + printable(previous->name) + " " +
                         list_str(previous->begin, previous->end));
        }
        if (e.begin > covered)
        {
            fail(path, "bytes " + list_str(covered, e.begin) + " of the data buffer belong to no tensor (" +
                         "a hole before tensor " + printable(e.name) + "; the format allows none)");
        }
        covered = e.end;
        previous = &e;
    }
    if (covered != buffer_size)
    {
        fail(path, "the data buffer has " + std::to_string(buffer_size) + " bytes but the tensors cover " +
                     std::to_string(covered) + " (trailing bytes; the format allows none)");
    }
}

// ---- the data -------------------------------------------------------------------------------------

// Reads up to `bytes` bytes at `offset` of the file into `out`; fewer only where the file ends.
std::size_t read_at(int fd, void* out, std::size_t bytes, std::uint64_t offset)
{
    char* p = static_cast<char*>(out);
    std::size_t done = 0;
    while (done < bytes)
    {
        const ssize_t n = ::pread(fd, p + done, bytes - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR)
        {
            continue;
        }
        if (n <= 0)
        {
            break;
        }
        done += static_cast<std::size_t>(n);
    }
    return done;
}

// Reads `count` values stored as S at `offset` of the file into `out`, in chunks through a small buffer,
// each value widened by `widen` and then converted to T once. False where the file ends early.
template <class S, class T, class Widen>
bool read_converted(int fd, std::uint64_t offset, std::size_t count, T* out, Widen widen)
{
    constexpr std::size_t chunk = 1 << 14;
    std::vector<S> buffer(std::min(count, chunk));
    for (std::size_t done = 0; done < count;)
    {
        const std::size_t n = std::min(chunk, count - done);
        if (read_at(fd, buffer.data(), n * sizeof(S), offset + done * sizeof(S)) != n * sizeof(S))
        {
            return false;
        }
        for (std::size_t k = 0; k < n; ++k)
        {
            out[done + k] = static_cast<T>(widen(buffer[k]));
        }
        done += n;
    }
    return true;
}

float float_from_bits(std::uint32_t bits)
{
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

// F16, IEEE 754 binary16: a sign bit, 5 exponent bits (bias 15) and 10 fraction bits. Every value is a
// float exactly; infinities and NaNs (the exponent all ones) keep their sign and payload in float's
// wider fields.
float half_to_float(std::uint16_t h)
{
    const std::uint32_t sign = h & 0x8000u;
    const int exponent = (h >> 10) & 0x1f;
    const int fraction = h & 0x3ff;
    if (exponent == 0x1f)
    {
        return float_from_bits((sign << 16) | 0x7f800000u | (static_cast<std::uint32_t>(fraction) << 13));
    }
    // Zero and the subnormals are fraction * 2^-24; a normal number has an implicit leading 1 (1024).
    const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(fraction), -24)
                                          : std::ldexp(static_cast<float>(1024 + fraction), exponent - 25);
    return sign ? -magnitude : magnitude;
}

// BF16, bfloat16: the top 16 bits of a float32 (its sign, its 8 exponent bits, 7 of its fraction bits).
float bfloat16_to_float(std::uint16_t b)
{
    return float_from_bits(static_cast<std::uint32_t>(b) << 16);
}

// An open file descriptor, closed on every path out of the reader's constructor until it is kept.
struct fd_guard
{
    int fd = -1;
    ~fd_guard()
    {
        if (fd >= 0)
        {
            ::close(fd);
        }
    }
    int release() { return std::exchange(fd, -1); }
};

// ---- writing --------------------------------------------------------------------------------------

// A file descriptor of the temporary file, written fully or not at all.
class temp_writer
{
public:
    explicit temp_writer(const std::string& target) : target_(target)
    {
        const std::filesystem::path p(target);
        const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
        temp_ = (dir / ("." + p.filename().string() + ".tmp-XXXXXX")).string();
        fd_ = mkstemp(temp_.data());
        if (fd_ < 0)
        {
            const int error = errno;
            temp_.clear();
            fail_write("cannot create a temporary file beside it", error);
        }
    }
    ~temp_writer()
    {
        if (fd_ >= 0)
        {
            ::close(fd_);
        }
        if (!temp_.empty())
        {
            ::unlink(temp_.c_str());
        }
    }
    temp_writer(const temp_writer&) = delete;
    temp_writer& operator=(const temp_writer&) = delete;

    void write(const void* data, std::size_t bytes)
    {
        const char* p = static_cast<const char*>(data);
        while (bytes > 0)
        {
            const ssize_t n = ::write(fd_, p, bytes);
            if (n < 0 && errno == EINTR)
            {
                continue;
            }
            if (n <= 0)
            {
                fail_write("cannot write", n < 0 ? errno : ENOSPC);
            }
            p += n;
            bytes -= static_cast<std::size_t>(n);
        }
    }

    // Gives the file the old file's permissions (0644 for a new one), flushes it to disk and renames it
    // over the target. Then flushes the folder so that the rename itself survives a crash.
    void commit()
    {
        struct stat old
        {
        };
        const mode_t mode = ::stat(target_.c_str(), &old) == 0 ? (old.st_mode & 07777) : 0644;
        if (::fchmod(fd_, mode) != 0 || ::fsync(fd_) != 0)
        {
            fail_write("cannot flush", errno);
        }
        const int fd = fd_;
        fd_ = -1;
        if (::close(fd) != 0)
        {
            fail_write("cannot write", errno);
        }
        if (std::rename(temp_.c_str(), target_.c_str()) != 0)
        {
            fail_write("cannot replace it", errno);
        }
        temp_.clear();
        const std::filesystem::path p(target_);
        const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
        const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
        if (dir_fd >= 0)
        {
            ::fsync(dir_fd);  // best effort: the new file is in place either way
            ::close(dir_fd);
        }
    }

private:
    [[noreturn]] void fail_write(const std::string& what, int error) const
    {
        throw std::runtime_error(target_ + ": " + what + " (" + std::strerror(error) + ")");
    }

    std::string target_, temp_;
    int fd_ = -1;
};

// `n` values of type S written as `dtype`: as they are when S is its type, else converted in chunks.
template <class S>
void write_as(temp_writer& out, const S* values, std::size_t n, const std::string& dtype)
{
    using float_or_double = std::conditional_t<std::is_same<S, float>::value, double, float>;
    if (dtype == (std::is_same<S, float>::value ? "F32" : "F64"))
    {
        out.write(values, n * sizeof(S));
        return;
    }
    constexpr std::size_t chunk = 1 << 16;
    std::vector<float_or_double> buf(std::min(n, chunk));
    for (std::size_t done = 0; done < n;)
    {
        const std::size_t count = std::min(chunk, n - done);
        for (std::size_t k = 0; k < count; ++k)
        {
            buf[k] = static_cast<float_or_double>(values[done + k]);
        }
        out.write(buf.data(), count * sizeof(float_or_double));
        done += count;
    }
}

// The shape and the values' count of a tensor to write, from whichever array holds its values.
std::vector<std::size_t> shape_to_write(const stored_tensor& t)
{
    const auto& shape = t.borrowed_float    ? t.borrowed_float->shape()
                        : t.borrowed_double ? t.borrowed_double->shape()
                                            : t.values.shape();
    return std::vector<std::size_t>(shape.begin(), shape.end());
}

std::size_t count_to_write(const stored_tensor& t)
{
    return t.borrowed_float ? t.borrowed_float->size() : t.borrowed_double ? t.borrowed_double->size() : t.values.size();
}

void write_values(temp_writer& out, const stored_tensor& t)
{
    if (t.borrowed_float)
    {
        write_as(out, t.borrowed_float->data(), t.borrowed_float->size(), t.dtype);
    }
    else if (t.borrowed_double)
    {
        write_as(out, t.borrowed_double->data(), t.borrowed_double->size(), t.dtype);
    }
    else
    {
        write_as(out, t.values.data(), t.values.size(), t.dtype);
    }
}

// The header text, "__metadata__" first, tensors in name order (the order of their data), padded with
// spaces to a multiple of 8 bytes as the reference writer pads it.
std::string header_for(const std::string& path, const safetensors_file& file)
{
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!file.metadata.empty())
    {
        header["__metadata__"] = file.metadata;
    }
    std::uint64_t offset = 0;
    for (const auto& [name, t] : file.tensors)
    {
        if (name == "__metadata__")
        {
            throw std::invalid_argument("write_safetensors: " + path +
                                        ": '__metadata__' cannot name a tensor");
        }
        if (!accepts(accepted_dtypes::f32_and_f64, t.dtype))
        {
            throw std::invalid_argument("write_safetensors: " + path + ": tensor " + printable(name) +
                                        " has dtype " + printable(t.dtype) + " (F32 or F64 are written)");
        }
        const std::uint64_t bytes = count_to_write(t) * dtype_bytes(t.dtype);
        header[name] = {{"dtype", t.dtype},
                        {"shape", shape_to_write(t)},
                        {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    std::string text;
    try
    {
        text = header.dump();
    }
    catch (const nlohmann::ordered_json::exception&)
    {
        throw std::invalid_argument("write_safetensors: " + path +
                                    ": a tensor name or metadata string is not valid UTF-8");
    }
    text.append((header_alignment - text.size() % header_alignment) % header_alignment, ' ');
    return text;
}
}  // namespace

std::string printable(const std::string& s, std::size_t limit)
{
    return "'" + escaped(s, limit, true) + "'";
}

std::size_t tensor_info::count() const
{
    std::size_t n = 1;
    for (std::size_t s : shape)
    {
        n *= s;  // the header's check keeps the product from overflowing
    }
    return n;
}

safetensors_reader::safetensors_reader(const std::string& path, accepted_dtypes accepted) : path_(path)
{
    // stat before opening: opening a FIFO for reading would block until someone writes to it.
    struct stat st
    {
    };
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    {
        fail(path, S_ISDIR(st.st_mode) ? "is a directory, not a safetensors file" : "is not a regular file");
    }
    fd_guard file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (file.fd < 0)
    {
        fail(path, std::string("cannot open (") + std::strerror(errno) + ")");
    }
    if (::fstat(file.fd, &st) != 0 || !S_ISREG(st.st_mode))
    {
        fail(path, "is not a regular file");
    }
    const auto file_size = static_cast<std::uint64_t>(st.st_size);
    if (file_size < length_field_bytes)
    {
        fail(path, "not a safetensors file (" + std::to_string(file_size) +
                     " bytes, too short for the 8-byte header length)");
    }

    unsigned char length_field[length_field_bytes];
    if (read_at(file.fd, length_field, length_field_bytes, 0) != length_field_bytes)
    {
        fail(path, "cannot read the header length");
    }
    std::uint64_t header_length = 0;
    for (std::size_t k = length_field_bytes; k-- > 0;)
    {
        header_length = (header_length << 8) | length_field[k];
    }
    if (header_length > file_size - length_field_bytes)
    {
        fail(path, "header length " + std::to_string(header_length) + " runs past the end of the file (" +
                     std::to_string(file_size) + " bytes)");
    }
    if (header_length > max_header_bytes)
    {
        fail(path, "header length " + std::to_string(header_length) + " is over the limit of " +
                     std::to_string(max_header_bytes) + " bytes");
    }
    std::string text(static_cast<std::size_t>(header_length), '\0');
    if (read_at(file.fd, text.data(), text.size(), length_field_bytes) != text.size())
    {
        fail(path, "cannot read the header (file changed while reading?)");
    }

    const json header = parse_header(path, text);
    if (!header.is_object())
    {
        fail(path, "header must be a JSON object, it is " + std::string(json_kind(header)));
    }
    data_start_ = length_field_bytes + header_length;
    const std::uint64_t buffer_size = file_size - data_start_;
    std::vector<entry> entries;
    for (const auto& [name, value] : header.items())
    {
        if (name == "__metadata__")
        {
            metadata_ = read_metadata(path, value);
        }
        else
        {
            entries.push_back(read_entry(path, name, value, buffer_size, accepted));
        }
    }
    check_coverage(path, entries, buffer_size);
    for (entry& e : entries)
    {
        tensors_.emplace(e.name, tensor_info{std::move(e.dtype), std::move(e.shape), e.begin, e.end});
    }
    ::posix_fadvise(file.fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint for the read-ahead only
    fd_ = file.release();
}

safetensors_reader::~safetensors_reader()
{
    ::close(fd_);
}

template <class T>
void safetensors_reader::read(const std::string& name, T* out) const
{
    const tensor_info& t = tensors_.at(name);
    const std::uint64_t at = data_start_ + t.begin;
    const std::size_t count = t.count();
    const auto as_is = [](auto v) { return v; };
    bool complete = false;
    if (t.dtype == (std::is_same<T, float>::value ? "F32" : "F64"))
    {
        complete = read_at(fd_, out, count * sizeof(T), at) == count * sizeof(T);  // T itself: no conversion
    }
    else if (t.dtype == "F32")
    {
        complete = read_converted<float>(fd_, at, count, out, as_is);
    }
    else if (t.dtype == "F64")
    {
        complete = read_converted<double>(fd_, at, count, out, as_is);
    }
    else if (t.dtype == "F16")
    {
        complete = read_converted<std::uint16_t>(fd_, at, count, out, half_to_float);
    }
    else  // BF16, the only other dtype the header's check lets through
    {
        complete = read_converted<std::uint16_t>(fd_, at, count, out, bfloat16_to_float);
    }
    if (!complete)
    {
        fail(path_, "cannot read the data of tensor " + printable(name) + " (file changed while reading?)");
    }
}

template <class T>
array<T> safetensors_reader::read(const std::string& name) const
{
    array<T> out = array<T>::from_shape(tensors_.at(name).shape);
    read(name, out.data());
    return out;
}

template void safetensors_reader::read(const std::string&, float*) const;
template void safetensors_reader::read(const std::string&, double*) const;
template array<float> safetensors_reader::read(const std::string&) const;
template array<double> safetensors_reader::read(const std::string&) const;

safetensors_file read_safetensors(const std::string& path, accepted_dtypes accepted)
{
    const safetensors_reader reader(path, accepted);
    safetensors_file out;
    out.metadata = reader.metadata();
    for (const auto& [name, t] : reader.tensors())
    {
        out.tensors.emplace(name, stored_tensor{t.dtype, reader.read<double>(name)});
    }
    return out;
}

void write_safetensors(const std::string& path, const safetensors_file& file)
{
    const std::string header = header_for(path, file);
    temp_writer out(path);
    unsigned char length_field[length_field_bytes];
    for (std::size_t k = 0; k < length_field_bytes; ++k)
    {
        length_field[k] =
          static_cast<unsigned char>((static_cast<std::uint64_t>(header.size()) >> (8 * k)) & 0xff);
    }
    out.write(length_field, sizeof length_field);
    out.write(header.data(), header.size());
    for (const auto& [name, t] : file.tensors)
    {
        write_values(out, t);
    }
    out.commit();
}
}  // namespace xgrad::io
