// llama2.c's folders (docs/spec.md, "Converting checkpoints: xgrad-convert"): io/llama2c.hpp's model.bin,
// plus the vocabulary beside it in tokenizer.bin (run.c's format) and, when the vocabulary is a
// SentencePiece model, tokenizer.model. Here rather than in io/ because the vocabulary is a tokenizer.
//
// tokenizer.bin: int32 max_token_length, then per token id a float32 score, an int32 byte length and
// the bytes. A byte vocabulary writes each token's byte with score 0; a SentencePiece model its pieces
// (U+2581 as a space) and scores. llama2.c's run treats token id 1 as the start of a text: it feeds id 1
// before the prompt and stops when it samples id 1. With a SentencePiece tokenizer id 1 is <s>, as in
// Llama; with a byte vocabulary id 1 is the vocabulary's second-smallest byte (often the newline or the
// space), so run starts every text as if that byte came first and stops at its first sampled occurrence.
#pragma once

#include <string>

#include "io/model_layout.hpp"

namespace xgrad::train
{
struct llama2c_model
{
    io::safetensors_file model; // xgrad's names and metadata
    std::string note;           // non-empty when the vocabulary could not be carried over
};

// Reads the folder. Throws format_error naming the file and the field: a model.bin that
// io::read_llama2c_model refuses; a tokenizer.bin that is truncated, holds another number of tokens than
// model.bin's vocab_size, or a tokenizer.model that does not parse or disagrees with it. Reads no more
// than each file holds.
llama2c_model read_llama2c(const std::string& folder);

// Writes `model` as a llama2.c folder, atomically (io::staged_folder). Throws std::invalid_argument
// naming the metadata key of a variant llama2.c cannot express (io::llama2c_model_bytes), or when the
// checkpoint has no vocabulary of its own size.
void write_llama2c(const std::string& folder,
                   const io::safetensors_file& model,
                   const io::model_layout& layout);
} // namespace xgrad::train
