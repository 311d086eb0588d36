// Atomic output folders: temporary files first, renamed into place, everything undone on failure.
#include "tools/output_folder.hpp"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace fs = std::filesystem;

namespace xgrad::tools
{
bool entry_exists(const fs::path& p)
{
    std::error_code ec;
    return fs::symlink_status(p, ec).type() != fs::file_type::not_found && !ec;
}

std::string output_folder_problem(const fs::path& out)
{
    std::error_code ec;
    return entry_exists(out) && !fs::is_directory(out, ec) ? "--out " + out.string() + ": exists and is not a directory"
                                                           : "";
}

namespace
{
// The directories that creating `dir` would add, outermost first.
std::vector<fs::path> missing_directories(const fs::path& dir)
{
    std::vector<fs::path> missing;
    fs::path p = fs::absolute(dir).lexically_normal();
    if (!p.has_filename())
    {
        p = p.parent_path();  // "out/" names the directory "out"
    }
    for (; !p.empty() && !entry_exists(p); p = p.parent_path())
    {
        missing.insert(missing.begin(), p);
        if (p == p.parent_path())
        {
            break;
        }
    }
    return missing;
}

void create_directories(const fs::path& out, const std::vector<fs::path>& dirs)
{
    for (const fs::path& dir : dirs)
    {
        std::error_code ec;
        if (!fs::create_directory(dir, ec) && ec)
        {
            throw output_error("--out " + out.string() + ": cannot create " + dir.string() + " (" + ec.message() + ")");
        }
    }
}

void rename_into_place(const fs::path& from, const fs::path& target)
{
    std::error_code ec;
    if (fs::is_directory(target, ec))
    {
        throw output_error(target.string() + ": is a directory, cannot replace it with a file");
    }
    fs::rename(from, target, ec);
    if (ec)
    {
        throw output_error(target.string() + ": cannot write (" + ec.message() + ")");
    }
}
}  // namespace

void write_output_folder(const fs::path& out, const std::vector<output_file>& files, const std::string& program)
{
    const std::vector<fs::path> created = missing_directories(out);
    std::string temp;
    std::vector<fs::path> placed;
    try
    {
        create_directories(out, created);
        temp = (out / ("." + program + ".tmp-XXXXXX")).string();
        if (!mkdtemp(temp.data()))
        {
            const std::string reason = std::strerror(errno);
            temp.clear();
            throw output_error("--out " + out.string() + ": cannot create a temporary directory (" + reason + ")");
        }
        for (const auto& [name, write] : files)
        {
            write((fs::path(temp) / name).string());
        }
        for (const auto& [name, write] : files)
        {
            rename_into_place(fs::path(temp) / name, out / name);
            placed.push_back(out / name);
        }
        fs::remove(temp);
    }
    catch (...)
    {
        std::error_code ec;
        for (const fs::path& f : placed)
        {
            fs::remove(f, ec);
        }
        if (!temp.empty())
        {
            fs::remove_all(temp, ec);
        }
        for (auto dir = created.rbegin(); dir != created.rend(); ++dir)
        {
            fs::remove(*dir, ec);  // only removes it while empty
        }
        throw;
    }
}
}  // namespace xgrad::tools
