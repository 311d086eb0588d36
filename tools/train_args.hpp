// The command lines of xgrad-train and xgrad-sample (CLI11), parsed apart from the programs so that the
// fuzzer (fuzz/train_args.cpp) can call the parsers directly.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/gpt_decode.hpp"
#include "tools/tool_errors.hpp"
#include "train/trainer.hpp"

namespace xgrad::tools::train_cli
{
// The programs' names, which lead their usage and their messages.
inline constexpr const char* train_program = "xgrad-train";
inline constexpr const char* sample_program = "xgrad-sample";

// Bad usage: exit status 2, one line.
using tools::input_error;

struct train_command
{
    bool help = false;
    std::string help_text;        // when help
    train::train_options run;     // otherwise
    bool quiet = false;
    std::string precision = "fp32";  // --precision: the matmul precision of the run (kernels/precision.hpp)
};

struct sample_command
{
    bool help = false;
    std::string help_text;
    std::string checkpoint;
    std::string prompt = "\n";
    models::sampling_options run;
    std::map<std::string, std::string> run_as;  // variant values for models::run_as (tools/model_flags.hpp)
};

// The xgrad-train flag that sets a train_options field ("steps" -> "--steps", "model.block_size" ->
// "--block"): how the library's option_errors (train/option_error.hpp) are said on the command line.
// A field without a flag comes back as it is.
std::string flag_of_field(const std::string& field);
// The flags that set train_options fields (every flag of xgrad-train but --help, --quiet, --precision).
std::vector<std::string> train_flags();

// The arguments after the program name. Throw input_error with a one-line message for an unknown,
// malformed or missing option or a stray argument.
train_command parse_train_arguments(const std::vector<std::string>& args);
sample_command parse_sample_arguments(const std::vector<std::string>& args);
}  // namespace xgrad::tools::train_cli
