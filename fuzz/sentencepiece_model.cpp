// Fuzz target: a SentencePiece model as a checkpoint's metadata, llama2.c's tokenizer.model or an hf-gpt2
// folder hands it to xgrad (train/tokenizer.hpp): sentencepiece_tokenizer::from_serialized on the bytes,
// checked by train/sentencepiece_model_check.hpp before libsentencepiece loads it. A model it refuses must
// give std::invalid_argument with one line; a model it accepts must encode and decode text and name its
// pieces without a crash or a sanitizer report (a corrupt normaliser or denormaliser trie once made the
// library read out of bounds here).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.hpp"
#include "train/tokenizer.hpp"

using namespace xgrad::train;
namespace fuzz = xgrad::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string serialized(reinterpret_cast<const char*>(data), size);
    std::shared_ptr<const sentencepiece_tokenizer> model;
    try
    {
        model = sentencepiece_tokenizer::from_serialized(serialized);
    }
    catch (const std::invalid_argument& e)
    {
        const std::string what = e.what();
        fuzz::require(what.rfind("tokenizer_model: ", 0) == 0, "a refusal that does not name tokenizer_model",
                      what.substr(0, 200));
        return 0;
    }
    const std::vector<std::int32_t> ids = model->encode_allowing_unknown("ab c\n\tabc \xe2\x96\x81 zz\n");
    for (const std::int32_t id : ids)
    {
        fuzz::require(id >= 0 && static_cast<std::size_t>(id) < model->size(),
                      "an id outside the vocabulary");
    }
    model->decode(ids);
    for (std::size_t i = 0; i < std::min<std::size_t>(model->size(), 64); ++i)
    {
        model->piece(i);
        model->score(i);
    }
    return 0;
}
