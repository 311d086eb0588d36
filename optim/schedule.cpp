// The learning-rate schedule of docs/spec.md, "Training on text": linear warm-up, cosine decay to a tenth
// (or a given minimum), flat.
#include <algorithm>
#include <cmath>

#include "optim/optim.hpp"

namespace xgrad::optim
{
namespace
{
constexpr double pi = 3.141592653589793238462643383279502884;
}

double lr_schedule::at(std::int64_t step) const
{
    if (step < 0)
    {
        fail("lr_schedule", "steps count from 1 (0 is before the first update), got step " +
                                std::to_string(step));
    }
    if (!(peak_lr >= 0) || warmup < 0 || decay_steps < 0)
    {
        fail("lr_schedule", "needs peak_lr >= 0, warmup >= 0 and decay_steps >= 0, got " +
                                std::to_string(peak_lr) + ", " + std::to_string(warmup) + ", " +
                                std::to_string(decay_steps));
    }
    const double s = static_cast<double>(step), w = static_cast<double>(warmup);
    const double floor_lr = min_lr.value_or(peak_lr / 10);
    if (!(floor_lr >= 0))
    {
        fail("lr_schedule", "needs min_lr >= 0, got " + std::to_string(floor_lr));
    }
    if (step <= warmup && warmup > 0)
    {
        return peak_lr * s / w;  // X s / W
    }
    if (step > decay_steps || decay_steps <= warmup)
    {
        return floor_lr;
    }
    // W < s <= D: progress runs from 1 / (D - W) to 1, the cosine from near X down to F.
    const double progress = (s - w) / static_cast<double>(decay_steps - warmup);
    return floor_lr + 0.5 * (peak_lr - floor_lr) * (1 + std::cos(pi * progress));
}

std::int64_t default_decay_steps(std::int64_t total_steps)
{
    return total_steps;
}

std::int64_t default_warmup(std::int64_t decay_steps)
{
    return std::min<std::int64_t>(100, decay_steps / 10);
}

lr_schedule make_lr_schedule(double peak_lr, std::int64_t total_steps, std::optional<std::int64_t> warmup,
                             std::optional<std::int64_t> decay_steps, std::optional<double> min_lr)
{
    lr_schedule schedule;
    schedule.min_lr = min_lr;
    schedule.peak_lr = peak_lr;
    schedule.decay_steps = decay_steps.value_or(default_decay_steps(total_steps));
    schedule.warmup = warmup.value_or(default_warmup(schedule.decay_steps));
    return schedule;
}
}  // namespace xgrad::optim
