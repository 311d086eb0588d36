#include "source_dir.hpp"

const std::string& xgrad::test::source_dir()
{
    static const std::string root = XGRAD_SOURCE_DIR;
    return root;
}

const std::string& xgrad::test::program_dir()
{
    static const std::string programs = XGRAD_PROGRAM_DIR;
    return programs;
}
