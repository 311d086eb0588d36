// examples/command_line.hpp on CLI11: compiled once for every example.
#include "examples/command_line.hpp"

#include <cstdint>
#include <cstdio>
#include <type_traits>

#include <CLI/CLI.hpp>

#include "tools/command_line.hpp"
#include "tools/model_flags.hpp"

namespace xgrad::examples
{
option& option::required()
{
    option_->required();
    return *this;
}

option& option::range(int lowest, int highest)
{
    option_->check(CLI::Range(lowest, highest));
    return *this;
}

option& option::positive()
{
    option_->check(CLI::PositiveNumber);
    return *this;
}

option& option::one_of(const std::vector<std::string>& choices)
{
    option_->check(CLI::IsMember(choices));
    return *this;
}

command_line::command_line(const std::string& description, const std::string& program)
  : app_(std::make_unique<CLI::App>(description, program))
{
}

command_line::~command_line() = default;

template<class T>
option command_line::add_option(const std::string& name, T& value, const std::string& help)
{
    CLI::Option* o = app_->add_option(name, value, help)->capture_default_str();
    if constexpr (std::is_unsigned_v<T>)
    {
        o->check(tools::integer_check<T>());
    }
    return option(o);
}

template option command_line::add_option(const std::string&, int&, const std::string&);
template option command_line::add_option(const std::string&, long&, const std::string&);
template option command_line::add_option(const std::string&, long long&, const std::string&);
template option command_line::add_option(const std::string&, unsigned&, const std::string&);
template option command_line::add_option(const std::string&, unsigned long&, const std::string&);
template option command_line::add_option(const std::string&, unsigned long long&, const std::string&);
template option command_line::add_option(const std::string&, double&, const std::string&);
template option command_line::add_option(const std::string&, std::string&, const std::string&);

void command_line::add_flag(const std::string& name, bool& value, const std::string& help)
{
    app_->add_flag(name, value, help);
}

void command_line::add_model_flags(models::gpt_config& config)
{
    tools::add_model_flags(*app_, config);
}

option command_line::get_option(const std::string& name)
{
    return option(app_->get_option(name));
}

std::optional<int> command_line::parse(int argc, char** argv)
{
    try
    {
        app_->parse(argc, argv);
        return std::nullopt;
    }
    catch (const CLI::CallForHelp&)
    {
        std::printf("%s", app_->help().c_str());
        return 0;
    }
    catch (const CLI::ParseError& e)
    {
        std::fprintf(stderr, "%s: %s (see --help)\n", app_->get_name().c_str(), e.what());
        return 2;
    }
}
} // namespace xgrad::examples
