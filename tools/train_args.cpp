// Parsing xgrad-train's and xgrad-sample's options with CLI11, every error as one line.
#include "tools/train_args.hpp"

#include <CLI/CLI.hpp>

#include "tools/command_line.hpp"
#include "tools/model_flags.hpp"

namespace xgrad::tools::train_cli
{
namespace
{
// --data and --out are checked after parsing, so that an unknown flag is reported first.
void add_train_flags(CLI::App& app, train::train_options& o, std::int64_t& warmup, std::int64_t& decay, bool& quiet)
{
    app.add_option("--data", o.data, "text file to train on; required");
    app.add_option("--out", o.out, "folder for model.safetensors, log.csv, loss.png, attention.png; required");
    app.add_option("--steps", o.steps, "train up to this step")
        ->check(integer_check<std::int64_t>())->capture_default_str();
    app.add_option("--batch", o.batch, "windows per step (per process under MPI)")
        ->check(count_check())->capture_default_str();
    app.add_option("--lr", o.lr, "peak learning rate X")->capture_default_str();
    app.add_option("--warmup", warmup, "warm-up steps W (default min(100, D / 10))");
    app.add_option("--decay-steps", decay, "cosine decay to X/10 ends at step D (default --steps)");
    app.add_option("--seed", o.seed, "seeds the initial weights and the batches")
        ->check(count_check())->capture_default_str();
    app.add_option("--threads", o.threads, "threads per process")->capture_default_str();
    app.add_flag("--resume", o.resume, "continue from --out/model.safetensors up to --steps");
    app.add_option("--tokenizer", o.tokenizer, "bytes, a SentencePiece model trained on the training split: "
                   "bpe:N or unigram:N (vocabulary N), or GPT-2's: gpt2:DIR (DIR/vocab.json, DIR/merges.txt)")
        ->capture_default_str();
    app.add_option("--time", o.time_limit_s, "stop after the step that passes this many seconds of training "
                   "(validation and checkpoint there; 0: no limit)")->capture_default_str();
    app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay on matrices")->capture_default_str();
    app.add_option("--optimizer", o.optimizer, "adamw | muon: Muon on the blocks' matrices, AdamW on the rest")
        ->capture_default_str();
    app.add_option("--muon-lr", o.muon_lr, "Muon's peak learning rate (the schedule of --lr)")->capture_default_str();
    app.add_option("--muon-momentum", o.muon_momentum, "Muon's Nesterov momentum")->capture_default_str();
    app.add_option("--clip", o.clip, "clip the global gradient norm to this")->capture_default_str();
    app.add_option("--eval-every", o.eval_every, "validation loss every so many steps (and at the last)")
        ->capture_default_str();
    app.add_option("--eval-windows", o.eval_windows, "validation windows, evenly spaced")
        ->check(count_check())->capture_default_str();
    app.add_option("--save-every", o.save_every, "checkpoint every so many steps (and at the last)")
        ->capture_default_str();
    app.add_option("--sample-tokens", o.sample_tokens, "tokens sampled at the end (0: none)")
        ->check(count_check())->capture_default_str();
    app.add_flag("!--no-plots", o.plots, "do not draw loss.png and attention.png");
    app.add_option("--max-memory", o.max_memory, "refuse runs estimated to need more: BYTES (K, M, G, T) or auto")
      ->capture_default_str();
    app.add_flag("--detect-anomaly", o.detect_anomaly, "stop at the first op that makes a NaN or Inf");
    app.add_option("--sharpness-every", o.sharpness_every, "every N steps, log the top Hessian eigenvalue of the "
                   "loss on a fixed batch (sharpness column, sharpness.png; 0: never)")
        ->check(integer_check<std::int64_t>())->check(count_check())->capture_default_str();
    app.add_option("--sharpness-iters", o.sharpness_iters, "power-iteration steps per sharpness estimate")
        ->check(count_check())->capture_default_str();
    app.add_flag("--quiet", quiet, "no progress output");
    add_model_flags(app, o.model);
    app.add_option("--dropout", o.dropout, "inverted dropout in training (embedding, attention and MLP outputs)")
        ->capture_default_str();
}

// The train_options field each flag of add_train_flags sets, besides the model's (tools/model_flags.hpp;
// tests/test_train_args.cpp checks that every flag is here or there).
constexpr std::pair<const char*, const char*> flag_fields[] = {
    {"--data", "data"}, {"--out", "out"}, {"--steps", "steps"}, {"--batch", "batch"}, {"--lr", "lr"},
    {"--warmup", "warmup"}, {"--decay-steps", "decay_steps"}, {"--seed", "seed"}, {"--threads", "threads"},
    {"--resume", "resume"}, {"--tokenizer", "tokenizer"}, {"--time", "time_limit_s"},
    {"--weight-decay", "weight_decay"}, {"--clip", "clip"}, {"--eval-every", "eval_every"},
    {"--eval-windows", "eval_windows"}, {"--save-every", "save_every"}, {"--sample-tokens", "sample_tokens"},
    {"--no-plots", "plots"}, {"--max-memory", "max_memory"}, {"--detect-anomaly", "detect_anomaly"},
    {"--dropout", "dropout"}, {"--optimizer", "optimizer"}, {"--muon-lr", "muon_lr"},
    {"--muon-momentum", "muon_momentum"},
    {"--sharpness-every", "sharpness_every"}, {"--sharpness-iters", "sharpness_iters"},
};
}  // namespace

std::string flag_of_field(const std::string& field)
{
    const std::string model = "model.";
    if (field.compare(0, model.size(), model) == 0)
    {
        const std::string flag = flag_of_config_key(field.substr(model.size()));
        return flag.empty() ? field : flag;
    }
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
    std::int64_t warmup = 0, decay = 0;  // taken only when given (app.count)
    bool quiet = false;
    add_train_flags(app, o, warmup, decay, quiet);
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
    std::int64_t warmup = 0, decay = 0;  // taken only when given (app.count)
    CLI::App app{"Train a small GPT on a text file (docs/spec.md's model; byte tokens; AdamW, warm-up + cosine)",
                 train_program};
    add_train_flags(app, c.run, warmup, decay, c.quiet);
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
    if (c.run.model.mlp_hidden == 4 * c.run.model.d_model)
    {
        c.run.model.mlp_hidden = 0;  // the default width, given explicitly
    }
    if (app.count("--warmup") > 0)  // given, even as -1: the library refuses what is out of range
    {
        c.run.warmup = warmup;
    }
    if (app.count("--decay-steps") > 0)
    {
        c.run.decay_steps = decay;
    }
    return c;
}

sample_command parse_sample_arguments(const std::vector<std::string>& args)
{
    sample_command c;
    CLI::App app{"Sample text from a checkpoint written by xgrad-train", sample_program};
    app.add_option("--checkpoint", c.checkpoint, "model.safetensors written by xgrad-train")->required();
    app.add_option("--prompt", c.prompt, "text to continue (the model's tokenizer must encode every character)");
    app.add_option("--tokens", c.run.tokens, "tokens to generate")->check(count_check())->capture_default_str();
    app.add_option("--temperature", c.run.temperature, "0 picks the most likely token")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 100.0));
    app.add_option("--top-k", c.run.top_k, "sample among the k most likely (0: all)")
        ->check(count_check())->capture_default_str();
    app.add_option("--seed", c.run.seed, "seeds the sampling")->check(count_check())->capture_default_str();
    add_run_as_flags(app, c.run_as);
    if (!parse_command_line(app, args, cli_message::first_line))
    {
        c.help = true;
        c.help_text = app.help();
    }
    return c;
}
}  // namespace xgrad::tools::train_cli
