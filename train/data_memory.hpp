// The training data's share of memory, checked before the file is read: text_corpus::load holds the
// file's text and its tokens at once, at most one token per byte of text, each in 1, 2 or 4 bytes by the
// vocabulary's size (train/text_data.hpp, token_split): a file of n bytes needs up to 2 n with the byte
// vocabulary (a 400 MB text about 800 MB). xgrad-train and xgrad.train.run refuse a file whose loading
// alone would not fit the memory budget (--max-memory), before reading it. (SentencePiece's trainer
// needs memory of its own beyond this, which is not estimated.)
#pragma once

#include <cstdint>
#include <string>

#include "train/memory_estimate.hpp"
#include "train/text_data.hpp"
#include "train/tokenizer.hpp"

namespace xgrad::train
{
// The most bytes text_corpus::load holds for a file of `file_bytes` bytes tokenized by `spec`: the text
// and one token per byte. Saturates instead of wrapping.
std::uint64_t text_data_bytes(std::uint64_t file_bytes, const tokenizer_spec& spec);

// Throws option_error naming the fields "data" and "max_memory" when text_data_bytes of the file at
// `path` exceeds the budget `max_memory` ("auto" or a size, as parse_memory_budget reads it). A file that
// cannot be sized, or a budget that does not parse, passes: the loader and the run's own memory check
// report those.
void require_data_memory(const std::string& path, const std::string& max_memory, const tokenizer_spec& spec);

// The run's estimate with the loaded data's tokens added, which the training step's estimate leaves out.
// They count under `workspace` (memory_estimate has no field of their own yet), saturating.
memory_estimate with_training_data(memory_estimate need, const text_corpus& data);
} // namespace xgrad::train
