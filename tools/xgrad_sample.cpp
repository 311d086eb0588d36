// xgrad-sample: continues a prompt with a model trained by xgrad-train, one token at a time through a
// key/value cache (models/gpt_decode.hpp). The prompt is encoded and the tokens decoded by the
// checkpoint's tokenizer (bytes or SentencePiece, train/tokenizer.hpp).
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
const char* const program = "xgrad-sample";

// docs/spec.md, "Exit statuses": 2 bad flags, an empty prompt, a malformed checkpoint or tokenizer, a
// prompt its tokenizer cannot encode; 1 any other failure.
const tools::error_rules errors{program, tools::wording::first_line,
                                {/*bad_value*/ 2, /*bad_file*/ 2, /*anomaly*/ 1, /*failure*/ 1}};

std::shared_ptr<const train::tokenizer> tokenizer_of(const io::checkpoint<float>& ck, const std::string& path)
{
    // A tokenizer that does not parse, or that disagrees with the model, is a malformed checkpoint: bad
    // input (invalid_argument, exit 2).
    const std::shared_ptr<const train::tokenizer> t = train::tokenizer_from_metadata(ck.metadata, path);
    if (t->size() != ck.params.config.vocab_size)
    {
        throw std::invalid_argument(path + ": the tokenizer has " + std::to_string(t->size()) +
                                 " tokens but vocab_size is " + std::to_string(ck.params.config.vocab_size));
    }
    return t;
}

// The help text, or the prompt and its continuation, on stdout.
void run(const tools::train_cli::sample_command& command)
{
    if (command.help)
    {
        std::fputs(command.help_text.c_str(), stdout);
        return;
    }
    // Sampling needs the parameters alone: the optimiser's state stays on disk.
    auto ck = io::load_checkpoint<float>(command.checkpoint, io::optimiser_state::skip);
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
    models::decoder<float> model(std::move(ck.params));  // the only copy: the model's memory is held once
    const std::string text = vocab->decode(models::sample(model, ids, command.run));
    std::printf("%s%s\n", prompt.c_str(), text.c_str());
}
}  // namespace

int main(int argc, char** argv)
{
    try
    {
        run(tools::train_cli::parse_sample_arguments(std::vector<std::string>(argv + 1, argv + argc)));
        return 0;
    }
    catch (...)
    {
        return tools::fail_with_current_exception(errors);
    }
}
