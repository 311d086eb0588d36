// xgrad-convert: a GPT checkpoint from one format to another (docs/spec.md, "Converting checkpoints:
// xgrad-convert"): xgrad's safetensors checkpoint, Hugging Face's GPT-2 folder, llama2.c's folder. Works
// on tensors, names and metadata only. Bad input or a variant the target cannot express: one line on
// stderr, exit 2, nothing written (folders are built beside OUT and renamed into place). The command
// line is parsed by tools/convert_args.cpp.
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "io/hf_gpt2.hpp"
#include "io/model_layout.hpp"
#include "tools/convert_args.hpp"
#include "tools/tool_errors.hpp"
#include "train/gpt2_tokenizer.hpp"
#include "train/llama2c_tokenizer.hpp"
#include "train/tokenizer.hpp"

using namespace xgrad;
using tools::convert_cli::convert_command;

namespace
{
using tools::convert_cli::program;

// docs/spec.md, "Exit statuses": every failure is 2, the input's (a malformed input, a model the target
// cannot express).
const tools::error_rules errors{program, tools::wording::first_line,
                                {/*bad_value*/ 2, /*bad_file*/ 2, /*anomaly*/ 2, /*failure*/ 2}};

io::safetensors_file read_model(const std::string& format, const std::string& in, io::model_layout& layout)
{
    if (format == "hf-gpt2")
    {
        io::safetensors_file model = io::read_hf_gpt2(in, layout);
        train::read_hf_gpt2_tokenizer(in, model.metadata);  // vocab.json and merges.txt, when present
        return model;
    }
    if (format == "llama2c")
    {
        train::llama2c_model m = train::read_llama2c(in);
        if (!m.note.empty())
        {
            std::fprintf(stderr, "%s: note: %s\n", program, m.note.c_str());
        }
        layout = io::model_layout::from_metadata(m.model.metadata, in);
        return m.model;
    }
    return io::read_model_checkpoint(in, layout);
}

// Tensors stored in half precision become F32 (exact); a vocabulary in the metadata must parse and have
// the model's size.
void normalise(io::safetensors_file& model, const io::model_layout& layout, const std::string& in)
{
    for (auto& [name, tensor] : model.tensors)
    {
        if (tensor.dtype != "F64")
        {
            tensor.dtype = "F32";
        }
    }
    if (!model.metadata.count("vocab") && !model.metadata.count("tokenizer"))
    {
        return;
    }
    const auto vocabulary = train::tokenizer_from_metadata(model.metadata, in);
    if (vocabulary->size() != layout.vocab_size)
    {
        throw std::invalid_argument(in + ": the tokenizer in the metadata has " +
                                    std::to_string(vocabulary->size()) + " tokens but \"vocab_size\" is " +
                                    std::to_string(layout.vocab_size));
    }
}

void write_model(const std::string& format,
                 const std::string& out,
                 const io::safetensors_file& model,
                 const io::model_layout& layout)
{
    if (format == "hf-gpt2")
    {
        io::safetensors_file without_tokenizer = model;  // GPT-2's tokenizer goes into its own two files
        const auto files = train::take_hf_gpt2_tokenizer(without_tokenizer.metadata, out);
        io::write_hf_gpt2(out, without_tokenizer, layout, files);
    }
    else if (format == "llama2c")
    {
        train::write_llama2c(out, model, layout);
    }
    else
    {
        io::write_safetensors(out, model);
    }
}

void convert(const convert_command& c)
{
    io::model_layout layout;
    io::safetensors_file model = read_model(c.from, c.in, layout);
    normalise(model, layout, c.in);
    write_model(c.to, c.out, model, layout);
    std::printf("%s (%s) -> %s (%s): %zu tensors, %zu layers, d_model %zu, vocabulary %zu\n",
                c.in.c_str(),
                c.from.c_str(),
                c.out.c_str(),
                c.to.c_str(),
                model.tensors.size(),
                layout.layers,
                layout.d_model,
                layout.vocab_size);
}
} // namespace

int main(int argc, char** argv)
{
    try
    {
        const convert_command c = tools::convert_cli::parse_convert_arguments(
            std::vector<std::string>(argv + 1, argv + argc));
        if (c.help)
        {
            std::fputs(c.help_text.c_str(), stdout);
        }
        else
        {
            convert(c);
        }
        return 0;
    }
    catch (const std::bad_alloc&)  // "out of memory" rather than std::bad_alloc's what()
    {
        return tools::fail_with(errors, 2, "out of memory");
    }
    catch (...)
    {
        return tools::fail_with_current_exception(errors);
    }
}
