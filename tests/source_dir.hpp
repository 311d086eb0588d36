// The repository's root, where the tests read their fixtures and the docs they check. Its path is compiled
// into tests/source_dir.cpp alone, so that no other file's compile command names the clone: a build in
// another clone reuses ccache's objects (docs/performance.md, "The build").
#pragma once

#include <string>

namespace xgrad::test
{
const std::string& source_dir();
// The build's tools and examples (build/bin), for the tests that run a tool; compiled in likewise.
const std::string& program_dir();
}  // namespace xgrad::test
