// The seam between the benchmark's three translation units: xgrad_side.cpp (xgrad, no torch headers),
// torch_side.cpp (LibTorch, no xgrad headers) and main.cpp (the harness: timing, tables, JSON). Data
// crosses it as plain row-major std::vectors so that neither side sees the other's headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bench
{
// One self-attention problem: X (B, T, d), weights (d, d) in the row-vector convention of the chapter
// (Q = X W_Q), and G (B, T, d), the fixed upstream gradient: loss = sum(Y * G). Causal mask.
template <class Scalar>
struct mha_problem
{
    std::size_t B = 0, T = 0, d = 0, H = 0;
    std::vector<Scalar> X, W_Q, W_K, W_V, W_O, G;
};

// One implementation of "forward + backward" for a problem, set up once and stepped many times.
class mha_case
{
public:
    virtual ~mha_case() = default;
    // One full training step's autodiff work: record the forward, loss = sum(Y * G), backward.
    // Gradients are reset at the start of each step (they do not accumulate across steps).
    virtual void step() = 0;
    // An untimed step that also keeps Y and measures the bytes held for backward between forward and
    // backward. xgrad: tape::bytes_saved_for_backward(). LibTorch: bytes its CPU allocator handed out
    // during the forward that are still alive before backward (saved tensors plus Y and the loss).
    virtual std::size_t instrumented_step() = 0;
    // After instrumented_step: Y (B, T, d) and dL/dW_Q (d, d), row-major, in the chapter's convention.
    virtual std::vector<double> output() const = 0;
    virtual std::vector<double> grad_w_q() const = 0;
};

// A chain y = x + c_1 + ... + c_n of tiny tensors, then sum(y) and backward: per-op overhead.
class chain_case
{
public:
    virtual ~chain_case() = default;
    virtual void step() = 0;
    virtual double result() const = 0;  // dL/dx summed, for a sanity check (= number of elements)
};

// ---- xgrad side (xgrad_side.cpp) ----
// fused: attention through the fused op (mha_options::fused) instead of the composed graph. bf16: every
// step runs in a bf16 matmul precision scope (kernels/precision.hpp); float only.
template <class T>
std::unique_ptr<mha_case> make_xgrad_mha(const mha_problem<T>& p, bool fused, bool bf16 = false);
bool xgrad_bf16_supported();  // xgrad::bf16_supported: the CPU has bfloat16 dot products
template <class T>
std::unique_ptr<chain_case> make_xgrad_chain(std::size_t length, std::size_t width);
std::uint64_t mha_multiply_adds(std::size_t B, std::size_t T, std::size_t d);  // eq. (20.5), forward
void xgrad_threads(int n);                                                      // xgrad::set_num_threads
// One C = A B of n x n x n through xgrad::kernels::gemm (the same GEMM door xgrad's matmul uses).
template <class T>
void xgrad_gemm(std::size_t n, const T* a, const T* b, T* c);
std::string openblas_core();
// The GEMM backends this build of xgrad has, and the one its rule uses per shape class
// (kernels::gemm_backends_built, kernels::gemm_rule_in_use).
std::string xgrad_gemm_backends();
std::string xgrad_gemm_rule();

// One product shape of the GEMM backend table, timed through every backend that can run it and through
// xgrad's door (thread CPU time, median of `reps` runs).
struct gemm_shape
{
    std::string label;
    bool ta, tb;
    std::size_t m, n, k;
};
struct gemm_row
{
    gemm_shape shape;
    std::string dtype;
    std::string chosen;     // the backend xgrad::kernels::gemm uses for this product
    double door_gflops = 0;  // through xgrad::kernels::gemm
    double door_bf16_gflops = 0;  // the same at bf16 matmul precision (0: the CPU has no bf16 products)
    std::vector<std::pair<std::string, double>> backends;  // GFLOP/s per backend
};
template <class T>
gemm_row xgrad_gemm_row(const gemm_shape& shape, int reps);


// ---- the machine's FMA peak (fma_peak.cpp, always compiled with -march=native) ----
// GFLOP/s (2 FLOP per FMA) of a loop of independent vector FMAs, summed over `threads` threads.
template <class T>
double fma_peak_gflops(int threads);
std::string fma_isa();  // the vector ISA of that loop, e.g. "avx512bw, 16 floats / 8 doubles per register"

// ---- the fused attention op alone: the sliding-window section (float32) ----
class attention_case
{
public:
    virtual ~attention_case() = default;
    virtual void step() = 0;                           // fresh tape, ops::attention, backward with dO
    virtual std::uint64_t multiply_adds() const = 0;  // the forward's, as the op counts them
};
// q, k, v and dO (B, H, T, dh) seeded; causal attention with the sliding window `window` (0: none).
std::unique_ptr<attention_case> make_xgrad_attention(std::size_t B, std::size_t H, std::size_t T,
                                                     std::size_t dh, std::size_t window);
// ---- the GPT training step: forward, cross-entropy loss, backward, AdamW (float32) ----
struct gpt_spec
{
    std::string name;
    std::size_t V, L, d, H, T, B;
};
struct gpt_tensor
{
    std::string name;  // docs/spec.md's parameter name, e.g. "blocks.0.attn.W_Q"
    std::vector<std::int64_t> shape;
    std::vector<float> values;
};
// One model and one batch, shared by both libraries: the parameters as xgrad initialises them (GPT-2
// init, seeded), random tokens and targets, AdamW's hyperparameters.
struct gpt_problem
{
    gpt_spec spec;
    std::vector<gpt_tensor> params;
    std::vector<std::int64_t> tokens, targets;  // (B, T)
    double lr = 3e-4, weight_decay = 0.1;
};
class gpt_case
{
public:
    virtual ~gpt_case() = default;
    // One training step: gradients reset, forward, loss, backward, AdamW update. Returns the loss.
    virtual double step() = 0;
};
gpt_problem make_gpt_problem(const gpt_spec& spec, unsigned seed);  // xgrad_side.cpp
// bf16: xgrad at bf16 matmul precision; LibTorch's forward under CPU autocast to bfloat16.
std::unique_ptr<gpt_case> make_xgrad_gpt(const gpt_problem& p, bool bf16 = false);  // xgrad_side.cpp
std::unique_ptr<gpt_case> make_torch_gpt(const gpt_problem& p, bool bf16 = false);  // torch_side.cpp
// Forward multiply-adds of the GPT on one batch (models::gpt_forward_multiply_adds().total()).
std::uint64_t gpt_forward_multiply_adds(const gpt_spec& spec);

// ---- decoding: one sequence through a KV cache, one token at a time, float32 (the decode section) ----
struct decode_spec
{
    std::string name;
    std::size_t V, L, d, H, block;
    std::size_t hidden = 0;  // llama2.c's shape: the SwiGLU's width
    bool llama = false;      // rmsnorm, rope, swiglu, no bias (llama2.c); else the default GPT
};
struct decode_weights
{
    decode_spec spec;
    std::vector<gpt_tensor> params;  // docs/spec.md's names, xgrad's (in, out) matrices
};
class decode_case
{
public:
    virtual ~decode_case() = default;
    virtual void clear() = 0;                           // an empty cache
    virtual std::int32_t step(std::int32_t token) = 0;  // runs token, returns the most likely next id
};
decode_weights make_decode_weights(const decode_spec& spec, unsigned seed);  // xgrad_side.cpp
// xgrad: a parameter-only checkpoint (io::save_checkpoint), and a decoder reading it as xgrad-sample does
// (io::checkpoint_reader, each parameter straight into the decoder's buffers).
void xgrad_save_decode(const decode_weights& w, const std::string& path);
std::unique_ptr<decode_case> xgrad_load_decode(const std::string& path);
// LibTorch: the tensors saved with torch::save, loaded with torch::load, and the same loop under
// torch::NoGradGuard (torch_side.cpp).
void torch_save_decode(const decode_weights& w, const std::string& path);
std::unique_ptr<decode_case> torch_load_decode(const decode_spec& spec, const std::string& path);

// ---- LibTorch side (torch_side.cpp) ----
// composed = the chapter's ops with autograd; otherwise torch::nn::MultiheadAttention (bias = false).
// bf16: the forward runs under CPU autocast to bfloat16 (float only).
template <class T>
std::unique_ptr<mha_case> make_torch_mha(const mha_problem<T>& p, bool composed, bool bf16 = false);
template <class T>
std::unique_ptr<chain_case> make_torch_chain(std::size_t length, std::size_t width);
void torch_threads(int n);  // at::set_num_threads
std::string torch_version();
std::string torch_blas_info();

// ---- the shared OpenBLAS (main.cpp) ----
// LibTorch's GEMMs and xgrad's GEMMs land in the same libopenblas.so.0, whose thread count is global.
void blas_threads(int n);
int blas_threads();
}  // namespace bench
