// llama2.c's files (docs/spec.md, "Converting checkpoints: xgrad-convert"): a folder with the legacy
// model.bin (version 0, as llama2.c's export.py legacy_export writes it and run.c reads it) and
// tokenizer.bin (run.c's format), plus tokenizer.model when the vocabulary is a SentencePiece model.
//
// model.bin: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len; vocab_size
// negative when the classifier is not the embedding), then float32 arrays in this order, each weight of
// PyTorch's nn.Linear (out, in), i.e. xgrad's matrix transposed: tok_embeddings (V, d) = wte; per layer
// (all layers of one kind, then the next kind) attention_norm = ln_1.weight, wq = W_Q^T, wk = W_K^T,
// wv = W_V^T, wo = W_O^T, ffn_norm = ln_2.weight, w1 = W_gate^T, w2 = W_down^T, w3 = W_up^T; the final
// norm = ln_f.weight; freqs_cos and freqs_sin (max_seq_len, head_dim / 2), which run.c skips; and the
// classifier (V, d) = lm_head^T when not shared.
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

namespace xgrad::io
{
struct llama2c_model
{
    safetensors_file model; // xgrad's names and metadata
    std::string note;       // non-empty when the vocabulary could not be carried over
};

// Reads the folder. Throws format_error naming the file and the field: a header that is truncated,
// names version 1 or later, or holds sizes that do not make a model; a model.bin whose length is not
// what its header implies; a tokenizer.bin that is truncated, holds another number of tokens than the
// header's vocab_size, or a tokenizer.model that does not parse or disagrees with it. Reads no more
// than each file holds.
llama2c_model read_llama2c(const std::string& folder);

// Writes `model` as a llama2.c folder, atomically (staged_folder). Throws std::invalid_argument naming
// the metadata key of a variant llama2.c cannot express (it is norm rmsnorm, position rope with base
// 10000, mlp swiglu, bias none), or when the checkpoint has no vocabulary of its own size.
void write_llama2c(const std::string& folder, const safetensors_file& model, const model_layout& layout);
} // namespace xgrad::io
