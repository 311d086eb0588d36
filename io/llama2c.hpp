// llama2.c's legacy model.bin (docs/spec.md, "Converting checkpoints: xgrad-convert"): version 0, as
// llama2.c's export.py legacy_export writes it and run.c reads it. The tokenizer files beside it in a
// llama2.c folder, and the folder as a whole, are train/llama2c_tokenizer.hpp's (they need the tokenizers).
//
// model.bin: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len; vocab_size
// negative when the classifier is not the embedding), then float32 arrays in this order, each weight of
// PyTorch's nn.Linear (out, in), i.e. xgrad's matrix transposed: tok_embeddings (V, d) = wte; per layer
// (all layers of one kind, then the next kind) attention_norm = ln_1.weight, wq = W_Q^T, wk = W_K^T,
// wv = W_V^T, wo = W_O^T, ffn_norm = ln_2.weight, w1 = W_gate^T, w2 = W_down^T, w3 = W_up^T; the final
// norm = ln_f.weight; freqs_cos and freqs_sin (max_seq_len, head_dim / 2), which run.c skips; and the
// classifier (V, d) = lm_head^T when not shared.
#pragma once

#include <string>

#include "io/model_layout.hpp"

namespace xgrad::io
{
// Reads model.bin at `path`: the weights under xgrad's names, the layout's sizes and variants in the
// metadata (no vocabulary). Throws format_error naming the file and the field: a header that is
// truncated, names version 1 or later, or holds sizes that do not make a model; a file whose length is
// not what its header implies. Reads no more than the file holds.
safetensors_file read_llama2c_model(const std::string& path);

// model.bin's bytes for `model`. Throws std::invalid_argument naming the metadata key of a variant
// llama2.c cannot express (it is norm rmsnorm, position rope with base 10000, mlp swiglu, bias none).
std::string llama2c_model_bytes(const safetensors_file& model, const model_layout& layout);
} // namespace xgrad::io
