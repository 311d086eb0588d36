// Deliberate mistakes in the hand-derived backward, for teaching the first-divergence report
// (models/divergence.hpp, examples/gpt_gradcheck.cpp --break RULE). Each is a bug someone could really
// write, as a function of the same signature as the correct rule it replaces; the reference backward
// (models/gpt_manual.hpp, models/manual_layers.hpp) holds no trace of them: gpt_backward takes a fault
// hook that swaps one rule in its table for one of these, in one place only.
#pragma once

#include "models/manual_layers.hpp"

namespace xgrad::models::manual::faults
{
// rmsnorm_backward treating 1 / rms as a constant: d x = rrms d x_hat (the - x_hat mean(d x_hat x_hat)
// term forgotten).
template <class T>
rmsnorm_gradients<T> rmsnorm_constant_scale(const array<T>& d_y, const rmsnorm_cache<T>& cache,
                                            const array<T>& weight);

// rope_backward rotating by +a, the forward's angle, where the transpose R(-a) belongs.
template <class T>
array<T> rope_same_angle(const array<T>& d_y, double base, std::size_t offset);

// gelu_exact_backward with d x = d y Phi(x): the x phi(x) term of the product rule forgotten.
template <class T>
array<T> gelu_exact_cdf_only(const array<T>& d_y, const array<T>& x);

// swiglu_backward with silu'(a) taken as sigmoid(a): d gate = d y up s.
template <class T>
swiglu_gradients<T> swiglu_sigmoid_slope(const array<T>& d_y, const array<T>& gate, const array<T>& up);

// bias_backward summing the rows of the first sequence only (a loop bound of T where B T belongs).
template <class T>
array<T> bias_first_sequence(const array<T>& d_out);
}  // namespace xgrad::models::manual::faults
