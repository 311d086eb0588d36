// The out-of-line parts of io/binary.hpp: whole-file reads under a limit and the cursor's refusal.
#include "io/binary.hpp"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "io/safetensors.hpp" // format_error, fail

namespace xgrad::io
{
std::string read_binary_file(const std::string& path, std::uintmax_t limit)
{
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec)
    {
        fail(path, "cannot read (" + ec.message() + ")");
    }
    if (size > limit)
    {
        fail(path, "is " + std::to_string(size) + " bytes, more than its header can describe");
    }
    std::ifstream in(path, std::ios::binary);
    std::string bytes(size, '\0');
    if (!in.read(bytes.data(), static_cast<std::streamsize>(size)))
    {
        fail(path, "cannot read");
    }
    return bytes;
}

void binary_cursor::truncated(const char* what) const
{
    fail(path, std::string("truncated at byte ") + std::to_string(at) + " (reading " + what + ")");
}
} // namespace xgrad::io
