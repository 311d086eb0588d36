// Hugging Face's GPT-2 layout (docs/spec.md, "Converting checkpoints: xgrad-convert"): a folder with
// model.safetensors (wte.weight, wpe.weight, h.{i}.ln_1.*, h.{i}.attn.c_attn.* with W_Q | W_K | W_V side
// by side, h.{i}.attn.c_proj.*, h.{i}.mlp.c_fc.*, h.{i}.mlp.c_proj.*, ln_f.*; Conv1D weights already
// (in, out)) and config.json. It is the `bias = all` model with `mlp = gelu_tanh` (activation gelu_new) or
// `gelu`; the layout's other variants cannot be expressed.
#pragma once

#include <map>
#include <string>

#include "io/model_layout.hpp"

namespace xgrad::io
{
// The folder's model in xgrad's names and shapes, its metadata: the sizes and variant from config.json and
// the tensors, plus any "xgrad.*" metadata a conversion from xgrad stored (the prefix dropped).
// model.safetensors is read by read_safetensors with accepted_dtypes::any_float, every check included; its
// F16 and BF16 tensors are widened to F32. Throws format_error naming the file and the key or tensor: a
// config.json that does not parse or disagrees with the tensors, a setting GPT-2 has but xgrad does not
// compute, a missing or extra tensor, a damaged safetensors file.
safetensors_file read_hf_gpt2(const std::string& folder, model_layout& layout);

// Writes `model` (xgrad's names, checked against `layout`) as the folder `folder`, atomically
// (staged_folder). Biases the variant lacks are written as zeros (an exact equivalent) and recorded in
// the metadata, so reading the folder back gives the same checkpoint. Throws std::invalid_argument naming
// the metadata key of a variant GPT-2 cannot express (norm, position, mlp, kv_heads). `files` (name ->
// bytes, e.g. the tokenizer's vocab.json and merges.txt) are written into the folder beside the model.
void write_hf_gpt2(const std::string& folder, const safetensors_file& model, const model_layout& layout,
                   const std::map<std::string, std::string>& files = {});
} // namespace xgrad::io
