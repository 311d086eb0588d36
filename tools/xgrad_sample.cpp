// xgrad-sample: continues a prompt with a model trained by xgrad-train, one token at a time through a
// key/value cache (models/gpt_decode.hpp). The prompt is encoded and the tokens decoded by the
// checkpoint's tokenizer (bytes or SentencePiece, train/tokenizer.hpp).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "tools/train_args.hpp"
#include "models/gpt_decode.hpp"
#include "train/tokenizer.hpp"

using namespace xgrad;

namespace
{
const char* const program = "xgrad-sample";

int fail_with(const std::string& message, int status)
{
    std::fprintf(stderr, "%s: %s\n", program, message.substr(0, message.find('\n')).c_str());
    return status;
}

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
}  // namespace

int main(int argc, char** argv)
{
    tools::train_cli::sample_command command;
    try
    {
        command = tools::train_cli::parse_sample_arguments(std::vector<std::string>(argv + 1, argv + argc));
    }
    catch (const tools::train_cli::input_error& e)
    {
        return fail_with(e.what(), 2);
    }
    if (command.help)
    {
        std::fputs(command.help_text.c_str(), stdout);
        return 0;
    }
    const std::string& checkpoint = command.checkpoint;
    const std::string& prompt = command.prompt;
    const models::sampling_options& o = command.run;
    try
    {
        const io::checkpoint<float> ck = io::load_checkpoint<float>(checkpoint);
        const auto vocab = tokenizer_of(ck, checkpoint);
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
        const std::string text = vocab->decode(models::sample(ck.params, ids, o));
        std::printf("%s%s\n", prompt.c_str(), text.c_str());
        return 0;
    }
    catch (const std::invalid_argument& e)
    {
        return fail_with(e.what(), 2);
    }
    catch (const io::format_error& e)  // a malformed checkpoint is bad input too
    {
        return fail_with(e.what(), 2);
    }
    catch (const std::exception& e)
    {
        return fail_with(e.what(), 1);
    }
}
