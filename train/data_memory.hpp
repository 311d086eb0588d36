// The training data's share of memory, checked before the file is read: text_corpus::load holds the
// file's text and its tokens (4 bytes each, at most one per byte of text) at once, so a data file of n
// bytes needs up to 5 n bytes while it loads (a 400 MB text about 2 GB). xgrad-train and xgrad.train.run
// refuse a file whose loading alone would not fit the memory budget (--max-memory), before reading it.
#pragma once

#include <cstdint>
#include <string>

namespace xgrad::train
{
// The most bytes text_corpus::load holds for a file of `file_bytes` bytes: the text and one 4-byte token
// per byte (a SentencePiece model makes fewer tokens). Saturates instead of wrapping.
std::uint64_t text_data_bytes(std::uint64_t file_bytes);

// Throws option_error naming the fields "data" and "max_memory" when text_data_bytes of the file at
// `path` exceeds the budget `max_memory` ("auto" or a size, as parse_memory_budget reads it). A file that
// cannot be sized, or a budget that does not parse, passes: the loader and the run's own memory check
// report those.
void require_data_memory(const std::string& path, const std::string& max_memory);
} // namespace xgrad::train
