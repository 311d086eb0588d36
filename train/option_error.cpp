// option_error: a message template and the option fields it names.
#include "train/option_error.hpp"

#include <utility>

namespace xgrad::train
{
namespace
{
std::string fill(const std::string& format, const std::vector<std::string>& fields,
                 const std::function<std::string(const std::string&)>& name)
{
    std::string out;
    std::size_t next = 0;
    for (std::size_t i = 0; i < format.size(); ++i)
    {
        const bool brace_pair = format[i] == '{' && i + 1 < format.size();
        if (brace_pair && format[i + 1] == '{')
        {
            out += '{';
            ++i;
        }
        else if (brace_pair && format[i + 1] == '}' && next < fields.size())
        {
            out += name(fields[next++]);
            ++i;
        }
        else
        {
            out += format[i];
        }
    }
    return out;
}

std::string as_is(const std::string& field) { return field; }
}  // namespace

option_error::option_error(std::string format_, std::vector<std::string> fields_, option_problem problem_)
    : std::invalid_argument(fill(format_, fields_, as_is)), format(std::move(format_)), fields(std::move(fields_)),
      problem(problem_)
{
}

std::string option_error::literal(const std::string& text)
{
    std::string out;
    for (char c : text)
    {
        out += c == '{' ? std::string("{{") : std::string(1, c);
    }
    return out;
}

std::string option_error::message(const std::function<std::string(const std::string&)>& name) const
{
    return fill(format, fields, name);
}
}  // namespace xgrad::train
