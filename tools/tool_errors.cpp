// The one way every tool ends on an error (tools/tool_errors.hpp).
#include "tools/tool_errors.hpp"

#include <cstdio>
#include <exception>
#include <new>

#include "autodiff/anomaly.hpp"
#include "io/escape.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "tools/output_folder.hpp"

namespace xgrad::tools
{
std::string escaped_line(const std::string& message)
{
    std::string line = io::one_line(message);
    while (!line.empty() && line.back() == ' ')
    {
        line.pop_back();
    }
    return line;
}

int fail_with(const error_rules& tool, int status, const std::string& message)
{
    // Either way no control byte of a file (a metadata value's ESC or NUL) reaches the terminal raw.
    const std::string line = tool.words == wording::escaped
                               ? escaped_line(message)
                               : io::one_line(message.substr(0, message.find('\n')));
    std::fprintf(stderr, "%s: %s\n", tool.program, line.c_str());
    return status;
}

int fail_with_current_exception(const error_rules& tool)
{
    const bool escaped = tool.words == wording::escaped;
    const std::string unexpected = escaped ? "internal error: " : "";
    const exit_statuses& status = tool.status;
    try
    {
        throw;
    }
    catch (const input_error& e)
    {
        return fail_with(tool, 2, e.what());
    }
    catch (const npy::error& e)
    {
        return fail_with(tool, status.bad_file, e.what());
    }
    catch (const io::format_error& e)
    {
        return fail_with(tool, status.bad_file, e.what());
    }
    catch (const anomaly_error& e)
    {
        return fail_with(tool, status.anomaly, escaped ? e.one_line() : e.what());
    }
    catch (const output_error& e)
    {
        return fail_with(tool, status.failure, e.what());
    }
    catch (const std::invalid_argument& e)
    {
        return fail_with(tool, status.bad_value, unexpected + e.what());
    }
    catch (const std::bad_alloc& e)
    {
        return fail_with(tool, status.failure, escaped ? "out of memory" : e.what());
    }
    catch (const std::exception& e)
    {
        return fail_with(tool, status.failure, unexpected + e.what());
    }
    catch (...)
    {
        return fail_with(tool, status.failure, unexpected + "unknown exception");
    }
}
}  // namespace xgrad::tools
