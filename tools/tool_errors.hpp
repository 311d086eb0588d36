// How the .npy tools end on an error (docs/spec.md, "Exit statuses"): one line on stderr, "PROGRAM:
// message", and a status that says whose fault it was: 2 bad input, 1 the run failed, 3 an anomaly.
#pragma once

#include <string>

namespace xgrad::tools
{
// Writes "program: message" (its first line, without trailing spaces) to stderr; returns status.
int fail_with(const char* program, int status, const std::string& message);

// Inside a catch block: the line and status for the exception being handled. Bad files (npy::error,
// io::format_error) exit 2, an output folder that cannot be written 1, an anomaly 3, anything else
// (out of memory, an internal error) 1.
int fail_with_current_exception(const char* program);
}  // namespace xgrad::tools
