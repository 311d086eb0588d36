// The command line of xgrad-mha-npy, parsed apart from the program so that tests and the fuzzer
// (fuzz/mha_npy_args.cpp) can call the parser directly.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/tool_errors.hpp"

namespace xgrad::tools::mha_npy
{
// Bad usage or bad input: exit status 2.
using tools::input_error;

struct options
{
    std::filesystem::path in, out;
    std::size_t heads = 0, kv_heads = 0;  // kv_heads 0: as many as heads
    bool causal = false;
    bool manual = false;
    bool float32 = false;
    bool detect_anomaly = false;
};

// The arguments after the program name (without --help, which the program handles first). Throws
// input_error with a one-line message for an unknown, repeated or malformed option or a missing one.
options parse_arguments(const std::vector<std::string>& args);
}  // namespace xgrad::tools::mha_npy
