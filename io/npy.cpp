// The .npy reader and writer: the header is parsed as the small Python literal it is, every field is
// checked, and the data length must match the shape exactly before a byte of it is read.
#include "io/npy.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <type_traits>
#include <vector>

#include "io/escape.hpp"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tools/npy.cpp reads and writes little-endian data in place; port it before using a big-endian host"
#endif

namespace xgrad::npy
{
namespace
{
constexpr char magic[] = "\x93NUMPY";
constexpr std::size_t magic_size = 6;
constexpr std::size_t header_align = 64;  // NumPy's ARRAY_ALIGN
constexpr std::size_t max_dimensions = 64;  // NumPy's NPY_MAXDIMS (since 2.0; 32 before)

[[noreturn]] void fail(const std::string& path, const std::string& problem)
{
    throw error(path + ": " + problem);
}

// Header text as messages quote it: one line, bounded, every non-printable byte as \xNN.
std::string printable(const std::string& s, std::size_t limit = 60)
{
    return io::quoted(s, limit);
}

// A shape as Python writes the tuple: (), (3,), (2, 3).
std::string tuple_str(const shape_t& shape)
{
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i)
    {
        s += (i ? ", " : "") + std::to_string(shape[i]);
    }
    return s + (shape.size() == 1 ? ",)" : ")");
}

struct file_closer
{
    void operator()(std::FILE* f) const { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

// ---- the header: a Python dict literal of strings, booleans, integers and tuples ----------------------

struct value
{
    enum kind_t
    {
        string,
        boolean,
        integer,
        tuple,
        other,  // a list, dict, None, float...: parsed so the message can name the key, never accepted
    } kind = other;
    std::string text;  // string: its contents; other: a description
    bool flag = false;
    std::size_t number = 0;
    bool negative = false;
    std::vector<value> items;
};

class header_parser
{
public:
    header_parser(const std::string& path, const std::string& text) : path_(path), s_(text) {}

    std::map<std::string, value> dict()
    {
        skip_space();
        expect('{', "the header must be a Python dict starting with '{'");
        std::map<std::string, value> d;
        skip_space();
        while (peek() != '}')
        {
            value key = parse_value(0);
            if (key.kind != value::string)
            {
                bad("dict keys must be strings");
            }
            skip_space();
            expect(':', "expected ':' after key " + printable(key.text));
            value v = parse_value(0);
            if (!d.emplace(key.text, std::move(v)).second)
            {
                bad("key " + printable(key.text) + " appears twice");
            }
            skip_space();
            if (peek() == ',')
            {
                ++i_;
                skip_space();
            }
            else if (peek() != '}')
            {
                bad("expected ',' or '}' after the value of " + printable(key.text));
            }
        }
        ++i_;
        skip_space();
        if (i_ != s_.size())
        {
            bad("unexpected text after the dict: " + printable(s_.substr(i_), 20));
        }
        return d;
    }

private:
    static constexpr int max_depth = 32;

    [[noreturn]] void bad(const std::string& what) const
    {
        fail(path_, "malformed header (" + what + "): " + printable(s_));
    }

    char peek() const
    {
        if (i_ >= s_.size())
        {
            bad("it ends early");
        }
        return s_[i_];
    }

    void expect(char c, const std::string& what)
    {
        if (peek() != c)
        {
            bad(what);
        }
        ++i_;
    }

    void skip_space()
    {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
        {
            ++i_;
        }
    }

    bool word(const char* w)
    {
        const std::size_t n = std::strlen(w);
        if (s_.compare(i_, n, w) != 0)
        {
            return false;
        }
        const std::size_t end = i_ + n;
        if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_'))
        {
            return false;
        }
        i_ = end;
        return true;
    }

    value parse_value(int depth)
    {
        if (depth > max_depth)
        {
            bad("nested too deeply");
        }
        skip_space();
        value v;
        const char c = peek();
        if (c == '\'' || c == '"')
        {
            v.kind = value::string;
            v.text = parse_string(c);
        }
        else if (word("True"))
        {
            v.kind = value::boolean;
            v.flag = true;
        }
        else if (word("False"))
        {
            v.kind = value::boolean;
        }
        else if (word("None"))
        {
            v.text = "None";
        }
        else if (c == '(' || c == '[' || c == '{')
        {
            const char close = c == '(' ? ')' : c == '[' ? ']' : '}';
            v.kind = c == '(' ? value::tuple : value::other;
            v.text = c == '(' ? "tuple" : c == '[' ? "list" : "dict";
            ++i_;
            skip_space();
            bool comma = false;  // (x) without a comma is x itself in Python, not a tuple
            while (peek() != close)
            {
                v.items.push_back(parse_value(depth + 1));
                skip_space();
                if (c == '{')
                {
                    expect(':', "expected ':' in a nested dict");
                    parse_value(depth + 1);
                    skip_space();
                }
                if (peek() == ',')
                {
                    comma = true;
                    ++i_;
                    skip_space();
                }
                else if (peek() != close)
                {
                    bad(std::string("expected ',' or '") + close + "'");
                }
            }
            ++i_;
            if (c == '(' && v.items.size() == 1 && !comma)
            {
                return v.items.front();
            }
        }
        else if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c)))
        {
            parse_number(v);
        }
        else
        {
            bad("unexpected character " + printable(std::string(1, c)));
        }
        return v;
    }

    std::string parse_string(char quote)
    {
        ++i_;
        std::string out;
        while (peek() != quote)
        {
            char c = s_[i_++];
            if (c == '\\')
            {
                c = peek();
                ++i_;
            }
            else if (c == '\n')
            {
                bad("newline inside a string");
            }
            out += c;
        }
        ++i_;
        return out;
    }

    void parse_number(value& v)
    {
        v.kind = value::integer;
        if (s_[i_] == '-' || s_[i_] == '+')
        {
            v.negative = s_[i_] == '-';
            ++i_;
        }
        if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_])))
        {
            bad("a sign without a number");
        }
        bool overflow = false;
        while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
        {
            const std::size_t digit = static_cast<std::size_t>(s_[i_++] - '0');
            overflow = overflow || __builtin_mul_overflow(v.number, std::size_t(10), &v.number) ||
                       __builtin_add_overflow(v.number, digit, &v.number);
        }
        if (i_ < s_.size() && (s_[i_] == 'L' || s_[i_] == 'l'))  // Python 2 long, as old NumPy wrote it
        {
            ++i_;
        }
        else if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E' || s_[i_] == 'x'))
        {
            v.kind = value::other;
            v.text = "a non-integer number";
            while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                                      s_[i_] == '-' || s_[i_] == '+'))
            {
                ++i_;
            }
            return;
        }
        if (overflow)
        {
            bad("integer too large");
        }
    }

    const std::string& path_;
    const std::string& s_;
    std::size_t i_ = 0;
};

// ---- reading ------------------------------------------------------------------------------------------

enum class dtype
{
    f8,
    f4,
    b1,
    i8,
    i4,
};

// The family of dtypes a caller accepts.
enum class wanted
{
    floats,
    bools,
    ints,
};

std::size_t item_size(dtype t)
{
    return t == dtype::f8 || t == dtype::i8 ? 8 : t == dtype::f4 || t == dtype::i4 ? 4 : 1;
}

wanted family_of(dtype t)
{
    return t == dtype::b1 ? wanted::bools : t == dtype::i8 || t == dtype::i4 ? wanted::ints : wanted::floats;
}

struct opened
{
    file_ptr file;
    dtype type;
    shape_t shape;
    std::size_t count;  // elements
};

const char* needed(wanted want)
{
    switch (want)
    {
    case wanted::bools: return "a bool array ('|b1') is needed";
    case wanted::ints: return "an integer array is needed (int64 '<i8' or int32 '<i4')";
    default: return "a float array is needed (float64 '<f8' or float32 '<f4')";
    }
}

std::string dtype_problem(const std::string& descr, wanted want)
{
    const char kind = descr.size() >= 2 ? descr[1] : '?';
    const std::string bytes = descr.size() > 2 ? descr.substr(2) : "";
    const bool sized = !bytes.empty() && bytes.size() <= 2 &&
                       std::all_of(bytes.begin(), bytes.end(), [](char c) { return c >= '0' && c <= '9'; });
    const char wanted_kind = want == wanted::floats ? 'f' : want == wanted::ints ? 'i' : '\0';
    if (descr.size() > 2 && descr[0] == '>' && kind == wanted_kind)
    {
        const char* family = kind == 'f' ? "float" : "integer";
        return "dtype " + printable(descr) + " is big-endian; a little-endian " + family +
               " array is needed (in NumPy: a.astype(" + printable(std::string("<") + kind + bytes) + "))";
    }
    std::string name;
    if (descr == "|b1")
    {
        name = " (bool)";
    }
    else if (sized && (kind == 'i' || kind == 'u' || kind == 'f' || kind == 'c'))
    {
        const int bits = std::stoi(bytes) * 8;
        const char* family = kind == 'i' ? "int" : kind == 'u' ? "uint" : kind == 'f' ? "float" : "complex";
        name = " (" + std::string(family) + std::to_string(bits) + ")";
    }
    return "dtype " + printable(descr) + name + " is not supported; " + needed(want);
}

opened open_npy(const std::string& path, wanted want)
{
    // stat before opening: opening a FIFO for reading would block until someone writes to it.
    struct stat st
    {
    };
    if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    {
        fail(path, S_ISDIR(st.st_mode) ? "is a directory, not a .npy file" : "is not a regular file");
    }
    errno = 0;
    file_ptr f(std::fopen(path.c_str(), "rb"));
    if (!f)
    {
        fail(path, std::string("cannot open (") + std::strerror(errno) + ")");
    }
    if (fstat(fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode))
    {
        fail(path, "is not a regular file");
    }
    const auto file_size = static_cast<std::size_t>(st.st_size);

    auto read_exact = [&](void* dst, std::size_t n, const char* what) {
        if (n > 0 && std::fread(dst, 1, n, f.get()) != n)
        {
            fail(path, std::string("cannot read ") + what +
                           (std::ferror(f.get()) ? std::string(" (") + std::strerror(errno) + ")"
                                                 : std::string(" (file ends early)")));
        }
    };

    unsigned char prefix[magic_size + 2];
    if (file_size < sizeof prefix)
    {
        fail(path,
             "not a .npy file (" + std::to_string(file_size) + " bytes, too short for the magic string)");
    }
    read_exact(prefix, sizeof prefix, "the magic string");
    if (std::memcmp(prefix, magic, magic_size) != 0)
    {
        fail(path, "not a .npy file (bad magic string " +
                       printable(std::string(reinterpret_cast<char*>(prefix), magic_size)) +
                       ", expected '\\x93NUMPY')");
    }
    const unsigned major = prefix[6], minor = prefix[7];
    if (!(minor == 0 && (major == 1 || major == 2 || major == 3)))
    {
        fail(path, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                       " (1.0, 2.0 and 3.0 are supported)");
    }
    const std::size_t length_bytes = major == 1 ? 2 : 4;
    if (file_size < sizeof prefix + length_bytes)
    {
        fail(path, "truncated: the file ends inside the header length field");
    }
    unsigned char length_field[4] = {};
    read_exact(length_field, length_bytes, "the header length");
    std::size_t header_length = 0;
    for (std::size_t k = length_bytes; k-- > 0;)
    {
        header_length = header_length * 256 + length_field[k];
    }
    const std::size_t data_offset = sizeof prefix + length_bytes + header_length;
    if (data_offset > file_size)
    {
        fail(path, "truncated: header length " + std::to_string(header_length) +
                       " runs past the end of the file (" + std::to_string(file_size) + " bytes)");
    }
    std::string text(header_length, '\0');
    read_exact(text.data(), header_length, "the header");
    if (text.find('\0') != std::string::npos)
    {
        fail(path, "malformed header (contains a NUL byte): " + printable(text));
    }

    const auto d = header_parser(path, text).dict();
    for (const auto& [key, v] : d)
    {
        if (key != "descr" && key != "fortran_order" && key != "shape")
        {
            fail(path, "malformed header (unexpected key " + printable(key) + "): " + printable(text));
        }
    }
    for (const char* key : {"descr", "fortran_order", "shape"})
    {
        if (!d.count(key))
        {
            fail(path, std::string("malformed header (no '") + key + "' key): " + printable(text));
        }
    }

    const value& descr = d.at("descr");
    if (descr.kind != value::string)
    {
        fail(path, descr.text == "list"
                       ? "structured dtypes are not supported; " + std::string(needed(want))
                       : "malformed header ('descr' must be a dtype string): " + printable(text));
    }
    dtype type;
    if (descr.text == "<f8")
    {
        type = dtype::f8;
    }
    else if (descr.text == "<f4")
    {
        type = dtype::f4;
    }
    else if (descr.text == "|b1")
    {
        type = dtype::b1;
    }
    else if (descr.text == "<i8")
    {
        type = dtype::i8;
    }
    else if (descr.text == "<i4")
    {
        type = dtype::i4;
    }
    else
    {
        fail(path, dtype_problem(descr.text, want));
    }
    if (family_of(type) != want)
    {
        fail(path, dtype_problem(descr.text, want));
    }

    const value& fortran = d.at("fortran_order");
    if (fortran.kind != value::boolean)
    {
        fail(path, "malformed header ('fortran_order' must be True or False): " + printable(text));
    }
    if (fortran.flag)
    {
        fail(path, "Fortran-order arrays are not supported; save a C-order array (np.ascontiguousarray)");
    }

    const value& shape = d.at("shape");
    if (shape.kind != value::tuple)
    {
        fail(path, "malformed header ('shape' must be a tuple of integers): " + printable(text));
    }
    opened o{std::move(f), type, {}, 1};
    if (shape.items.size() > max_dimensions)
    {
        fail(path, "shape has " + std::to_string(shape.items.size()) + " dimensions, more than the " +
                     std::to_string(max_dimensions) + " NumPy allows");
    }
    for (const value& s : shape.items)
    {
        if (s.kind != value::integer || (s.negative && s.number != 0))
        {
            fail(path,
                 "malformed header ('shape' must be a tuple of non-negative integers): " + printable(text));
        }
        o.shape.push_back(s.number);
    }
    // The byte size, and the strides' span (the sizes' product with a 0 counted as 1: an empty array of
    // shape (0, 2^40, 2^40) still has strides that must fit a signed 64-bit integer).
    std::size_t bytes = 0, span = 1, span_bytes = 0;
    bool overflow = false;
    for (std::size_t s : o.shape)
    {
        overflow = overflow || __builtin_mul_overflow(o.count, s, &o.count) ||
                   __builtin_mul_overflow(span, std::max<std::size_t>(s, 1), &span);
    }
    overflow = overflow || __builtin_mul_overflow(o.count, item_size(type), &bytes) ||
               __builtin_mul_overflow(span, item_size(type), &span_bytes) ||
               span_bytes > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
    if (overflow)
    {
        fail(path, "shape " + tuple_str(o.shape) + " is too large (its byte size overflows)");
    }
    const std::size_t available = file_size - data_offset;
    if (available != bytes)
    {
        fail(path, std::string(available < bytes ? "truncated" : "oversized") + ": shape " +
                       tuple_str(o.shape) + " of " + descr.text + " needs " + std::to_string(bytes) +
                       " data bytes, the file has " + std::to_string(available) + " after the header");
    }
    return o;
}

template <class T>
struct descr_of;
template <>
struct descr_of<double>
{
    static constexpr const char* value = "<f8";
};
template <>
struct descr_of<float>
{
    static constexpr const char* value = "<f4";
};

template <class S, class T>
void read_converted(const std::string& path, std::FILE* f, T* dst, std::size_t count)
{
    constexpr std::size_t chunk = 1 << 16;
    std::vector<S> buf(std::min(count, chunk));
    for (std::size_t done = 0; done < count;)
    {
        const std::size_t n = std::min(chunk, count - done);
        if (std::fread(buf.data(), sizeof(S), n, f) != n)
        {
            fail(path, "cannot read the data (file changed while reading?)");
        }
        for (std::size_t k = 0; k < n; ++k)
        {
            dst[done + k] = static_cast<T>(buf[k]);
        }
        done += n;
    }
}

// ---- writing ------------------------------------------------------------------------------------------

std::string header_for(const char* descr, const shape_t& shape)
{
    return "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + tuple_str(shape) +
           ", }";
}

// Format 1.0 unless the header needs more than 65535 bytes (then 2.0, as NumPy does); NumPy pads the
// header with spaces and a final '\n' so that the data starts on a 64-byte boundary.
void write_npy(const std::string& path, const char* descr, const shape_t& shape, const void* data,
               std::size_t bytes)
{
    std::string header = header_for(descr, shape);
    unsigned char major = 1;
    std::size_t prefix = magic_size + 2 + 2;
    std::size_t total = prefix + header.size() + 1;
    total += (header_align - total % header_align) % header_align;
    if (total - prefix > std::numeric_limits<std::uint16_t>::max())
    {
        major = 2;
        prefix += 2;
        total = prefix + header.size() + 1;
        total += (header_align - total % header_align) % header_align;
    }
    const std::size_t header_length = total - prefix;
    header.append(header_length - header.size() - 1, ' ');
    header += '\n';

    std::string head(magic, magic_size);
    head += static_cast<char>(major);
    head += '\0';
    for (std::size_t k = 0; k < (major == 1 ? 2u : 4u); ++k)
    {
        head += static_cast<char>((header_length >> (8 * k)) & 0xff);
    }
    head += header;

    errno = 0;
    file_ptr f(std::fopen(path.c_str(), "wb"));
    if (!f)
    {
        fail(path, std::string("cannot write (") + std::strerror(errno) + ")");
    }
    const bool written = std::fwrite(head.data(), 1, head.size(), f.get()) == head.size() &&
                         (bytes == 0 || std::fwrite(data, 1, bytes, f.get()) == bytes) &&
                         std::fflush(f.get()) == 0;
    const int saved_errno = errno;
    if (std::fclose(f.release()) != 0 || !written)
    {
        const std::string reason = std::strerror(written ? errno : saved_errno);
        std::remove(path.c_str());
        fail(path, "cannot write (" + reason + ")");
    }
}
}  // namespace

template <class T>
array<T> load_float(const std::string& path)
{
    opened o = open_npy(path, wanted::floats);
    array<T> a = array<T>::from_shape(o.shape);
    if ((o.type == dtype::f8) == std::is_same<T, double>::value)
    {
        if (o.count > 0 && std::fread(a.data(), sizeof(T), o.count, o.file.get()) != o.count)
        {
            fail(path, "cannot read the data (file changed while reading?)");
        }
    }
    else if (o.type == dtype::f8)
    {
        read_converted<double>(path, o.file.get(), a.data(), o.count);
    }
    else
    {
        read_converted<float>(path, o.file.get(), a.data(), o.count);
    }
    return a;
}

mask_t load_bool(const std::string& path)
{
    opened o = open_npy(path, wanted::bools);
    std::vector<unsigned char> bytes(o.count);
    if (o.count > 0 && std::fread(bytes.data(), 1, o.count, o.file.get()) != o.count)
    {
        fail(path, "cannot read the data (file changed while reading?)");
    }
    mask_t m = mask_t::from_shape(o.shape);
    for (std::size_t k = 0; k < o.count; ++k)
    {
        if (bytes[k] > 1)
        {
            fail(path, "corrupt bool data: byte " + std::to_string(bytes[k]) + " at element " +
                           std::to_string(k) + " (a bool is 0 or 1)");
        }
        m.data()[k] = bytes[k] != 0;
    }
    return m;
}

ids_t load_ids(const std::string& path)
{
    opened o = open_npy(path, wanted::ints);
    ids_t ids = ids_t::from_shape(o.shape);
    if (o.type == dtype::i8)
    {
        if (o.count > 0 && std::fread(ids.data(), sizeof(std::int64_t), o.count, o.file.get()) != o.count)
        {
            fail(path, "cannot read the data (file changed while reading?)");
        }
    }
    else
    {
        read_converted<std::int32_t>(path, o.file.get(), ids.data(), o.count);
    }
    return ids;
}

template <class T>
void save(const std::string& path, const array<T>& a)
{
    // array<T> is a dense row-major container: its buffer is the C-order data.
    write_npy(path, descr_of<T>::value, to_shape(a.shape()), a.data(), a.size() * sizeof(T));
}

void save_bool(const std::string& path, const mask_t& m)
{
    std::vector<unsigned char> bytes(m.size());
    std::copy(m.begin(), m.end(), bytes.begin());
    write_npy(path, "|b1", to_shape(m.shape()), bytes.data(), bytes.size());
}

void save_ids(const std::string& path, const ids_t& ids, int_width width)
{
    if (width == int_width::int64)
    {
        write_npy(path, "<i8", to_shape(ids.shape()), ids.data(), ids.size() * sizeof(std::int64_t));
        return;
    }
    std::vector<std::int32_t> narrow(ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k)
    {
        const std::int64_t v = ids.data()[k];
        if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max())
        {
            fail(path, "cannot write " + std::to_string(v) + " as int32 (element " + std::to_string(k) + ")");
        }
        narrow[k] = static_cast<std::int32_t>(v);
    }
    write_npy(path, "<i4", to_shape(ids.shape()), narrow.data(), narrow.size() * sizeof(std::int32_t));
}

template array<float> load_float<float>(const std::string&);
template array<double> load_float<double>(const std::string&);
template void save<float>(const std::string&, const array<float>&);
template void save<double>(const std::string&, const array<double>&);
}  // namespace xgrad::npy
