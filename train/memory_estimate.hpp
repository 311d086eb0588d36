// What a run will hold in memory, estimated before it allocates, and the memory the machine can give it.
// xgrad-train refuses a run whose estimate exceeds what is available (--max-memory overrides), and
// xgrad-gpt-npy and xgrad-mha-npy refuse inputs whose computation would: a small file must never make a
// tool allocate until the machine runs out. The estimates are upper bounds fitted to measured resident
// memory (tests/test_memory_estimate.cpp checks them against a real run, within a stated factor).
#pragma once

#include <cstdint>
#include <string>

#include "models/gpt.hpp"

namespace xgrad::train
{
// Bytes, by what holds them. Every sum saturates at UINT64_MAX instead of wrapping.
struct memory_estimate
{
    std::uint64_t parameters = 0;   // the weights
    std::uint64_t gradients = 0;    // one gradient per weight
    std::uint64_t optimiser = 0;    // Adam's two moments
    std::uint64_t weight_work = 0;  // copies of the weights on the tape and in the matrix products
    std::uint64_t activations = 0;  // what the forward keeps for the backward, and the backward's own
    std::uint64_t workspace = 0;    // the process itself and each thread's buffers

    std::uint64_t total() const;
    // "1.2 GiB (parameters 10 MiB, gradients 10 MiB, ...; B = 16 windows of T = 64)".
    std::string describe() const;
    std::string shape;  // the batch the activations are for, in words
};

// A byte count in the largest binary unit that keeps it at 1 or more: "812 bytes", "9.4 KiB", "1.2 GiB"
// ("more than 16 EiB" when the count saturated).
std::string bytes_text(std::uint64_t bytes);

// The sizes an estimate needs, from a model configuration: V, block_size, L, d, H, G, the MLP's width and
// the parameter count, counted from the model's own declarations (saturating).
struct gpt_sizes
{
    std::uint64_t vocab = 0, block = 0, layers = 0, d_model = 0, heads = 1, kv_heads = 1, mlp_hidden = 0;
    std::uint64_t parameters = 0;  // every parameter the variant declares (models::gpt_values)
    // Values per token a variant keeps beyond the default model's, with their gradients: in each layer
    // (QK-norm's normalised Q and K), and after the head (the soft cap's uncapped logits).
    std::uint64_t layer_extra = 0, head_extra = 0;
};
gpt_sizes sizes_of(const models::gpt_config& c);

// A training step of xgrad-train in float32: weights, gradients, Adam's moments, the tape of B windows of
// T tokens, and `threads` threads.
memory_estimate estimate_training(const gpt_sizes& s, std::uint64_t batch, std::uint64_t threads);

// One forward pass of xgrad-gpt-npy on B x T tokens in values of `value_bytes` bytes, and its backward
// when `backward` (targets given).
memory_estimate estimate_gpt_run(const gpt_sizes& s,
                                 std::uint64_t batch,
                                 std::uint64_t tokens,
                                 std::uint64_t value_bytes,
                                 bool backward);

// Multi-head attention forward and backward of xgrad-mha-npy: B, Tq, Tk, d, H heads.
memory_estimate estimate_attention_run(std::uint64_t batch,
                                       std::uint64_t tq,
                                       std::uint64_t tk,
                                       std::uint64_t d,
                                       std::uint64_t heads,
                                       std::uint64_t value_bytes);

// How many bytes a run may use, and where the number comes from.
struct memory_budget
{
    std::uint64_t bytes = 0;
    std::string source;  // e.g. "MemAvailable in /proc/meminfo", "--max-memory"
};

// MemAvailable from /proc/meminfo, or the cgroup's limit less its usage when that is lower. The
// environment variable XGRAD_MAX_MEMORY (bytes, or with a K, M, G or T suffix of 1024 powers) overrides
// both; it is how the tools without a --max-memory flag are given a budget.
memory_budget available_memory();

// "auto" (available_memory()) or a number of bytes with an optional K, M, G or T suffix (powers of 1024),
// as --max-memory takes it; `source` names the flag. Throws std::invalid_argument naming the flag.
memory_budget parse_memory_budget(const std::string& text, const std::string& source);

// Empty when the estimate fits the budget, else the refusal: "<what> needs about 9.1 GiB (...), more
// than the 3.2 GiB available (MemAvailable in /proc/meminfo); <remedy>".
std::string memory_shortfall(const memory_estimate& need,
                             const memory_budget& budget,
                             const std::string& what,
                             const std::string& remedy);

// Throws std::invalid_argument with memory_shortfall's line when the estimate exceeds the budget.
void require_memory(const memory_estimate& need,
                    const memory_budget& budget,
                    const std::string& what,
                    const std::string& remedy);
}  // namespace xgrad::train
