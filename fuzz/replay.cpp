// Replays inputs through a fuzz target without libFuzzer or clang: the ctest entries fuzz_replay_<name>
// run every file of fuzz/regressions/<name> (each input that once found a bug) and fuzz/corpus/<name>
// through the normal build, so a bug that comes back fails the test suite.
//
//   fuzz_replay_<name> PATH...   (files, or directories whose files are replayed in name order)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace fs = std::filesystem;

int main(int argc, char** argv)
{
    std::vector<fs::path> inputs;
    for (int i = 1; i < argc; ++i)
    {
        const fs::path p = argv[i];
        if (fs::is_directory(p))
        {
            for (const auto& entry : fs::directory_iterator(p))
            {
                if (entry.is_regular_file() && entry.path().filename().string()[0] != '.')
                {
                    inputs.push_back(entry.path());
                }
            }
        }
        else if (fs::is_regular_file(p))
        {
            inputs.push_back(p);
        }
        else
        {
            std::fprintf(stderr, "fuzz replay: %s: no such file or directory\n", argv[i]);
            return 2;
        }
    }
    std::sort(inputs.begin(), inputs.end());
    for (const fs::path& p : inputs)
    {
        std::ifstream f(p, std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        std::fprintf(stderr, "replaying %s\n", p.string().c_str());
        LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    }
    std::printf("replayed %zu inputs\n", inputs.size());
    return 0;
}
