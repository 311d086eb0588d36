// Attention masks (docs/spec.md): boolean, true = this query may attend to this key, broadcast
// over (B, H, Tq, Tk). Causal is bottom-right aligned: query i sees key j iff j <= i + (Tk - Tq); a
// sliding window w > 0 also needs j > i + (Tk - Tq) - w (kernels::visible_keys, the fused kernel's band).
#pragma once

#include <optional>

#include "ops/ops.hpp"

namespace xgrad::models
{
// The (Tq, Tk) causal mask, bottom-right aligned; with window > 0 only the last `window` keys of each
// query's causal prefix (0 = no window).
mask_t causal_mask(std::size_t tq, std::size_t tk, std::size_t window = 0);

// A (B, 1, 1, Tk) padding mask from per-sequence lengths: key j of sequence b is kept iff j < lengths[b].
mask_t padding_mask(const std::vector<std::size_t>& lengths, std::size_t tk);

// What MHA applies to its scores of shape (B, H, Tq, Tk): the user's mask (if any) AND the causal mask
// (if asked). Returns nothing when neither is given. Throws std::invalid_argument naming `op` when the
// user's mask does not broadcast to (B, H, Tq, Tk).
// Throws std::invalid_argument naming `op` when `user_mask` (if any) does not broadcast to (B, H, Tq, Tk).
void check_mask(const char* op, const mask_t* user_mask, std::size_t batch, std::size_t heads, std::size_t tq,
                std::size_t tk);

std::optional<mask_t> combined_mask(const char* op, const mask_t* user_mask, bool causal, std::size_t batch,
                                    std::size_t heads, std::size_t tq, std::size_t tk);
}  // namespace xgrad::models
