#include "train/data_memory.hpp"

#include <filesystem>
#include <limits>
#include <stdexcept>

#include "train/memory_estimate.hpp"
#include "train/option_error.hpp"
#include "train/text_data.hpp"

namespace xgrad::train
{
std::uint64_t text_data_bytes(std::uint64_t file_bytes, const tokenizer_spec& spec)
{
    const std::size_t vocab = spec.type == tokenizer_spec::kind::bytes ? 256 : spec.vocab_size;
    const std::uint64_t bytes_per_byte = 1 + token_split::width_for(vocab); // the text and its token
    std::uint64_t need = 0;
    return __builtin_mul_overflow(file_bytes, bytes_per_byte, &need)
             ? std::numeric_limits<std::uint64_t>::max()
             : need;
}

void require_data_memory(const std::string& path, const std::string& max_memory, const tokenizer_spec& spec)
{
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec)
    {
        return;
    }
    memory_budget budget;
    try
    {
        budget = parse_memory_budget(max_memory, "max_memory");
    }
    catch (const std::invalid_argument&)
    {
        return;
    }
    const std::uint64_t need = text_data_bytes(size, spec);
    if (need > budget.bytes)
    {
        const std::string source =
          budget.source == "max_memory" ? "{}" : option_error::literal(budget.source);
        throw option_error("{} " + option_error::literal(path) + ": loading its " + std::to_string(size) +
                             " bytes needs about " + bytes_text(need) +
                             " (the text and a token per byte), more than the " + bytes_text(budget.bytes) +
                             " available (" + source + "); use a smaller file, or {} BYTES to insist",
                           budget.source == "max_memory"
                             ? std::vector<std::string>{ "data", "max_memory", "max_memory" }
                             : std::vector<std::string>{ "data", "max_memory" });
    }
}

memory_estimate with_training_data(memory_estimate need, const text_corpus& data)
{
    const std::uint64_t tokens = data.train.size() * data.train.bytes_per_token() +
                                 data.validation.size() * data.validation.bytes_per_token();
    if (__builtin_add_overflow(need.workspace, tokens, &need.workspace))
    {
        need.workspace = std::numeric_limits<std::uint64_t>::max();
    }
    return need;
}
} // namespace xgrad::train
