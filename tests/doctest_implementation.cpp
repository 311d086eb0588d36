// doctest's implementation, compiled once (tests/CMakeLists.txt, xgrad_doctest) for every test program and
// the docs' programs, which used to compile it each in its own file (about 3 CPU s each).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
