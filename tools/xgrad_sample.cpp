// xgrad-sample: continues a prompt with a model trained by xgrad-train, one token at a time through a
// key/value cache (models/gpt_decode.hpp).
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "io/checkpoint.hpp"
#include "models/gpt_decode.hpp"
#include "train/text_data.hpp"

using namespace xgrad;

namespace
{
const char* const program = "xgrad-sample";

int fail_with(const std::string& message, int status)
{
    std::fprintf(stderr, "%s: %s\n", program, message.substr(0, message.find('\n')).c_str());
    return status;
}

train::byte_vocabulary vocabulary_of(const io::checkpoint<float>& ck, const std::string& path)
{
    const auto it = ck.metadata.find("vocab");
    if (it == ck.metadata.end())
    {
        throw std::runtime_error(path + " has no \"vocab\" metadata (not trained on text by xgrad-train)");
    }
    train::byte_vocabulary v = train::byte_vocabulary::from_json(it->second);
    if (v.size() != ck.params.config.vocab_size)
    {
        throw std::runtime_error(path + ": \"vocab\" lists " + std::to_string(v.size()) + " bytes but vocab_size is " +
                                 std::to_string(ck.params.config.vocab_size));
    }
    return v;
}
}  // namespace

int main(int argc, char** argv)
{
    std::string checkpoint, prompt = "\n";
    models::sampling_options o;
    CLI::App app{"Sample text from a checkpoint written by xgrad-train", program};
    app.add_option("--checkpoint", checkpoint, "model.safetensors written by xgrad-train")->required();
    app.add_option("--prompt", prompt, "text to continue (every byte must be in the model's vocabulary)");
    app.add_option("--tokens", o.tokens, "tokens to generate")->capture_default_str();
    app.add_option("--temperature", o.temperature, "0 picks the most likely token")->capture_default_str()->check(
        CLI::Range(0.0, 100.0));
    app.add_option("--top-k", o.top_k, "sample among the k most likely (0: all)")->capture_default_str();
    app.add_option("--seed", o.seed, "seeds the sampling")->capture_default_str();
    try
    {
        app.parse(argc, argv);
    }
    catch (const CLI::CallForHelp&)
    {
        std::fputs(app.help().c_str(), stdout);
        return 0;
    }
    catch (const CLI::ParseError& e)
    {
        return fail_with(e.what(), 2);
    }
    try
    {
        const io::checkpoint<float> ck = io::load_checkpoint<float>(checkpoint);
        const train::byte_vocabulary vocab = vocabulary_of(ck, checkpoint);
        if (prompt.empty())
        {
            throw std::invalid_argument("--prompt must not be empty");
        }
        const std::vector<std::int32_t> ids = vocab.encode(prompt);
        const std::string text = vocab.decode(models::sample(ck.params, ids, o));
        std::printf("%s%s\n", prompt.c_str(), text.c_str());
        return 0;
    }
    catch (const std::invalid_argument& e)
    {
        return fail_with(e.what(), 2);
    }
    catch (const std::exception& e)
    {
        return fail_with(e.what(), 1);
    }
}
