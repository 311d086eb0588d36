// An example's command line, said option by option in CLI11's words (add_option, add_flag, required, a
// range) and parsed by CLI11 in examples/command_line.cpp: the one file of the examples that includes
// CLI11's header, whose compile costs every file that includes it several CPU seconds (docs/performance.md,
// "CLI11 compiled three times, not eleven"). --help prints the usage and creates nothing; a bad argument
// is one line on stderr and exit status 2, never an abort.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/gpt_config.hpp"

namespace CLI
{
class App;
class Option;
} // namespace CLI

namespace xgrad::examples
{
// One option of a command_line, for the rules on its value.
class option
{
public:
    explicit option(CLI::Option* o)
      : option_(o)
    {
    }
    option& required();                     // the program cannot run without it
    option& range(int lowest, int highest); // a whole number in [lowest, highest]
    option& positive();                     // a number > 0
    option& one_of(const std::vector<std::string>& choices);

private:
    CLI::Option* option_;
};

class command_line
{
public:
    command_line(const std::string& description, const std::string& program);
    ~command_line();
    command_line(const command_line&) = delete;
    command_line& operator=(const command_line&) = delete;

    // An option ("--steps") or a positional argument ("output_dir") read into `value`, whose value before
    // parsing is the default --help shows. An unsigned value refuses a negative number (CLI11 alone would
    // wrap "-1" around to 2^64 - 1). Defined for the integer types, double and std::string.
    template<class T>
    option add_option(const std::string& name, T& value, const std::string& help);
    void add_flag(const std::string& name, bool& value, const std::string& help);
    // The GPT's config as the tools' flags (tools/model_flags.hpp): --layers, --d-model, --norm, ...
    void add_model_flags(models::gpt_config& config);
    // An option added before, by its name, for more rules.
    option get_option(const std::string& name);

    // Parses argv. Returns the status to exit with when the program should stop here: 0 after printing
    // --help, 2 after a bad argument (one line on stderr); nothing when it should go on.
    std::optional<int> parse(int argc, char** argv);

private:
    std::unique_ptr<CLI::App> app_;
};
} // namespace xgrad::examples
