// Builds against the installed xgrad::xgrad: a byte vocabulary's round trip through its checkpoint
// metadata (train/tokenizer.cpp, whose object also holds the SentencePiece tokenizer): "installed" has
// eight distinct bytes.
#include <cstdio>

#include "train/tokenizer.hpp"

int main()
{
    const std::string text = "installed";
    xgrad::train::metadata_map metadata;
    xgrad::train::byte_vocabulary::of_text(text).to_metadata(metadata);
    const auto vocabulary = xgrad::train::tokenizer_from_metadata(metadata, "consumer");
    const bool ok = vocabulary->size() == 8 && vocabulary->decode(vocabulary->encode(text)) == text;
    std::printf("installed xgrad: tokenizer %s\n", ok ? "correct" : "WRONG");
    return ok ? 0 : 1;
}
