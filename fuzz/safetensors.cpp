// Fuzz target: the safetensors reader (io/safetensors.hpp). A file the reader accepts must be written
// back by write_safetensors and read again to the same metadata, names, dtypes, shapes and values; a file
// it refuses must give format_error with one printable line that names the file. Anything else (another
// exception, a crash, a sanitizer report) is a bug.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz/fuzz_util.hpp"
#include "io/safetensors.hpp"

using namespace xgrad;
namespace fuzz = xgrad::fuzz;

namespace
{
bool same_values(const array<double>& a, const array<double>& b)
{
    if (to_shape(a.shape()) != to_shape(b.shape()))
    {
        return false;
    }
    for (std::size_t k = 0; k < a.size(); ++k)
    {
        const double x = a.data()[k], y = b.data()[k];
        const bool same = (std::isnan(x) && std::isnan(y)) || std::memcmp(&x, &y, sizeof x) == 0;
        if (!same)
        {
            return false;
        }
    }
    return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static const fuzz::scratch_file input("safetensors-input"), copy("safetensors-copy");
    input.write(data, size);
    io::safetensors_file file;
    try
    {
        file = io::read_safetensors(input.path);
    }
    catch (const io::format_error& e)
    {
        const std::string message = e.what();
        fuzz::require(message.rfind(input.path + ": ", 0) == 0, "message does not start with the path", message);
        fuzz::require(fuzz::printable(message), "message holds a byte that is not printable ASCII", message);
        return 0;
    }
    io::write_safetensors(copy.path, file);
    const io::safetensors_file again = io::read_safetensors(copy.path);
    fuzz::require(again.metadata == file.metadata, "metadata changed in a write and read");
    fuzz::require(again.tensors.size() == file.tensors.size(), "tensors changed in a write and read");
    for (const auto& [name, t] : file.tensors)
    {
        const auto found = again.tensors.find(name);
        fuzz::require(found != again.tensors.end(), "a tensor was lost in a write and read", name);
        fuzz::require(found->second.dtype == t.dtype, "a dtype changed in a write and read", name);
        fuzz::require(same_values(found->second.values, t.values), "values changed in a write and read", name);
    }
    return 0;
}
