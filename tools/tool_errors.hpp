// How every command-line tool ends on an error (docs/spec.md, "Exit statuses"): one line on stderr,
// "PROGRAM: message", and a status that says whose fault it was: 2 bad input, 1 the run failed, 3 an
// anomaly. The tools tell the same kinds of failure apart but, as the spec's table has it, do not all give
// them the same status; each tool states its own error_rules beside its main.
#pragma once

#include <stdexcept>
#include <string>

namespace xgrad::tools
{
// Bad usage or bad input that a tool finds itself: exit status 2 in every tool.
struct input_error : std::runtime_error
{
    using std::runtime_error::runtime_error;
};

// How a tool says a message on its one line.
enum class wording
{
    // The message up to its first newline, as it is; an anomaly by its summary (xgrad-train,
    // xgrad-sample, xgrad-convert, xgrad-experiment).
    first_line,
    // The whole message, control bytes as \xNN (io/escape.hpp) and trailing spaces dropped; an anomaly
    // with its forward trace; a failure that no check of the tool's anticipated (a std::invalid_argument
    // from inside the library among them) as "internal error: ...", std::bad_alloc as "out of memory"
    // (xgrad-mha-npy, xgrad-gpt-npy: their messages quote the bytes of the files they read).
    escaped,
};

// The exit status of each kind of failure; an input_error is 2 in every tool.
struct exit_statuses
{
    int bad_value;  // std::invalid_argument: a bad flag value, a malformed checkpoint or prompt
    int bad_file;   // io::format_error, npy::error: a file that does not parse
    int anomaly;    // anomaly_error: --detect-anomaly found the op that made a NaN or an Inf
    int failure;    // anything else: an output that cannot be written, out of memory, an internal error
};

// How one tool ends on an error.
struct error_rules
{
    const char* program;
    wording words;
    exit_statuses status;
};

// docs/spec.md's row for xgrad-mha-npy and xgrad-gpt-npy: 2 bad input (flags, files, shapes, values); 1 an
// output that cannot be written, out of memory, an internal error (a std::invalid_argument that reaches
// main is a check of the library's that the tool's own checks did not anticipate); 3 an anomaly.
constexpr error_rules npy_tool_rules(const char* program)
{
    return {program, wording::escaped, {/*bad_value*/ 1, /*bad_file*/ 2, /*anomaly*/ 3, /*failure*/ 1}};
}

// The message on one line as the .npy tools say it: control bytes as \xNN, no trailing spaces.
std::string escaped_line(const std::string& message);

// Writes "program: message" to stderr, the message said as `tool.words` says it; returns status.
int fail_with(const error_rules& tool, int status, const std::string& message);

// Inside a catch block: the line and the status for the exception being handled.
int fail_with_current_exception(const error_rules& tool);
}  // namespace xgrad::tools
