// Sizes a caller asks for directly (the Python module's constructors, the counting functions), checked
// before anything is sized by them: a GPT's parameters are counted by the checkpoint reader's own rule
// (io/checkpoint_limits.hpp, saturating, never wrapped), plain arrays by an overflow-checked product.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "models/gpt.hpp"

namespace xgrad::io
{
// The most bytes one model or array may need: 2^47, the address space of a 64-bit process on x86-64 and
// AArch64. Anything larger cannot be allocated, and its sizes may already wrap in 64 bits.
constexpr std::uint64_t max_size_bytes = std::uint64_t(1) << 47;

// Throws std::invalid_argument starting with `who` when `config`'s parameters need more than
// max_size_bytes at `value_bytes` bytes a value, naming the largest group and its sizes, e.g.
// "GPT: wte (vocab_size x d_model) needs over 18446744073709551615 values (vocab_size = ..., d_model = 4);
// at most 2^47 bytes".
void check_gpt_size(const models::gpt_config& config, std::size_t value_bytes, const std::string& who);

// Throws std::invalid_argument starting with `who` when the product of `sizes` (the dimensions of one
// array, `what` names it) times `value_bytes` exceeds max_size_bytes.
void check_array_size(const std::string& who,
                      const std::string& what,
                      std::initializer_list<std::uint64_t> sizes,
                      std::size_t value_bytes);
} // namespace xgrad::io
