// Parsing xgrad-convert's options with CLI11: two formats, each one of three, and the two paths.
#include "tools/convert_args.hpp"

#include <CLI/CLI.hpp>

#include "tools/command_line.hpp"

namespace xgrad::tools::convert_cli
{
convert_command parse_convert_arguments(const std::vector<std::string>& args)
{
    CLI::App app{"Converts a GPT checkpoint between xgrad's safetensors file, a Hugging Face GPT-2 folder "
                 "(model.safetensors + config.json, and the tokenizer's vocab.json + merges.txt when "
                 "present) and a llama2.c folder (model.bin + tokenizer.bin)",
                 program};
    convert_command c;
    const std::vector<std::string> formats = {"xgrad", "hf-gpt2", "llama2c"};
    app.add_option("--from", c.from, "format of IN: xgrad | hf-gpt2 | llama2c")
        ->required()
        ->check(CLI::IsMember(formats));
    app.add_option("--to", c.to, "format of OUT: xgrad | hf-gpt2 | llama2c")
        ->required()
        ->check(CLI::IsMember(formats));
    app.add_option("IN", c.in, "checkpoint file (xgrad) or folder")->required();
    app.add_option("OUT", c.out, "checkpoint file (xgrad) or folder, written atomically")->required();
    if (!parse_command_line(app, args))
    {
        c.help = true;
        c.help_text = app.help();
        return c;
    }
    if (c.in.empty() || c.out.empty())
    {
        throw input_error("IN and OUT must not be empty");
    }
    return c;
}
}  // namespace xgrad::tools::convert_cli
