// Fuzz target: the .npy reader (io/npy.hpp). Each input is written to a scratch file and read three ways
// (float64, float32, bool). A file the reader accepts must hold exactly its shape's elements and survive
// a write and a second read bit for bit; a file it refuses must give npy::error with one printable line
// that names the file. Anything else (another exception, a crash, a sanitizer report) is a bug.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz/fuzz_util.hpp"
#include "io/npy.hpp"

using namespace xgrad;

namespace
{
// The message of a refused file: "<path>: <problem>", printable ASCII, one line.
void check_message(const std::string& path, const npy::error& e)
{
    const std::string message = e.what();
    fuzz::require(message.rfind(path + ": ", 0) == 0, "message does not start with the path", message);
    fuzz::require(message.size() > path.size() + 2, "message names no problem", message);
    fuzz::require(fuzz::printable(message), "message holds a byte that is not printable ASCII", message);
}

template <class T>
void check_float(const std::string& path, const std::string& copy)
{
    array<T> a;
    try
    {
        a = npy::load_float<T>(path);
    }
    catch (const npy::error& e)
    {
        check_message(path, e);
        return;
    }
    fuzz::require(a.size() == element_count(to_shape(a.shape())), "size disagrees with the shape");
    npy::save(copy, a);
    const array<T> b = npy::load_float<T>(copy);
    fuzz::require(to_shape(a.shape()) == to_shape(b.shape()), "shape changed in a write and read");
    fuzz::require(a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0,
                  "values changed in a write and read");
}

void check_bool(const std::string& path, const std::string& copy)
{
    mask_t m;
    try
    {
        m = npy::load_bool(path);
    }
    catch (const npy::error& e)
    {
        check_message(path, e);
        return;
    }
    npy::save_bool(copy, m);
    fuzz::require(npy::load_bool(copy) == m, "mask changed in a write and read");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static const fuzz::scratch_file input("npy-input"), copy("npy-copy");
    input.write(data, size);
    check_float<double>(input.path, copy.path);
    check_float<float>(input.path, copy.path);
    check_bool(input.path, copy.path);
    return 0;
}
