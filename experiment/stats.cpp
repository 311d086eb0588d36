#include "experiment/stats.hpp"

#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace xgrad::train::stats
{
namespace
{
const double nan = std::numeric_limits<double>::quiet_NaN();

// The continued fraction of I_x(a, b) (modified Lentz): converges fast for x < (a + 1) / (a + b + 2).
double beta_continued_fraction(double a, double b, double x)
{
    const double tiny = 1e-300;
    double c = 1, d = 1 - (a + b) * x / (a + 1);
    d = 1 / (std::fabs(d) < tiny ? tiny : d);
    double f = d;
    for (int m = 1; m <= 500; ++m)
    {
        // Two steps per m: the even term m(b-m)x / ((a+2m-1)(a+2m)), then the odd one.
        for (const double term : {m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                                  -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))})
        {
            d = 1 + term * d;
            d = 1 / (std::fabs(d) < tiny ? tiny : d);
            c = 1 + term / c;
            c = std::fabs(c) < tiny ? tiny : c;
            f *= c * d;
        }
        if (std::fabs(c * d - 1) < 1e-15)
        {
            break;
        }
    }
    return f;
}
}  // namespace

double mean(const std::vector<double>& x)
{
    return x.empty() ? nan : std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
}

double sample_sd(const std::vector<double>& x)
{
    if (x.size() < 2)
    {
        return 0;
    }
    const double m = mean(x);
    double squares = 0;
    for (double v : x)
    {
        squares += (v - m) * (v - m);
    }
    return std::sqrt(squares / static_cast<double>(x.size() - 1));
}

double regularized_incomplete_beta(double a, double b, double x)
{
    if (!(a > 0) || !(b > 0) || !(x >= 0 && x <= 1))
    {
        throw std::invalid_argument("regularized_incomplete_beta: needs a, b > 0 and x in [0, 1], got a = " +
                                    std::to_string(a) + ", b = " + std::to_string(b) + ", x = " + std::to_string(x));
    }
    if (x == 0 || x == 1)
    {
        return x;
    }
    // x^a (1-x)^b / (a B(a, b)) times the continued fraction; the symmetry I_x(a,b) = 1 - I_{1-x}(b,a)
    // keeps the fraction in its fast range.
    const double log_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
    if (x < (a + 1) / (a + b + 2))
    {
        return std::exp(log_front) * beta_continued_fraction(a, b, x) / a;
    }
    return 1 - std::exp(log_front) * beta_continued_fraction(b, a, 1 - x) / b;
}

double t_cdf(double t, double df)
{
    if (!(df > 0))
    {
        throw std::invalid_argument("t_cdf: degrees of freedom must be positive, got " + std::to_string(df));
    }
    if (std::isnan(t))
    {
        return nan;
    }
    if (std::isinf(t))
    {
        return t > 0 ? 1 : 0;
    }
    // P(|T| > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2).
    const double tail = 0.5 * regularized_incomplete_beta(df / 2, 0.5, df / (df + t * t));
    return t > 0 ? 1 - tail : tail;
}

double t_quantile(double p, double df)
{
    if (!(p > 0 && p < 1))
    {
        throw std::invalid_argument("t_quantile: p must be in (0, 1), got " + std::to_string(p));
    }
    if (p < 0.5)
    {
        return -t_quantile(1 - p, df);
    }
    double lo = 0, hi = 1;
    while (t_cdf(hi, df) < p)
    {
        lo = hi;
        hi *= 2;
    }
    for (int i = 0; i < 200 && hi - lo > 1e-13 * hi; ++i)
    {
        const double mid = 0.5 * (lo + hi);
        (t_cdf(mid, df) < p ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
}

interval mean_interval(const std::vector<double>& x, double level)
{
    interval r;
    r.mean = mean(x);
    const std::size_t n = x.size();
    r.half_width = n < 2 ? nan
                         : t_quantile((1 + level) / 2, static_cast<double>(n - 1)) * sample_sd(x) /
                               std::sqrt(static_cast<double>(n));
    return r;
}

namespace
{
// The test of `difference` with standard error `se` on `df` degrees of freedom.
comparison t_test(double difference, double se, double df, double level)
{
    comparison c;
    c.difference = difference;
    c.df = df;
    if (!(df > 0))
    {
        c.half_width = c.t = c.p = nan;
        return c;
    }
    c.half_width = t_quantile((1 + level) / 2, df) * se;
    if (se == 0)
    {
        c.t = difference == 0 ? 0 : std::copysign(std::numeric_limits<double>::infinity(), difference);
        c.p = difference == 0 ? 1 : 0;
        return c;
    }
    c.t = difference / se;
    c.p = 2 * t_cdf(-std::fabs(c.t), df);
    return c;
}
}  // namespace

comparison welch(const std::vector<double>& a, const std::vector<double>& b, double level)
{
    if (a.size() < 2 || b.size() < 2)
    {
        return t_test(mean(a) - mean(b), nan, nan, level);
    }
    const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
    const double va = sample_sd(a) * sample_sd(a) / na, vb = sample_sd(b) * sample_sd(b) / nb;
    const double se = std::sqrt(va + vb);
    // Welch-Satterthwaite: (va + vb)^2 / (va^2 / (na - 1) + vb^2 / (nb - 1)); equal samples give na + nb - 2.
    const double denominator = va * va / (na - 1) + vb * vb / (nb - 1);
    const double df = denominator > 0 ? (va + vb) * (va + vb) / denominator : na + nb - 2;
    return t_test(mean(a) - mean(b), se, df, level);
}

comparison paired(const std::vector<double>& a, const std::vector<double>& b, double level)
{
    if (a.size() != b.size())
    {
        throw std::invalid_argument("paired: the samples differ in size (" + std::to_string(a.size()) + " and " +
                                    std::to_string(b.size()) + ")");
    }
    std::vector<double> d(a.size());
    for (std::size_t i = 0; i < a.size(); ++i)
    {
        d[i] = a[i] - b[i];
    }
    const double n = static_cast<double>(d.size());
    return t_test(mean(d), d.size() < 2 ? nan : sample_sd(d) / std::sqrt(n), n - 1, level);
}
}  // namespace xgrad::train::stats
