// Parsing xgrad-train's and xgrad-sample's options with CLI11, every error as one line.
#include "tools/train_args.hpp"

#include <CLI/CLI.hpp>

#include "tools/command_line.hpp"

namespace xgrad::tools::train_cli
{
namespace
{
// The variant flags as given, turned into the config's enums after parsing (so that a bad value is
// reported with the values allowed, as the checkpoint's metadata reports it).
struct variant_flags
{
    std::string norm = "layernorm", position = "learned", mlp = "gelu_tanh", bias = "mlp";
    bool untied_head = false;
};

// --data and --out are checked after parsing, so that an unknown flag is reported first.
void add_train_flags(CLI::App& app, train::train_options& o, std::int64_t& warmup, std::int64_t& decay, bool& quiet,
                     variant_flags& v)
{
    app.add_option("--data", o.data, "text file to train on; required");
    app.add_option("--out", o.out, "folder for model.safetensors, log.csv, loss.png, attention.png; required");
    app.add_option("--steps", o.steps, "train up to this step")->capture_default_str();
    app.add_option("--layers", o.model.layers, "transformer blocks L")->capture_default_str();
    app.add_option("--d-model", o.model.d_model, "width d")->capture_default_str();
    app.add_option("--heads", o.model.heads, "query heads H (d % H == 0)")->capture_default_str();
    app.add_option("--kv-heads", o.model.kv_heads, "key/value heads G (H % G == 0; default H)");
    app.add_option("--block", o.model.block_size, "context length T")->capture_default_str();
    app.add_option("--batch", o.batch, "windows per step (per process under MPI)")->capture_default_str();
    app.add_option("--lr", o.lr, "peak learning rate X")->capture_default_str();
    app.add_option("--warmup", warmup, "warm-up steps W (default min(100, D / 10))");
    app.add_option("--decay-steps", decay, "cosine decay to X/10 ends at step D (default --steps)");
    app.add_option("--seed", o.seed, "seeds the initial weights and the batches")->capture_default_str();
    app.add_option("--threads", o.threads, "threads per process")->capture_default_str();
    app.add_flag("--resume", o.resume, "continue from --out/model.safetensors up to --steps");
    app.add_option("--tokenizer", o.tokenizer, "bytes, or a SentencePiece model trained on the training split: "
                   "bpe:N or unigram:N (vocabulary N)")->capture_default_str();
    app.add_option("--time", o.time_limit_s, "stop after the step that passes this many seconds of training "
                   "(validation and checkpoint there; 0: no limit)")->capture_default_str();
    app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay on matrices")->capture_default_str();
    app.add_option("--clip", o.clip, "clip the global gradient norm to this")->capture_default_str();
    app.add_option("--eval-every", o.eval_every, "validation loss every so many steps (and at the last)")
        ->capture_default_str();
    app.add_option("--eval-windows", o.eval_windows, "validation windows, evenly spaced")->capture_default_str();
    app.add_option("--save-every", o.save_every, "checkpoint every so many steps (and at the last)")
        ->capture_default_str();
    app.add_option("--sample-tokens", o.sample_tokens, "tokens sampled at the end (0: none)")->capture_default_str();
    app.add_flag("!--no-plots", o.plots, "do not draw loss.png and attention.png");
    app.add_option("--max-memory", o.max_memory, "refuse runs estimated to need more: BYTES (K, M, G, T) or auto")
      ->capture_default_str();
    app.add_flag("--detect-anomaly", o.detect_anomaly, "stop at the first op that makes a NaN or Inf");
    app.add_option("--sharpness-every", o.sharpness_every, "every N steps, log the top Hessian eigenvalue of the "
                   "loss on a fixed batch (sharpness column, sharpness.png; 0: never)")->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    app.add_option("--sharpness-iters", o.sharpness_iters, "power-iteration steps per sharpness estimate")
        ->check(CLI::PositiveNumber)->capture_default_str();
    app.add_flag("--quiet", quiet, "no progress output");
    app.add_option("--norm", v.norm, "layernorm | rmsnorm")->capture_default_str();
    app.add_option("--position", v.position, "learned | rope | none")->capture_default_str();
    app.add_option("--rope-base", o.model.rope_base, "base b of the rotary frequencies")->capture_default_str();
    app.add_option("--mlp", v.mlp, "gelu_tanh | gelu | swiglu")->capture_default_str();
    app.add_option("--mlp-hidden", o.model.mlp_hidden, "the MLP's hidden width h (default 4 d)");
    app.add_option("--bias", v.bias, "mlp | all | none: which biases exist")->capture_default_str();
    app.add_flag("--untied-head", v.untied_head, "a separate lm_head (d, V) instead of wte^T");
    app.add_option("--dropout", o.dropout, "inverted dropout in training (embedding, attention and MLP outputs)")
        ->capture_default_str();
}

// The train_options field each flag of add_train_flags sets (tests/test_train_args.cpp checks that every
// flag is here).
constexpr std::pair<const char*, const char*> flag_fields[] = {
    {"--data", "data"}, {"--out", "out"}, {"--steps", "steps"}, {"--layers", "model.layers"},
    {"--d-model", "model.d_model"}, {"--heads", "model.heads"}, {"--kv-heads", "model.kv_heads"},
    {"--block", "model.block_size"}, {"--batch", "batch"}, {"--lr", "lr"}, {"--warmup", "warmup"},
    {"--decay-steps", "decay_steps"}, {"--seed", "seed"}, {"--threads", "threads"}, {"--resume", "resume"},
    {"--tokenizer", "tokenizer"}, {"--time", "time_limit_s"}, {"--weight-decay", "weight_decay"},
    {"--clip", "clip"}, {"--eval-every", "eval_every"}, {"--eval-windows", "eval_windows"},
    {"--save-every", "save_every"}, {"--sample-tokens", "sample_tokens"}, {"--no-plots", "plots"},
    {"--max-memory", "max_memory"}, {"--detect-anomaly", "detect_anomaly"}, {"--norm", "model.norm"},
    {"--position", "model.position"}, {"--rope-base", "model.rope_base"}, {"--mlp", "model.mlp"},
    {"--mlp-hidden", "model.mlp_hidden"}, {"--bias", "model.bias"}, {"--untied-head", "model.tied_head"},
    {"--dropout", "dropout"}, {"--sharpness-every", "sharpness_every"}, {"--sharpness-iters", "sharpness_iters"},
};

// The variant flags in the config; a bad value is an input_error naming the flag and the values allowed.
void apply_variant(const variant_flags& v, models::gpt_config& c)
{
    try
    {
        c.norm = models::parse_norm("--norm", v.norm);
        c.position = models::parse_position("--position", v.position);
        c.mlp = models::parse_mlp("--mlp", v.mlp);
        c.bias = models::parse_bias("--bias", v.bias);
    }
    catch (const models::variant_error& e)
    {
        std::string shown = e.value.substr(0, 40);
        for (char& ch : shown)
        {
            ch = ch >= 32 && ch < 127 ? ch : '?';  // one printable line whatever was typed
        }
        throw input_error(e.key + " '" + shown + "' is not one of " + e.allowed + " (see --help)");
    }
    c.tied_head = !v.untied_head;
    if (c.mlp_hidden == 4 * c.d_model)
    {
        c.mlp_hidden = 0;  // the default width, given explicitly
    }
}
}  // namespace

std::string flag_of_field(const std::string& field)
{
    for (const auto& [flag, f] : flag_fields)
    {
        if (field == f)
        {
            return flag;
        }
    }
    return field;
}

std::vector<std::string> train_flags()
{
    CLI::App app;
    train::train_options o;
    std::int64_t warmup = -1, decay = -1;
    bool quiet = false;
    variant_flags v;
    add_train_flags(app, o, warmup, decay, quiet, v);
    std::vector<std::string> names;
    for (const CLI::Option* option : app.get_options())
    {
        if (!option->get_lnames().empty() && option->get_lnames()[0] != "help" && option->get_lnames()[0] != "quiet")
        {
            names.push_back("--" + option->get_lnames()[0]);
        }
    }
    return names;
}

train_command parse_train_arguments(const std::vector<std::string>& args)
{
    train_command c;
    std::int64_t warmup = -1, decay = -1;
    CLI::App app{"Train a small GPT on a text file (docs/spec.md's model; byte tokens; AdamW, warm-up + cosine)",
                 "xgrad-train"};
    variant_flags variant;
    add_train_flags(app, c.run, warmup, decay, c.quiet, variant);
    app.add_option("--precision", c.precision, "fp32 | bf16: matrix products on bfloat16-rounded operands")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->capture_default_str();
    if (!parse_command_line(app, args, cli_message::first_line))
    {
        c.help = true;
        c.help_text = app.help();
        return c;
    }
    // Checked here rather than by CLI11, which would report a missing --data before an unknown flag.
    for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--data", &c.run.data},
                                      {"--out", &c.run.out}})
    {
        if (value->empty())
        {
            throw input_error(std::string(flag) + " is required (see --help)");
        }
    }
    apply_variant(variant, c.run.model);
    if (warmup != -1)
    {
        c.run.warmup = warmup;
    }
    if (decay != -1)
    {
        c.run.decay_steps = decay;
    }
    return c;
}

sample_command parse_sample_arguments(const std::vector<std::string>& args)
{
    sample_command c;
    CLI::App app{"Sample text from a checkpoint written by xgrad-train", "xgrad-sample"};
    app.add_option("--checkpoint", c.checkpoint, "model.safetensors written by xgrad-train")->required();
    app.add_option("--prompt", c.prompt, "text to continue (the model's tokenizer must encode every character)");
    app.add_option("--tokens", c.run.tokens, "tokens to generate")->capture_default_str();
    app.add_option("--temperature", c.run.temperature, "0 picks the most likely token")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 100.0));
    app.add_option("--top-k", c.run.top_k, "sample among the k most likely (0: all)")->capture_default_str();
    app.add_option("--seed", c.run.seed, "seeds the sampling")->capture_default_str();
    if (!parse_command_line(app, args, cli_message::first_line))
    {
        c.help = true;
        c.help_text = app.help();
    }
    return c;
}
}  // namespace xgrad::tools::train_cli
