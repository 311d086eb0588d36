// What the fuzz targets share: a check that aborts with a readable report (libFuzzer then keeps the
// input), a scratch file for readers that take a path, and the printable-ASCII test for messages.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace xgrad::fuzz
{
// A property the target must keep: when it fails, print what and abort (a crash libFuzzer reports).
inline void require(bool ok, const char* what, const std::string& detail = "")
{
    if (!ok)
    {
        std::fprintf(stderr, "fuzz check failed: %s\n%s\n", what, detail.c_str());
        std::abort();
    }
}

inline bool printable(const std::string& s)
{
    for (const char ch : s)
    {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c >= 0x7f)
        {
            return false;
        }
    }
    return true;
}

// A command line as the command-line targets read their input: arguments separated by NUL bytes (no
// argument at all for an empty input).
inline std::vector<std::string> split_at_nul(const std::uint8_t* data, std::size_t size)
{
    std::vector<std::string> args;
    if (size > 0)
    {
        args.emplace_back();
    }
    for (std::size_t i = 0; i < size; ++i)
    {
        if (data[i] == 0)
        {
            args.emplace_back();
        }
        else
        {
            args.back() += static_cast<char>(data[i]);
        }
    }
    return args;
}

// A file in the temp folder (on /dev/shm when there is one), removed when the process ends normally.
struct scratch_file
{
    std::string path;

    explicit scratch_file(const char* stem)
    {
        const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        std::string pattern = std::string(dir) + "/xgrad-fuzz-" + stem + "-XXXXXX";
        const int fd = mkstemp(pattern.data());
        require(fd >= 0, "cannot create a scratch file", pattern);
        close(fd);
        path = pattern;
    }
    ~scratch_file() { std::remove(path.c_str()); }
    scratch_file(const scratch_file&) = delete;
    scratch_file& operator=(const scratch_file&) = delete;

    void write(const std::uint8_t* data, std::size_t size) const
    {
        std::FILE* f = std::fopen(path.c_str(), "wb");
        require(f != nullptr, "cannot write the scratch file", path);
        const bool written = size == 0 || std::fwrite(data, 1, size, f) == size;
        require(std::fclose(f) == 0 && written, "cannot write the scratch file", path);
    }
};
}  // namespace xgrad::fuzz
