// Fuzz target: the safetensors reader (io/safetensors.hpp), in both of its modes. In either, a file it
// refuses must give format_error with one printable line that names the file. A file the default mode
// (F32 and F64) accepts must be written back by write_safetensors and read again to the same metadata,
// names, dtypes, shapes and values, and the any_float mode (F16 and BF16 too) must read it the same way.
// Anything else (another exception, a crash, a sanitizer report) is a bug.
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

// What differs between two reads of a file: "" when nothing, else the first difference found.
std::string difference(const io::safetensors_file& a, const io::safetensors_file& b)
{
    if (a.metadata != b.metadata)
    {
        return "the metadata";
    }
    if (a.tensors.size() != b.tensors.size())
    {
        return "the number of tensors";
    }
    for (const auto& [name, t] : a.tensors)
    {
        const auto found = b.tensors.find(name);
        if (found == b.tensors.end())
        {
            return "tensor " + name + ": missing";
        }
        if (found->second.dtype != t.dtype)
        {
            return "tensor " + name + ": the dtype";
        }
        if (!same_values(found->second.values, t.values))
        {
            return "tensor " + name + ": the values";
        }
    }
    return "";
}

// Reads `path` in the mode `accepted` into `file`; false when the reader refuses it, as it must: with a
// format_error of one printable line that starts with the path.
bool read_or_refuse(const std::string& path, io::accepted_dtypes accepted, io::safetensors_file& file)
{
    try
    {
        file = io::read_safetensors(path, accepted);
        return true;
    }
    catch (const io::format_error& e)
    {
        const std::string message = e.what();
        fuzz::require(message.rfind(path + ": ", 0) == 0, "message does not start with the path", message);
        fuzz::require(fuzz::printable(message), "message holds a byte that is not printable ASCII", message);
        return false;
    }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static const fuzz::scratch_file input("safetensors-input"), copy("safetensors-copy");
    input.write(data, size);
    io::safetensors_file any_float;
    const bool any_float_read = read_or_refuse(input.path, io::accepted_dtypes::any_float, any_float);
    io::safetensors_file file;
    if (!read_or_refuse(input.path, io::accepted_dtypes::f32_and_f64, file))
    {
        return 0;
    }
    fuzz::require(any_float_read, "any_float refuses a file the default mode reads");
    const std::string widened = difference(any_float, file);
    fuzz::require(widened.empty(), "any_float reads an F32/F64 file differently", widened);
    io::write_safetensors(copy.path, file);
    const std::string round_trip = difference(io::read_safetensors(copy.path), file);
    fuzz::require(round_trip.empty(), "a write and read changed the file", round_trip);
    return 0;
}
