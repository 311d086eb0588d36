// The exceptions the .npy tools turn into exit statuses (tools/tool_errors.hpp).
#include "tools/tool_errors.hpp"

#include <exception>
#include <iostream>
#include <new>

#include "autodiff/anomaly.hpp"
#include "io/escape.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "tools/output_folder.hpp"

namespace xgrad::tools
{
int fail_with(const char* program, int status, const std::string& message)
{
    std::string line = io::one_line(message);
    while (!line.empty() && line.back() == ' ')
    {
        line.pop_back();
    }
    std::cerr << program << ": " << line << std::endl;
    return status;
}

int fail_with_current_exception(const char* program)
{
    try
    {
        throw;
    }
    catch (const npy::error& e)
    {
        return fail_with(program, 2, e.what());
    }
    catch (const io::format_error& e)
    {
        return fail_with(program, 2, e.what());
    }
    catch (const output_error& e)
    {
        return fail_with(program, 1, e.what());
    }
    catch (const anomaly_error& e)
    {
        return fail_with(program, 3, e.one_line());
    }
    catch (const std::bad_alloc&)
    {
        return fail_with(program, 1, "out of memory");
    }
    catch (const std::exception& e)
    {
        return fail_with(program, 1, std::string("internal error: ") + e.what());
    }
    catch (...)
    {
        return fail_with(program, 1, "internal error: unknown exception");
    }
}
}  // namespace xgrad::tools
