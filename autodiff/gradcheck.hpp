// gradcheck: compares the tape's gradients of a user function with central finite differences.
//
//   auto f = [](xgrad::tape<double>& t, const std::vector<xgrad::var<double>>& x) {
//       return xgrad::ops::tanh(xgrad::ops::matmul(x[0], x[1]));
//   };
//   auto report = xgrad::gradcheck(f, {A, B});
//   if (!report.ok) std::cerr << report.summary();
//
// Small inputs get the full Jacobian, column by column (finite differences) against row by row
// (one backward per output element). Large inputs get random directions: v^T J u by differences of
// f(x + eps u) and f(x - eps u), against (J^T v) . u from one backward. Float64 only: in float32 the
// differences are too coarse to tell a bug from rounding, so the float32 overload refuses.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autodiff/tape.hpp"

namespace xgrad
{
struct gradcheck_options
{
    double eps = 1e-6;                          // central-difference step
    double atol = 1e-5;                         // pass when |analytic - numeric| <= atol + rtol |numeric|
    double rtol = 1e-3;
    std::size_t full_jacobian_limit = 20000;    // Jacobian entries (inputs x outputs) checked one by one
    std::size_t directions = 3;                 // random directions for inputs above the limit
    unsigned seed = 42;
};

struct gradcheck_input_report
{
    std::size_t input;           // position in the inputs vector
    shape_t shape;
    std::string method;          // "full Jacobian" or "random directions"
    std::size_t entries_checked;
    double max_abs_error;        // over the entries checked, as autodiff/compare.hpp measures it:
    double max_rel_error;        // max |analytic - numeric| and that over the largest |entry|
    bool ok;
};

struct gradcheck_report
{
    std::vector<gradcheck_input_report> inputs;
    bool ok = true;
    std::string summary() const;  // a table, one line per input
};

template <class T>
using checked_function = std::function<var<T>(tape<T>&, const std::vector<var<T>>&)>;

gradcheck_report gradcheck(const checked_function<double>& f, const std::vector<array<double>>& inputs,
                           const gradcheck_options& options = {});

// PyTorch's gradgradcheck: gradcheck of the function (inputs, seed) -> the vector-Jacobian product
// seed^T J_f(inputs) (xgrad::grad with create_graph: one gradient per input, flattened and joined),
// with respect to the inputs and the seed. Its Jacobian by central differences of first-order
// backwards, against the tape's backward through the recorded backward. The report has one line per
// input and a last one for the seed: `seed`, or normal numbers of f's output shape drawn from
// options.seed when it is null. Float64 only, as gradcheck.
gradcheck_report gradgradcheck(const checked_function<double>& f, const std::vector<array<double>>& inputs,
                               const gradcheck_options& options = {}, const array<double>* seed = nullptr);

// Central differences of a scalar function of x, one entry at a time: (f(x + eps e_i) - f(x - eps e_i)) / 2 eps.
// `f` reads x (by reference) each call; x is restored on return. For checking code that has no tape,
// such as a hand-derived backward.
array<double> numeric_gradient(const std::function<double()>& f, array<double>& x, double eps = 1e-6);

// Refuses: throws std::invalid_argument telling the caller to check in float64.
gradcheck_report gradcheck(const checked_function<float>& f, const std::vector<array<float>>& inputs,
                           const gradcheck_options& options = {});
}  // namespace xgrad
