// A SentencePiece model checked before libsentencepiece sees it. The library trusts the tries it loads: a
// corrupt precompiled_charsmap (the normaliser's) or denormaliser makes it read out of bounds while it
// encodes or decodes. xgrad's models use the identity normaliser and no denormaliser, so a model with
// either is refused, as is one larger than the bounds below; the rest of the file is the library's to
// parse (protobuf, which checks its own lengths).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace xgrad::train
{
// The largest model accepted: 64 MiB and 2^20 pieces (a 256k-piece vocabulary is about 5 MB).
constexpr std::size_t max_sentencepiece_model_bytes = std::size_t(64) << 20;
constexpr std::uint64_t max_sentencepiece_pieces = std::uint64_t(1) << 20;

// Reads the protobuf wire format of `serialized` (ModelProto: pieces = 1, normalizer_spec = 3,
// denormalizer_spec = 5; NormalizerSpec: precompiled_charsmap = 2) in one bounded pass and throws
// std::invalid_argument starting with "tokenizer_model: " naming the problem: too many bytes or pieces,
// a piece that is empty or holds a NUL byte (SentencePiece: piece = 1), a non-empty
// precompiled_charsmap, a denormaliser, or wire data that is not a protobuf message.
void check_sentencepiece_model(const std::string& serialized);
} // namespace xgrad::train
