// Optimisers, gradient clipping and the learning-rate schedule of a training loop, with torch.optim's
// semantics (tests/test_optim.cpp checks them against PyTorch to 1e-12):
//
//   auto params = model.named_parameters();            // handles share storage with the model
//   optim::adam<float> opt(params, optim::adamw_options(/*lr=*/3e-4, /*weight_decay=*/0.1));
//   const optim::lr_schedule schedule = optim::make_lr_schedule(3e-4, /*total_steps=*/N);
//   for (std::int64_t s = 1; s <= N; ++s)
//   {
//       ... record a fresh tape, backward ...
//       const double norm = optim::grad_norm(params);   // = optim::clip_grad_norm(params, 1.0) then
//       opt.set_lr(schedule.at(s));                      //   opt.step(), one pass over the gradients fewer
//       opt.scaled_step(optim::clip_factor(norm, 1.0));
//       opt.zero_grad();
//   }
//
// By default weight decay touches only parameters of rank >= 2 (matrices and embeddings), never biases or
// LayerNorm gains: nanoGPT's two parameter groups, decided per parameter by takes_weight_decay. With
// `decay_every_parameter` (torch.optim's rule: one optimiser per parameter group) it touches them all.
//
// Optimiser state as named tensors (what a checkpoint stores to resume bit for bit):
//   "optim.step"                    shape (): the steps taken (Adam's t; exact in float32 up to 2^24)
//   "optim.momentum.<param name>"   SGD with momentum != 0: the momentum buffer (torch's momentum_buffer)
//   "optim.exp_avg.<param name>"    Adam / AdamW: the first-moment average m
//   "optim.exp_avg_sq.<param name>" Adam / AdamW: the second-moment average v
// Every parameter therefore needs a unique, non-empty name. Hyperparameters are not state: a resumed
// run passes them again (the learning rate of step s comes from the schedule).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/tape.hpp"

namespace xgrad::optim
{
template <class T>
using named_tensors = std::map<std::string, array<T>>;

// The prefix of every optimiser-state tensor name.
inline const std::string state_prefix = "optim.";

// Throws std::invalid_argument naming `op` unless `value` (a learning rate, a decay, an eps) is a finite
// number >= 0: an infinite one would turn every parameter into inf or NaN at the first step.
void check_finite_not_negative(const char* op, const char* what, double value);

// True when weight decay applies to a parameter of this shape: rank >= 2 (weight matrices, embeddings,
// stacked kernels); vectors and scalars (biases, LayerNorm weights and biases) are not decayed.
bool takes_weight_decay(const shape_t& shape);

template <class T>
bool takes_weight_decay(const parameter<T>& p)
{
    return takes_weight_decay(to_shape(p.value().shape()));
}

// Whether an optimiser with these options decays p: every parameter, or only where takes_weight_decay.
template <class T, class Options>
bool decays(const Options& options, const parameter<T>& p)
{
    return options.decay_every_parameter || takes_weight_decay(p);
}

// What every optimiser shares: the parameters (handles sharing storage with the model), the learning
// rate, the step count and the per-parameter state buffers, exported and imported by name.
template <class T>
class optimiser
{
public:
    virtual ~optimiser() = default;
    optimiser(const optimiser&) = delete;
    optimiser& operator=(const optimiser&) = delete;

    // One update of every parameter from its gradient (the step count goes up by one first). Throws
    // std::invalid_argument naming the parameter, before changing anything, when a gradient's or a
    // state buffer's shape differs from its parameter's.
    void step();
    // clip_grad_norm then step() in one pass fewer: every gradient is first multiplied by grad_scale
    // rounded to T, in place (as clipping leaves it), inside the update's own pass where the optimiser
    // can (Adam, AdamW) and in a pass before it otherwise; grad_scale = 1 is step(). With
    // grad_scale = clip_factor(grad_norm(params), max_norm) the result is clip_grad_norm's, bit for bit.
    void scaled_step(double grad_scale);
    void zero_grad();

    double lr() const { return lr_; }
    void set_lr(double lr);  // lr >= 0
    std::int64_t step_count() const { return step_count_; }
    const std::vector<parameter<T>>& parameters() const { return params_; }

    // The state under the names listed at the top of this file (copies).
    named_tensors<T> export_state() const;
    // Restores a state exported by an optimiser of the same kind over parameters of the same names and
    // shapes. `tensors` may hold other tensors too (a whole checkpoint): names without the "optim."
    // prefix are ignored. Throws std::invalid_argument, changing nothing, for a missing state tensor, one
    // of the wrong shape, an unknown "optim." name or a step count that is not a whole number >= 0.
    void import_state(const named_tensors<T>& tensors);

protected:
    // Throws std::invalid_argument naming `op` for no parameters, an empty or repeated name, lr < 0.
    optimiser(const char* op, std::vector<parameter<T>> params, double lr);

    // Registers one state tensor per parameter, zeros of its shape, exported as "optim.<kind>.<name>".
    void add_state(const std::string& kind);
    std::vector<array<T>>& state(const std::string& kind) { return state_.at(kind); }

    // The update proper; `step` counts from 1 and the gradients' shapes are already checked. When
    // scales_in_update() and grad_scale_ != 1, it multiplies each gradient by grad_scale_ (in place) as it
    // reads it.
    virtual void update(std::int64_t step) = 0;
    virtual bool scales_in_update() const { return false; }
    T grad_scale_ = 1;

    const char* op_;
    std::vector<parameter<T>> params_;

private:
    double lr_;
    std::int64_t step_count_ = 0;
    std::map<std::string, std::vector<array<T>>> state_;  // kind -> one tensor per parameter
};

// torch.optim.SGD (dampening 0), with weight decay where decays() says:
//   d = g + weight_decay p                 (L2, added to the gradient)
//   buf = momentum buf + d                 (buf starts at 0, so the first step sets buf = d)
//   d = nesterov ? d + momentum buf : buf  (when momentum != 0)
//   p = p - lr d
struct sgd_options
{
    double lr = 1e-3;
    double momentum = 0;
    bool nesterov = false;  // needs momentum > 0
    double weight_decay = 0;
    bool decay_every_parameter = false;  // false: only where takes_weight_decay
};

template <class T>
class sgd final : public optimiser<T>
{
public:
    // Throws std::invalid_argument for a negative or NaN hyperparameter, or nesterov without momentum.
    sgd(std::vector<parameter<T>> params, const sgd_options& options);
    const sgd_options& options() const { return options_; }

private:
    void update(std::int64_t step) override;
    sgd_options options_;
};

// torch.optim.Adam and torch.optim.AdamW, with weight decay where decays() says. At step t:
//   p = p (1 - lr weight_decay)            decoupled (AdamW), before the update; or else
//   g = g + weight_decay p                 L2 (Adam), added to the gradient
//   m = beta1 m + (1 - beta1) g
//   v = beta2 v + (1 - beta2) g^2
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
struct adam_options
{
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0;
    bool decoupled_weight_decay = false;  // true: AdamW
    bool decay_every_parameter = false;   // false: only where takes_weight_decay
};

// AdamW as torch.optim.AdamW (its default weight decay is 0.01; betas and eps as Adam's).
adam_options adamw_options(double lr = 1e-3, double weight_decay = 1e-2, double beta1 = 0.9,
                           double beta2 = 0.999, double eps = 1e-8);

template <class T>
class adam final : public optimiser<T>
{
public:
    // Throws std::invalid_argument naming "adam" or "adamw" (decoupled_weight_decay) for lr, eps or
    // weight_decay < 0, or a beta outside [0, 1).
    adam(std::vector<parameter<T>> params, const adam_options& options);
    const adam_options& options() const { return options_; }

private:
    void update(std::int64_t step) override;
    bool scales_in_update() const override { return true; }
    adam_options options_;
};

// torch.nn.utils.clip_grad_norm_: the 2-norm of all gradients together (as one vector), returned as it
// was before clipping; when max_norm / (norm + 1e-6) < 1 every gradient is multiplied by it. A zero
// gradient is left alone (and gives 0); a NaN norm is returned and the gradients are left as they are;
// no parameters give 0. `params` are handles, so the model's gradients change. Throws
// std::invalid_argument for max_norm <= 0 or NaN.
template <class T>
double clip_grad_norm(std::vector<parameter<T>> params, double max_norm);

// clip_grad_norm in two halves, for optimiser::scaled_step(grad_scale): the global 2-norm (gradients
// unchanged), and the factor clipping multiplies by, max_norm / (norm + 1e-6) when that is < 1, else 1
// (NaN too).
template <class T>
double grad_norm(const std::vector<parameter<T>>& params);
double clip_factor(double norm, double max_norm);

// The learning rate at step s of docs/spec.md, "Training on text", with X = peak_lr, W = warmup,
// D = decay_steps and F = min_lr (X/10 unless given):
//   X s / W                                            while s <= W  (W = 0: no warm-up)
//   F + (X - F) (1 + cos(pi (s - W) / (D - W))) / 2     for W < s <= D  (cosine from X to F at D)
//   F                                                  for s > D and s > W
// (so W >= D gives the warm-up, then F at once). Steps count from 1: step s is the s-th update, Adam's t.
// Step 0, the learning rate before any update, is the same formula at s = 0: 0 with a warm-up, X without
// (F when D = 0).
struct lr_schedule
{
    double peak_lr = 0;            // X
    std::int64_t warmup = 0;       // W
    std::int64_t decay_steps = 0;  // D
    std::optional<double> min_lr{};  // F; X/10 when not given

    // Throws std::invalid_argument for s < 0, X < 0 or NaN, W < 0, D < 0, F < 0 or NaN.
    double at(std::int64_t step) const;
};

// docs/spec.md's defaults: D = N (the run's total steps), W = min(100, D / 10) in integer division.
std::int64_t default_decay_steps(std::int64_t total_steps);
std::int64_t default_warmup(std::int64_t decay_steps);

// The schedule of a run of `total_steps` steps, with docs/spec.md's defaults for what is not given (D first,
// then W from D).
lr_schedule make_lr_schedule(double peak_lr, std::int64_t total_steps,
                             std::optional<std::int64_t> warmup = {},
                             std::optional<std::int64_t> decay_steps = {},
                             std::optional<double> min_lr = {});

extern template class optimiser<float>;
extern template class optimiser<double>;
extern template class sgd<float>;
extern template class sgd<double>;
extern template class adam<float>;
extern template class adam<double>;
}  // namespace xgrad::optim
