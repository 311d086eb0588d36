// xgrad-sample: continues a prompt with a model trained by xgrad-train, one token at a time through a
// key/value cache (models/gpt_decode.hpp). The prompt is encoded and the tokens decoded by the
// checkpoint's tokenizer (bytes or SentencePiece, train/tokenizer.hpp).
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint.hpp"
#include "tools/tool_errors.hpp"
#include "tools/train_args.hpp"
#include "models/gpt_decode.hpp"
#include "train/tokenizer.hpp"

using namespace xgrad;

namespace
{
const char* const program = tools::train_cli::sample_program;

// docs/spec.md, "Exit statuses": 2 bad flags, an empty prompt, a checkpoint that is missing, unreadable or
// malformed, a tokenizer it refuses, a prompt its tokenizer cannot encode; 1 any other failure.
const tools::error_rules errors{program, tools::wording::first_line,
                                {/*bad_value*/ 2, /*bad_file*/ 2, /*anomaly*/ 1, /*failure*/ 1}};

std::shared_ptr<const train::tokenizer> tokenizer_of(const io::checkpoint_reader& ck, const std::string& path)
{
    // A tokenizer that does not parse, or that disagrees with the model, is a malformed checkpoint: bad
    // input (invalid_argument, exit 2).
    const std::shared_ptr<const train::tokenizer> t = train::tokenizer_from_metadata(ck.metadata(), path);
    if (t->size() != ck.config().vocab_size)
    {
        throw std::invalid_argument(path + ": the tokenizer has " + std::to_string(t->size()) +
                                    " tokens but vocab_size is " + std::to_string(ck.config().vocab_size));
    }
    return t;
}

// The flags' ranges that CLI11 does not check: a temperature that is a number (NaN passes a range check),
// at most models::max_sampled_tokens tokens, a top-k below 2^31.
void check_sample_flags(const models::sampling_options& o)
{
    if (!(o.temperature >= 0 && o.temperature <= 100))
    {
        throw tools::train_cli::input_error("--temperature " + std::to_string(o.temperature) +
                                            ": must be a number from 0 to 100");
    }
    if (o.tokens > models::max_sampled_tokens)
    {
        throw tools::train_cli::input_error("--tokens " + std::to_string(o.tokens) + ": at most " +
                                            std::to_string(models::max_sampled_tokens));
    }
    if (o.top_k > std::size_t(INT32_MAX))
    {
        throw tools::train_cli::input_error("--top-k " + std::to_string(o.top_k) + ": at most " +
                                            std::to_string(INT32_MAX) + " (0: every token)");
    }
}

// The help text, or the prompt and its continuation, on stdout.
void run(const tools::train_cli::sample_command& command)
{
    if (command.help)
    {
        std::fputs(command.help_text.c_str(), stdout);
        return;
    }
    // Sampling needs the parameters alone: the optimiser's state stays on disk, and each parameter is read
    // straight into the decoder's buffers.
    const io::checkpoint_reader ck(command.checkpoint);
    const auto vocab = tokenizer_of(ck, command.checkpoint);
    const std::string& prompt = command.prompt;
    if (prompt.empty())
    {
        throw std::invalid_argument("--prompt must not be empty");
    }
    std::vector<std::int32_t> ids;
    try
    {
        ids = vocab->encode(prompt);
    }
    catch (const std::invalid_argument& e)
    {
        throw std::invalid_argument("--prompt: " + std::string(e.what()));
    }
    models::decoder<float> model(models::run_as(ck.config(), command.run_as), ck.source<float>());
    const std::string text = vocab->decode(models::sample(model, ids, command.run));
    std::printf("%s%s\n", prompt.c_str(), text.c_str());
}
}  // namespace

int main(int argc, char** argv)
{
    try
    {
        const std::vector<std::string> args(argv + 1, argv + argc);
        const tools::train_cli::sample_command command = tools::train_cli::parse_sample_arguments(args);
        if (!command.help)
        {
            check_sample_flags(command.run);
        }
        run(command);
        return 0;
    }
    catch (...)
    {
        return tools::fail_with_current_exception(errors);
    }
}
