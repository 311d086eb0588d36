// The output folder of xgrad-mha-npy and xgrad-gpt-npy (docs/spec.md, "Exit statuses"): every file is
// written or none is, and a folder the tool had to create is removed again when it fails.
#pragma once

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace xgrad::tools
{
// The outputs could not be written: exit status 1.
struct output_error : std::runtime_error
{
    using std::runtime_error::runtime_error;
};

// True when there is a directory entry (even a broken link: loading it then reports the problem).
bool entry_exists(const std::filesystem::path& p);

// Why `out` cannot be the output folder ("--out DIR: exists and is not a directory"), or "" when it can.
std::string output_folder_problem(const std::filesystem::path& out);

// One output: its file name in the folder, and the function that writes it to a given path.
using output_file = std::pair<std::string, std::function<void(const std::string&)>>;

// Writes every file into a temporary folder ".<program>.tmp-XXXXXX" inside `out` (created with its
// missing parents), then renames them into place. On any failure nothing it wrote or created is left.
void write_output_folder(const std::filesystem::path& out, const std::vector<output_file>& files,
                         const std::string& program);
}  // namespace xgrad::tools
