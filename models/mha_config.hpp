// The widths of one multi-head attention layer, apart from the layer itself so that a model's config
// (models/gpt_config.hpp) and the file formats can name them without the tape.
#pragma once

#include <cstddef>

namespace xgrad::models
{
// Widths of one MHA layer. kv_heads = G key/value heads (grouped-query attention); 0 means G = H.
struct mha_config
{
    std::size_t d_model = 0;
    std::size_t heads = 1;
    std::size_t kv_heads = 0;

    std::size_t head_width() const { return d_model / heads; }       // d_h = d / H
    std::size_t kv_head_count() const { return kv_heads ? kv_heads : heads; }
    std::size_t kv_width() const { return kv_head_count() * head_width(); }  // columns of W_K, W_V
    // Throws std::invalid_argument naming `op` if d % H != 0 or H % G != 0 (or any is zero).
    void validate(const char* op) const;
};
}  // namespace xgrad::models
