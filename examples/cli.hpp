// The examples parse their command lines as the tools do (CLI11): --help prints the usage and creates
// nothing; a bad argument is one line on stderr and exit status 2, never an abort.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>

namespace xgrad::examples
{
// Parses argv into `app`. Returns the status to exit with when the program should stop here: 0 after
// printing --help, 2 after a bad argument; nothing when it should go on.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv)
{
    try
    {
        app.parse(argc, argv);
        return std::nullopt;
    }
    catch (const CLI::CallForHelp&)
    {
        std::printf("%s", app.help().c_str());
        return 0;
    }
    catch (const CLI::ParseError& e)
    {
        std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), e.what());
        return 2;
    }
}
}  // namespace xgrad::examples
