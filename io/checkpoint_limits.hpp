// What a checkpoint's metadata claims, checked against what the file holds before anything is sized by
// it. The sizes and the variant keys (docs/spec.md, "Architecture variants") imply a number of tensors and
// of parameter values; a file that holds fewer is refused at once, so that a 4 KB file whose metadata says
// `"layers": "4000000000"` cannot make the loader build a table of 48 billion names or allocate a model.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "io/safetensors.hpp"

namespace xgrad::io
{
// What the metadata asks for, every count saturated at UINT64_MAX (never wrapped), counted from the
// model's own declarations (models/gpt.hpp). An unknown variant value counts as the default; the loader
// names the bad value afterwards.
struct checkpoint_demand
{
    std::uint64_t tensors = 0;   // parameter tensors
    std::uint64_t values = 0;    // parameter values in all
    std::uint64_t largest = 0;   // values of the largest group below
    std::string largest_group;   // e.g. "wte (V, d)"
    std::string largest_fields;  // the metadata's sizes and variant, e.g. "vocab_size = 4000000000, ..."
};

// The demand of the metadata's sizes, or false when a size key is missing or not a decimal integer (the
// loader reports that itself).
bool checkpoint_demand_of(const std::map<std::string, std::string>& metadata, checkpoint_demand& out);

// Throws format_error naming the file and the metadata field when the metadata asks for far more tensors
// or values than the file's parameter tensors (all but "optim.*") hold (more than twice as many, plus 64),
// e.g. "metadata says layers = 4000000000, which needs 48000000004 tensors; the file holds 16". Smaller
// gaps are left to the loader, which names the missing tensor. Call it on the parsed file before sizing
// anything by the metadata.
void check_checkpoint_limits(const std::string& path, const safetensors_file& file);
// The same on a file's checked header, before any of its tensors is read.
void check_checkpoint_limits(const safetensors_reader& file);
}  // namespace xgrad::io
