// Statistics for comparing training runs over seeds: mean, sample standard deviation, Student's t
// distribution (CDF through the regularized incomplete beta function, quantiles by bisection), confidence
// intervals, Welch's unequal-variance t-test and the paired t-test. No dependencies beyond <cmath>.
#pragma once

#include <cstddef>
#include <vector>

namespace xgrad::train::stats
{
double mean(const std::vector<double>& x);

// Sample standard deviation (divisor n - 1); 0 for fewer than two values.
double sample_sd(const std::vector<double>& x);

// I_x(a, b) = B(x; a, b) / B(a, b) for a, b > 0 and x in [0, 1].
double regularized_incomplete_beta(double a, double b, double x);

// P(T <= t) for Student's t with `df` > 0 degrees of freedom (df need not be an integer).
double t_cdf(double t, double df);

// The t with P(T <= t) = p, for p in (0, 1).
double t_quantile(double p, double df);

// mean ± half_width is the two-sided confidence interval at `level` (0.95: 95%).
struct interval
{
    double mean = 0;
    double half_width = 0;  // NaN when it is undefined (fewer than two values)
};

// mean(x) ± t_{(1+level)/2, n-1} sd / sqrt(n).
interval mean_interval(const std::vector<double>& x, double level = 0.95);

struct comparison
{
    double difference = 0;  // mean(a) - mean(b)
    double half_width = 0;  // of its confidence interval
    double t = 0;
    double df = 0;
    double p = 1;           // two-sided
};

// Welch's t-test of mean(a) - mean(b): se^2 = s_a^2/n_a + s_b^2/n_b, Welch-Satterthwaite df.
// Needs at least two values on each side; NaN fields otherwise.
comparison welch(const std::vector<double>& a, const std::vector<double>& b, double level = 0.95);

// The one-sample t-test of the differences a[i] - b[i] (the same seed on both sides).
comparison paired(const std::vector<double>& a, const std::vector<double>& b, double level = 0.95);
}  // namespace xgrad::train::stats
