// The test programs' main: every test case of the program, doctest's command line (--test-case=...,
// --source-file=...) applied. The linker takes it from xgrad_doctest only for a program without a main
// of its own (the docs' programs have theirs, tests/doc_blocks.py).
#include <doctest/doctest.h>

int main(int argc, char** argv)
{
    return doctest::Context(argc, argv).run();
}
