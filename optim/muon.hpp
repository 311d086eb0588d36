// Muon: momentum orthogonalised by Newton–Schulz (docs/training.md, "Muon"), for weight matrices. For a
// matrix W of shape (fan_in, fan_out) with gradient g, momentum mu and learning rate lr:
//
//   m = mu m + g;  u = g + mu m                                   (Nesterov; m starts at 0)
//   X = u / (||u||_F + 1e-7);  if rows(X) > cols(X): X = X^T
//   repeat 5 times:  A = X X^T;  B = b A + c A A;  X = a X + B X  (a, b, c) = (3.4445, -4.7750, 2.0315)
//   transpose X back if it was transposed;  W = W - lr sqrt(max(1, fan_out / fan_in)) X
//
// Newton–Schulz pushes every singular value of X towards 1 (into [0.6, 1.2024] after five steps, for a
// singular value above about 1e-3 of the Frobenius norm; a zero one stays zero):
// the update keeps the gradient's row and column spaces and forgets its scale. The products run through
// the project's GEMM (kernels/gemm.hpp), in T.
//
// State: "optim.step" and "optim.momentum.<param name>" (m), as SGD's momentum buffer (optim/optim.hpp).
//
// Training a GPT with Muon takes the matrices inside the blocks; everything else (embeddings, the head,
// norms, biases) stays with AdamW. muon_with_adamw<T> is that pair, one optimiser to the training loop.
#pragma once

#include <functional>
#include <memory>

#include "optim/optim.hpp"

namespace xgrad::optim
{
struct muon_options
{
    double lr = 0.02;
    double momentum = 0.95;
};

// The quintic Newton–Schulz iteration's coefficients and step count.
inline constexpr double newton_schulz_a = 3.4445;
inline constexpr double newton_schulz_b = -4.7750;
inline constexpr double newton_schulz_c = 2.0315;
inline constexpr int newton_schulz_steps = 5;
inline constexpr double newton_schulz_eps = 1e-7;

// X = u / (||u||_F + 1e-7), then the five Newton–Schulz steps above, on the short side (a tall u is
// transposed and the result transposed back). `u` is a matrix; throws std::invalid_argument otherwise.
template <class T>
array<T> newton_schulz(const array<T>& u);

// sqrt(max(1, fan_out / fan_in)) for a matrix of shape (fan_in, fan_out).
double muon_scale(const shape_t& shape);

template <class T>
class muon final : public optimiser<T>
{
public:
    // Throws std::invalid_argument naming the parameter when one is not a matrix (2-D), and for lr < 0 or a
    // momentum outside [0, 1).
    muon(std::vector<parameter<T>> params, const muon_options& options);
    const muon_options& options() const { return options_; }

private:
    void update(std::int64_t step) override;
    muon_options options_;
};

// Muon on the parameters `takes_muon` says yes to, AdamW on the rest: both step, share the step count and
// export their states together (Muon's "optim.momentum.*" beside AdamW's "optim.exp_avg*.*"). With no
// parameter for Muon it is AdamW alone, with AdamW's state names only.
template <class T>
class muon_with_adamw
{
public:
    using choice = std::function<bool(const parameter<T>&)>;
    // Throws std::invalid_argument as muon and adam do (a parameter chosen for Muon that is not a matrix).
    muon_with_adamw(const std::vector<parameter<T>>& params, const choice& takes_muon,
                    const adam_options& adamw, const muon_options& muon);

    // The learning rates of this step: AdamW's and Muon's (each its own peak times the schedule's factor).
    void set_lr(double adamw_lr, double muon_lr);
    void scaled_step(double grad_scale);  // as optimiser::scaled_step, on both
    void zero_grad();
    std::int64_t step_count() const;
    bool has_muon() const { return muon_ != nullptr; }

    named_tensors<T> export_state() const;
    // As optimiser::import_state: every expected tensor present with its shape, no unknown "optim." name;
    // throws std::invalid_argument and changes nothing otherwise.
    void import_state(const named_tensors<T>& tensors);

private:
    std::unique_ptr<adam<T>> adamw_;
    std::unique_ptr<muon<T>> muon_;  // null when no parameter is Muon's
};

extern template class muon<float>;
extern template class muon<double>;
extern template class muon_with_adamw<float>;
extern template class muon_with_adamw<double>;
extern template array<float> newton_schulz(const array<float>&);
extern template array<double> newton_schulz(const array<double>&);
}  // namespace xgrad::optim
