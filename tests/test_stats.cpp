// The statistics behind xgrad-experiment's report (experiment/stats.hpp) against values computed by hand:
// closed forms of the t distribution (df = 1: Cauchy, df = 2), published t quantiles, Welch's test on
// worked examples, and the t CDF for fractional df against a numerical integral of the density.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#include "experiment/stats.hpp"

namespace test_stats
{
using namespace xgrad::train::stats;

namespace
{
const double pi = 3.14159265358979323846;

// P(T <= t) by Simpson's rule on the t density over [0, |t|], plus 1/2: independent of the beta function.
double t_cdf_by_integration(double t, double df)
{
    const double c = std::exp(std::lgamma((df + 1) / 2) - std::lgamma(df / 2)) / std::sqrt(df * pi);
    auto density = [&](double x) { return c * std::pow(1 + x * x / df, -(df + 1) / 2); };
    const int n = 20000;
    const double h = std::fabs(t) / n;
    double sum = density(0) + density(std::fabs(t));
    for (int i = 1; i < n; ++i)
    {
        sum += (i % 2 ? 4 : 2) * density(i * h);
    }
    const double half = sum * h / 3;
    return t >= 0 ? 0.5 + half : 0.5 - half;
}
}  // namespace

TEST_CASE("mean and sample standard deviation (n - 1)")
{
    CHECK(mean({2, 4, 4, 4, 5, 5, 7, 9}) == doctest::Approx(5));
    // squares about the mean: 9+1+1+1+0+0+4+16 = 32; 32 / 7
    CHECK(sample_sd({2, 4, 4, 4, 5, 5, 7, 9}) == doctest::Approx(std::sqrt(32.0 / 7)).epsilon(1e-14));
    CHECK(sample_sd({3}) == 0);
    CHECK(std::isnan(mean({})));
}

TEST_CASE("the regularized incomplete beta function at closed forms")
{
    // I_x(1, 1) = x; I_x(a, 1) = x^a; I_x(1, b) = 1 - (1 - x)^b; I_x(2, 2) = 3x^2 - 2x^3
    CHECK(regularized_incomplete_beta(1, 1, 0.3) == doctest::Approx(0.3).epsilon(1e-13));
    CHECK(regularized_incomplete_beta(3, 1, 0.7) == doctest::Approx(0.343).epsilon(1e-13));
    CHECK(regularized_incomplete_beta(1, 4, 0.2) == doctest::Approx(1 - std::pow(0.8, 4)).epsilon(1e-13));
    CHECK(regularized_incomplete_beta(2, 2, 0.9) == doctest::Approx(3 * 0.81 - 2 * 0.729).epsilon(1e-13));
    CHECK(regularized_incomplete_beta(2.5, 0.5, 0) == 0);
    CHECK(regularized_incomplete_beta(2.5, 0.5, 1) == 1);
    CHECK_THROWS_WITH_AS(regularized_incomplete_beta(0, 1, 0.5), doctest::Contains("a, b > 0"), std::invalid_argument);
    CHECK_THROWS_AS(regularized_incomplete_beta(1, 1, 1.5), std::invalid_argument);
}

TEST_CASE("the t CDF: Cauchy at df = 1, the closed form at df = 2, the normal limit")
{
    for (double t : {-30.0, -2.5, -1.0, 0.0, 0.3, 1.0, 4.0, 100.0})
    {
        CAPTURE(t);
        CHECK(t_cdf(t, 1) == doctest::Approx(0.5 + std::atan(t) / pi).epsilon(1e-12));
        CHECK(t_cdf(t, 2) == doctest::Approx(0.5 + t / (2 * std::sqrt(2 + t * t))).epsilon(1e-12));
    }
    CHECK(t_cdf(1.959963984540054, 1e7) == doctest::Approx(0.975).epsilon(1e-7));
    CHECK(t_cdf(INFINITY, 3) == 1);
    CHECK(t_cdf(-INFINITY, 3) == 0);
    CHECK_THROWS_WITH_AS(t_cdf(1, 0), doctest::Contains("degrees of freedom"), std::invalid_argument);
}

TEST_CASE("the t CDF for fractional and large df agrees with the integral of the density")
{
    for (double df : {0.7, 1.21479, 3.5, 9.3, 40.0})
    {
        for (double t : {-3.2, -0.4, 0.9, 2.1, 6.0})
        {
            CAPTURE(df);
            CAPTURE(t);
            CHECK(t_cdf(t, df) == doctest::Approx(t_cdf_by_integration(t, df)).epsilon(1e-9));
        }
    }
}

TEST_CASE("t quantiles match the published table")
{
    CHECK(t_quantile(0.975, 4) == doctest::Approx(2.776445).epsilon(1e-6));
    CHECK(t_quantile(0.975, 1) == doctest::Approx(12.706205).epsilon(1e-6));
    CHECK(t_quantile(0.975, 9) == doctest::Approx(2.262157).epsilon(1e-6));
    CHECK(t_quantile(0.975, 30) == doctest::Approx(2.042272).epsilon(1e-6));
    CHECK(t_quantile(0.95, 10) == doctest::Approx(1.812461).epsilon(1e-6));
    CHECK(t_quantile(0.025, 4) == doctest::Approx(-2.776445).epsilon(1e-6));
    CHECK(t_quantile(0.5, 7) == doctest::Approx(0).epsilon(1e-12));
    CHECK(t_quantile(0.975, 1e8) == doctest::Approx(1.959964).epsilon(1e-6));
    // df = 2 inverts in closed form: t = (2p - 1) sqrt(2 / (4 p (1 - p)))
    CHECK(t_quantile(0.9, 2) == doctest::Approx(0.8 * std::sqrt(2 / (4 * 0.9 * 0.1))).epsilon(1e-10));
    CHECK_THROWS_WITH_AS(t_quantile(1, 4), doctest::Contains("(0, 1)"), std::invalid_argument);
}

TEST_CASE("a 95% confidence interval of a mean")
{
    // {1, 2, 3, 4, 5}: mean 3, sd sqrt(2.5), half width 2.776445 * sqrt(2.5 / 5) = 1.963243
    const interval r = mean_interval({1, 2, 3, 4, 5});
    CHECK(r.mean == doctest::Approx(3));
    CHECK(r.half_width == doctest::Approx(2.776445 * std::sqrt(0.5)).epsilon(1e-6));
    CHECK(std::isnan(mean_interval({1}).half_width));
}

TEST_CASE("Welch's test: equal variances and sizes reduce to df = 2n - 2, checked in closed form at df = 2")
{
    // a = {1, 3}, b = {4, 6}: difference -3, s^2 = 2 on both sides, se = sqrt(2/2 + 2/2) = sqrt 2,
    // t = -3 / sqrt 2, df = (1 + 1)^2 / (1/1 + 1/1) = 2, p = 1 - |t| / sqrt(2 + t^2) = 0.167949
    const comparison c = welch({1, 3}, {4, 6});
    CHECK(c.difference == doctest::Approx(-3));
    CHECK(c.t == doctest::Approx(-3 / std::sqrt(2.0)));
    CHECK(c.df == doctest::Approx(2));
    CHECK(c.p == doctest::Approx(1 - 3 / std::sqrt(2.0) / std::sqrt(6.5)).epsilon(1e-12));
    CHECK(c.p == doctest::Approx(0.167949).epsilon(1e-5));
    // half width t_{0.975, 2} sqrt 2 = 4.302653 * 1.414214
    CHECK(c.half_width == doctest::Approx(4.302653 * std::sqrt(2.0)).epsilon(1e-6));
}

TEST_CASE("Welch's test: unequal variances and sizes (a worked example)")
{
    // a = {1, 2, 3, 4}: mean 2.5, s^2 = 5/3, s^2/n = 5/12; b = {2, 6}: mean 4, s^2 = 8, s^2/n = 4.
    // se^2 = 53/12; df = (53/12)^2 / ((5/12)^2 / 3 + 4^2 / 1) = 2809/144 / (25/432 + 16) = 1.214789
    // t = -1.5 / sqrt(53/12) = -0.713746
    const comparison c = welch({1, 2, 3, 4}, {2, 6});
    CHECK(c.difference == doctest::Approx(-1.5));
    CHECK(c.df == doctest::Approx((2809.0 / 144) / (25.0 / 432 + 16)).epsilon(1e-12));
    CHECK(c.df == doctest::Approx(1.214789).epsilon(1e-6));
    CHECK(c.t == doctest::Approx(-0.713746).epsilon(1e-6));
    CHECK(c.p == doctest::Approx(2 * t_cdf_by_integration(-1.5 / std::sqrt(53.0 / 12), c.df)).epsilon(1e-9));
    CHECK(std::isnan(welch({1}, {2, 3}).p));
}

TEST_CASE("Welch's test on identical constant samples and on clearly separated ones")
{
    const comparison same = welch({2, 2, 2}, {2, 2, 2});
    CHECK(same.difference == 0);
    CHECK(same.p == 1);
    const comparison apart = welch({10.0, 10.1, 9.9, 10.05}, {1.0, 1.1, 0.9, 1.05});
    CHECK(apart.p < 1e-8);
}

TEST_CASE("the paired test works on the differences")
{
    // differences {1, 2, 3, 4, 5}: mean 3, se sqrt(2.5 / 5),
    // t = 3 / sqrt(0.5) = 4.242641 on 4 df
    const comparison c = paired({11, 12, 13, 14, 15}, {10, 10, 10, 10, 10});
    CHECK(c.difference == doctest::Approx(3));
    CHECK(c.df == doctest::Approx(4));
    CHECK(c.t == doctest::Approx(3 / std::sqrt(0.5)));
    CHECK(c.half_width == doctest::Approx(2.776445 * std::sqrt(0.5)).epsilon(1e-6));
    CHECK(c.p == doctest::Approx(2 * t_cdf_by_integration(-c.t, 4)).epsilon(1e-9));
    CHECK_THROWS_WITH_AS(paired({1, 2}, {1}), doctest::Contains("differ in size"), std::invalid_argument);
}
}  // namespace test_stats
