// GPT checkpoints (../shared/SPEC.md, "Checkpoint file: safetensors"): every parameter under its SPEC
// name in the dtype of T, the model's sizes as decimal metadata ("vocab_size", "block_size", "layers",
// "d_model", "heads", "kv_heads"), any other metadata ("vocab", "step", ...) and the optimiser's state as
// tensors named "optim.*". Loading checks the file against the sizes it declares.
#pragma once

#include <map>
#include <string>

#include "io/safetensors.hpp"
#include "models/gpt.hpp"

namespace xgrad::io
{
// What a checkpoint holds besides the parameters.
struct checkpoint_extras
{
    std::map<std::string, std::string> metadata;   // every key but the six sizes
    std::map<std::string, stored_tensor> tensors;  // optimiser state: every name begins with "optim."
};

template <class T>
struct checkpoint
{
    models::gpt_parameters<T> params;                // converted to T, gradients zero
    std::map<std::string, std::string> metadata;     // all of it, the six sizes included
    std::map<std::string, stored_tensor> optimiser;  // the "optim.*" tensors as stored
};

// The metadata keys that hold the model's sizes, in SPEC's order.
extern const char* const size_keys[6];

// Writes `params` (F32 for float, F64 for double) with its sizes and `extras`, atomically (see
// write_safetensors). Throws std::invalid_argument naming "save_checkpoint" when an extra tensor's name
// does not begin with "optim." or an extra metadata key names a size with another value, and
// std::runtime_error naming the path when it cannot write.
template <class T>
void save_checkpoint(const std::string& path, const models::gpt_parameters<T>& params,
                     const checkpoint_extras& extras = {});

// Reads a checkpoint strictly: every size key present and a decimal integer, sizes that make a valid
// model (gpt_config::validate), every parameter present with exactly SPEC's shape, no other tensor
// except "optim.*" ones (returned as stored). F32 and F64 are both converted to T. Throws format_error
// naming the file, the tensor and the shapes.
template <class T>
checkpoint<T> load_checkpoint(const std::string& path);

// The sizes a checkpoint's metadata declares, checked as load_checkpoint checks them.
models::gpt_config config_from_metadata(const std::string& path,
                                        const std::map<std::string, std::string>& metadata);
}  // namespace xgrad::io
