#include "autodiff/gradcheck.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <xtensor/xadapt.hpp>

#include "autodiff/compare.hpp"
#include "autodiff/grad.hpp"
#include "ops/ops.hpp"

namespace xgrad
{
namespace
{
using f64 = array<double>;

// f on a fresh tape; returns the output value and, when `seed` is given, every input's gradient.
struct evaluation
{
    f64 output;
    std::vector<f64> grads;
};

evaluation evaluate(const checked_function<double>& f, const std::vector<f64>& inputs, const f64* seed)
{
    tape<double> t;
    std::vector<var<double>> xs;
    for (const auto& x : inputs)
    {
        xs.push_back(t.input(x));
    }
    var<double> y = f(t, xs);
    evaluation e{y.value(), {}};
    if (seed)
    {
        if (y.requires_grad())
        {
            t.backward(y, *seed);
        }
        for (const auto& x : xs)
        {
            e.grads.push_back(x.grad());
        }
    }
    return e;
}

// Collects analytic and numeric entries. Passing is PyTorch's rule, entry by entry:
// |analytic - numeric| <= atol + rtol |numeric|; the reported errors are the project's one measure
// (autodiff/compare.hpp) over all the entries checked.
struct error_tracker
{
    const gradcheck_options& options;
    std::vector<double> analytic, numeric;
    bool ok = true;

    void add(double a, double n)
    {
        analytic.push_back(a);
        numeric.push_back(n);
        ok = ok && std::abs(a - n) <= options.atol + options.rtol * std::abs(n);
    }

    gradcheck_input_report report(std::size_t k, const shape_t& shape, const char* method) const
    {
        const shape_t entries{analytic.size()};
        const difference d = compare(f64(xt::adapt(analytic, entries)), f64(xt::adapt(numeric, entries)));
        return {k, shape, method, analytic.size(), d.max_abs, d.max_rel, ok};
    }
};

// (f(x + eps u) - f(x - eps u)) / (2 eps), where u perturbs input k only.
f64 central_difference(const checked_function<double>& f, std::vector<f64> inputs, std::size_t k, const f64& u,
                       double eps)
{
    const f64 x = inputs[k];
    inputs[k] = x + eps * u;
    f64 plus = evaluate(f, inputs, nullptr).output;
    inputs[k] = x - eps * u;
    f64 minus = evaluate(f, inputs, nullptr).output;
    return (plus - minus) / (2 * eps);
}

gradcheck_input_report check_full(const checked_function<double>& f, const std::vector<f64>& inputs,
                                  std::size_t k, const std::vector<f64>& jacobian_rows,
                                  const gradcheck_options& options)
{
    error_tracker errors{options, {}, {}};
    f64 u = xt::zeros<double>(inputs[k].shape());
    for (std::size_t i = 0; i < u.size(); ++i)
    {
        u.flat(i) = 1;
        const f64 column = central_difference(f, inputs, k, u, options.eps);  // d output / d x_k[i]
        u.flat(i) = 0;
        for (std::size_t j = 0; j < column.size(); ++j)
        {
            errors.add(jacobian_rows[j].flat(i), column.flat(j));
        }
    }
    return errors.report(k, to_shape(inputs[k].shape()), "full Jacobian");
}

gradcheck_input_report check_directions(const checked_function<double>& f, const std::vector<f64>& inputs,
                                        std::size_t k, const shape_t& out_shape, std::mt19937& rng,
                                        const gradcheck_options& options)
{
    std::normal_distribution<double> normal;
    auto random_like = [&](const shape_t& shape) {
        f64 r = f64::from_shape(shape);
        std::generate(r.begin(), r.end(), [&] { return normal(rng); });
        return r;
    };
    error_tracker errors{options, {}, {}};
    for (std::size_t d = 0; d < options.directions; ++d)
    {
        const f64 u = random_like(to_shape(inputs[k].shape()));
        const f64 v = random_like(out_shape);
        const double numeric = xt::sum(v * central_difference(f, inputs, k, u, options.eps))();
        const f64 grad = evaluate(f, inputs, &v).grads[k];
        errors.add(xt::sum(grad * u)(), numeric);
    }
    return errors.report(k, to_shape(inputs[k].shape()), "random directions");
}
}  // namespace

gradcheck_report gradcheck(const checked_function<double>& f, const std::vector<f64>& inputs,
                           const gradcheck_options& options)
{
    const f64 y = evaluate(f, inputs, nullptr).output;
    const shape_t out_shape = to_shape(y.shape());
    const std::size_t n_out = y.size();

    // Rows of the Jacobian, one backward per output element, shared by every full-Jacobian input.
    bool any_full = false;
    for (const auto& x : inputs)
    {
        any_full = any_full || x.size() * n_out <= options.full_jacobian_limit;
    }
    std::vector<std::vector<f64>> rows(inputs.size());
    if (any_full)
    {
        f64 seed = xt::zeros<double>(out_shape);
        for (std::size_t j = 0; j < n_out; ++j)
        {
            seed.flat(j) = 1;
            auto grads = evaluate(f, inputs, &seed).grads;
            seed.flat(j) = 0;
            for (std::size_t k = 0; k < inputs.size(); ++k)
            {
                rows[k].push_back(std::move(grads[k]));
            }
        }
    }

    gradcheck_report report;
    std::mt19937 rng(options.seed);
    for (std::size_t k = 0; k < inputs.size(); ++k)
    {
        report.inputs.push_back(inputs[k].size() * n_out <= options.full_jacobian_limit
                                    ? check_full(f, inputs, k, rows[k], options)
                                    : check_directions(f, inputs, k, out_shape, rng, options));
        report.ok = report.ok && report.inputs.back().ok;
    }
    return report;
}

gradcheck_report gradgradcheck(const checked_function<double>& f, const std::vector<f64>& inputs,
                               const gradcheck_options& options, const f64* seed)
{
    const std::size_t n = inputs.size();
    std::vector<f64> with_seed = inputs;
    if (seed)
    {
        with_seed.push_back(*seed);
    }
    else
    {
        std::mt19937 rng(options.seed);
        std::normal_distribution<double> normal;
        f64 s = f64::from_shape(evaluate(f, inputs, nullptr).output.shape());
        std::generate(s.begin(), s.end(), [&] { return normal(rng); });
        with_seed.push_back(std::move(s));
    }
    // (x_1 .. x_n, seed) -> [vec(d <seed, f> / dx_1), ..., vec(d <seed, f> / dx_n)]
    const checked_function<double> vjp = [&f, n](tape<double>& t, const std::vector<var<double>>& xs) {
        const std::vector<var<double>> x(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(n));
        std::vector<var<double>> parts;
        for (const var<double>& g : grad(f(t, x), x, xs[n], create_graph))
        {
            parts.push_back(ops::reshape(g, {-1}));
        }
        return parts.size() == 1 ? parts[0] : ops::concat(parts, 0);
    };
    return gradcheck(vjp, with_seed, options);
}

array<double> numeric_gradient(const std::function<double()>& f, array<double>& x, double eps)
{
    array<double> grad = array<double>::from_shape(x.shape());
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        const double saved = x.flat(i);
        x.flat(i) = saved + eps;
        const double plus = f();
        x.flat(i) = saved - eps;
        const double minus = f();
        x.flat(i) = saved;
        grad.flat(i) = (plus - minus) / (2 * eps);
    }
    return grad;
}

gradcheck_report gradcheck(const checked_function<float>&, const std::vector<array<float>>&,
                           const gradcheck_options&)
{
    throw std::invalid_argument(
        "gradcheck: float32 inputs; central differences in float32 cannot tell a wrong gradient from rounding "
        "error. Run the check in float64 (xgrad ops are instantiated for double).");
}

std::string gradcheck_report::summary() const
{
    std::ostringstream out;
    out << "input  shape                 method              entries   max abs err   max rel err  ok\n";
    for (const auto& r : inputs)
    {
        char line[200];
        std::snprintf(line, sizeof line, "%-6zu %-20s %-19s %7zu   %11.3e   %11.3e  %s\n", r.input,
                      shape_str(r.shape).c_str(), r.method.c_str(), r.entries_checked, r.max_abs_error,
                      r.max_rel_error, r.ok ? "yes" : "NO");
        out << line;
    }
    return out.str();
}
}  // namespace xgrad
