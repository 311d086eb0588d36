#include "source_dir.hpp"

const std::string& xgrad::test::source_dir()
{
    static const std::string root = XGRAD_SOURCE_DIR;
    return root;
}
