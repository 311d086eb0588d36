// Parsing xgrad-gpt-npy's options with CLI11: the help text, each option's check, and the project's
// one-line messages for unknown flags, stray arguments and missing options.
#include "tools/gpt_npy_args.hpp"

#include <CLI/CLI.hpp>

#include "tools/command_line.hpp"
#include "tools/model_flags.hpp"

namespace xgrad::tools::gpt_npy
{
namespace
{
const char* const description =
  R"(usage: xgrad-gpt-npy --checkpoint FILE --in DIR --out DIR [--grad tape|manual] [--dtype float64|float32]
                     [--detect-anomaly]

Runs the small GPT of a safetensors checkpoint on token ids stored as NumPy .npy files: the
logits, and with targets the mean cross-entropy loss and its gradient for every parameter.)";

const char* const files_text = R"(
Inputs in --in:
  tokens.npy (B,T)    int64 or int32, 1 <= T <= block_size, every id in [0, V)
  targets.npy (B,T)   optional, int64 or int32, ids in [0, V) or -1 (ignored by the loss)
The checkpoint holds the parameters under docs/spec.md's names and the sizes vocab_size (V), block_size,
layers, d_model, heads and kv_heads in its metadata; tensors named optim.* are ignored.

Outputs in --out (created if missing; existing files are replaced), in the compute dtype:
  logits.npy (B,T,V)
  loss.npy ()          with targets: the mean over targets that are not -1 (0 if all are -1)
  grads.safetensors    with targets: d loss / d parameter under each parameter's name and shape,
                       metadata copied from the checkpoint

Exit status: 0 on success (one summary line on stdout); 2 on bad usage or bad input, 1 when the
outputs cannot be written, 3 when --detect-anomaly finds an anomaly. On failure one line goes to
stderr and no output file is left behind.
)";

void add_options(CLI::App& app, options& o)
{
    app.set_help_flag("-h,--help", "print this text and exit");
    // Unknown arguments and missing options are checked after parsing (refuse_extras, require_options),
    // so that an unknown flag is reported as such, by its name, rather than as a missing option.
    app.allow_extras();
    app.add_option("--checkpoint", o.checkpoint, "the model: a safetensors file (required)")
      ->type_name("FILE");
    app.add_option("--in", o.in, "directory holding tokens.npy and, optionally, targets.npy (required)")
      ->type_name("DIR");
    app.add_option("--out", o.out, "directory for the outputs (required)")->type_name("DIR");
    app.add_option("--grad", o.grad, "backward by the autodiff tape (default) or the hand-derived backward")
      ->check(CLI::IsMember({"tape", "manual"}).description(""))
      ->type_name("tape|manual");
    app.add_option("--dtype", o.dtype, "compute and output dtype (default float64)")
      ->check(CLI::IsMember({"float64", "float32"}).description(""))
      ->type_name("float64|float32");
    app.add_flag("--detect-anomaly", o.detect_anomaly,
                 "stop at the first op of the tape whose value or gradient turns NaN or inf from finite "
                 "inputs, and name it (exit status 3); not with --grad manual");
    add_run_as_flags(app, o.run_as);
    app.footer(files_text);
}

// Arguments CLI11 did not recognise (it keeps them, in order, with allow_extras).
void refuse_extras(const CLI::App& app)
{
    for (const std::string& arg : app.remaining())
    {
        if (arg.rfind("-", 0) == 0)
        {
            throw input_error("unknown option '" + arg.substr(0, arg.find('=')) + "' (see --help)");
        }
    }
    if (!app.remaining().empty())
    {
        throw input_error("unexpected argument '" + app.remaining().front() + "' (see --help)");
    }
}

void require_options(const CLI::App& app)
{
    for (const char* name : {"--checkpoint", "--in", "--out"})
    {
        if (app.get_option(name)->count() == 0)
        {
            throw input_error(std::string("missing required option ") + name + " (see --help)");
        }
    }
}
}  // namespace

command_line parse_arguments(const std::vector<std::string>& args)
{
    command_line c;
    CLI::App app(description, program);
    add_options(app, c.run);
    if (!parse_command_line(app, args))
    {
        c.help = true;
        c.help_text = app.help();
        return c;
    }
    refuse_extras(app);
    require_options(app);
    for (const auto& [name, value] : {std::pair{"--checkpoint", &c.run.checkpoint}, std::pair{"--in", &c.run.in},
                                      std::pair{"--out", &c.run.out}})
    {
        if (value->empty())
        {
            throw input_error(std::string(name) + " needs a non-empty path (see --help)");
        }
    }
    if (c.run.detect_anomaly && c.run.grad == "manual")
    {
        throw input_error("--detect-anomaly watches the tape's ops; it does not apply to --grad manual");
    }
    return c;
}
}  // namespace xgrad::tools::gpt_npy
