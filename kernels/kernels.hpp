// Plain-array kernels shared by the ops' forward/backward rules and the hand-derived MHA
// (models/mha_manual). No tape here: arrays in, arrays out.
#pragma once

#include "autodiff/xtensor.hpp"

namespace xgrad
{
namespace kernels
{
// out = x with its axes reordered: out.shape[i] = x.shape[axes[i]] (a contiguous copy).
template <class T>
array<T> permute(const array<T>& x, const std::vector<std::size_t>& axes);

// out = a^T for a (rows, columns) row-major, into out (columns, rows): OpenBLAS's transposing copy
// (omatcopy, kernels/gemm_openblas.cpp), which every build links. Throws std::invalid_argument naming
// "transpose" when a side is 2^31 or more (OpenBLAS counts in int).
void transpose(const float* a, std::size_t rows, std::size_t columns, float* out);
void transpose(const double* a, std::size_t rows, std::size_t columns, double* out);

// C = op(A) op(B) over the last two axes, batch axes broadcast (op = transpose when the flag is set).
// When C's batch shape is smaller than the broadcast batch, products are summed into it.
// Requires: rank >= 2, inner dimensions agree (checked by the caller, which knows the op's name).
template <class T>
void matmul_into(const array<T>& a, bool transpose_a, const array<T>& b, bool transpose_b, array<T>& c);

// The multiply-adds matmul_into(a, ..., c) performs for this batch shape: batch * M * N * K.
std::uint64_t matmul_multiply_adds(const shape_t& batch, std::size_t m, std::size_t n, std::size_t k);

// y = softmax(scale * x) over the last axis among entries where mask (broadcast to x) is true;
// rows with no true entry give 0. An empty `mask` pointer means "keep everything".
template <class T>
array<T> masked_softmax_forward(const array<T>& x, const mask_t* mask, T scale);

// dx = scale * y * (g - sum_j g_j y_j), row by row over the last axis.
template <class T>
array<T> masked_softmax_backward(const array<T>& y, const array<T>& g, T scale);
}  // namespace kernels
}  // namespace xgrad
