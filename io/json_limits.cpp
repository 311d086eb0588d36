#include "io/json_limits.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace xgrad::io
{
std::string read_small_file(const std::string& path, std::size_t limit)
{
    struct stat info
    {
    };
    if (::stat(path.c_str(), &info) != 0)
    {
        throw std::invalid_argument(path + ": cannot read (" + std::strerror(errno) + ")");
    }
    if (S_ISDIR(info.st_mode))
    {
        throw std::invalid_argument(path + ": is a directory, not a file");
    }
    if (!S_ISREG(info.st_mode))
    {
        throw std::invalid_argument(path + ": is not a regular file (a device, FIFO or socket)");
    }
    if (static_cast<std::uintmax_t>(info.st_size) > limit)
    {
        throw std::invalid_argument(path + ": holds " + std::to_string(info.st_size) + " bytes; at most " +
                                    std::to_string(limit) + " are read");
    }
    std::ifstream in(path, std::ios::binary);
    std::string text;
    char chunk[65536];
    while (in.read(chunk, sizeof chunk) || in.gcount() > 0)
    {
        text.append(chunk, static_cast<std::size_t>(in.gcount()));
        if (text.size() > limit) // it grew past the limit since stat
        {
            throw std::invalid_argument(path + ": holds more than " + std::to_string(limit) + " bytes");
        }
    }
    if (in.bad())
    {
        throw std::invalid_argument(path + ": cannot read");
    }
    return text;
}
} // namespace xgrad::io
