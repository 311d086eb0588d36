// Sharpness: the top Hessian eigenvalue by power iteration on Hessian-vector products, on a quadratic whose
// eigenvalues are known, and against the eigenvalues of a tiny model's dense Hessian (central differences of
// its first-order gradients, diagonalised by Jacobi rotations).
#include "autodiff/grad.hpp"
#include "test_util.hpp"

namespace test_gradgrad_sharpness
{
using namespace xgrad;
using namespace xgrad::test;

namespace
{
// A = Q diag(lambda) Q^T with Q = I - 2 u u^T / |u|^2 (a Householder reflection: orthogonal).
f64 matrix_with_eigenvalues(const std::vector<double>& lambda, unsigned seed)
{
    const std::size_t n = lambda.size();
    const f64 u = random_array({ n }, seed);
    const double uu = xt::sum(u * u)();
    f64 Q = xt::eye<double>(n);
    for (std::size_t i = 0; i < n; ++i)
    {
        for (std::size_t j = 0; j < n; ++j)
        {
            Q(i, j) -= 2 * u(i) * u(j) / uu;
        }
    }
    f64 A = xt::zeros<double>({ n, n });
    for (std::size_t i = 0; i < n; ++i)
    {
        for (std::size_t j = 0; j < n; ++j)
        {
            for (std::size_t k = 0; k < n; ++k)
            {
                A(i, j) += Q(i, k) * lambda[k] * Q(j, k);
            }
        }
    }
    return A;
}

// The eigenvalues of a symmetric matrix by cyclic Jacobi rotations (textbook, for small n).
std::vector<double> symmetric_eigenvalues(f64 A)
{
    const std::size_t n = A.shape()[0];
    for (int sweep = 0; sweep < 100; ++sweep)
    {
        double off = 0;
        for (std::size_t p = 0; p < n; ++p)
        {
            for (std::size_t q = p + 1; q < n; ++q)
            {
                off += A(p, q) * A(p, q);
            }
        }
        if (off < 1e-30)
        {
            break;
        }
        for (std::size_t p = 0; p < n; ++p)
        {
            for (std::size_t q = p + 1; q < n; ++q)
            {
                if (A(p, q) == 0)
                {
                    continue;
                }
                // Zero A(p, q) with the rotation whose angle solves tan(2 theta) = 2 A_pq / (A_qq - A_pp).
                const double theta = (A(q, q) - A(p, p)) / (2 * A(p, q));
                const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
                const double c = 1 / std::sqrt(t * t + 1), s = t * c;
                for (std::size_t k = 0; k < n; ++k)
                {
                    const double akp = A(k, p), akq = A(k, q);
                    A(k, p) = c * akp - s * akq;
                    A(k, q) = s * akp + c * akq;
                }
                for (std::size_t k = 0; k < n; ++k)
                {
                    const double apk = A(p, k), aqk = A(q, k);
                    A(p, k) = c * apk - s * aqk;
                    A(q, k) = s * apk + c * aqk;
                }
            }
        }
    }
    std::vector<double> values(n);
    for (std::size_t i = 0; i < n; ++i)
    {
        values[i] = A(i, i);
    }
    std::sort(values.begin(), values.end(), [](double a, double b) { return std::abs(a) > std::abs(b); });
    return values;
}
} // namespace

TEST_CASE("sharpness: a quadratic's top eigenvalue to 1e-6, across two inputs")
{
    // f(x, y) = 0.5 z^T A z, z = [x; y]: the Hessian is A, whose eigenvalues are chosen.
    const std::vector<double> lambda = { 4.0, -1.5, 1.0, 0.5, -0.25 };
    const f64 A = matrix_with_eigenvalues(lambda, 3);
    tape<double> t;
    const var<double> x = t.input(random_array({ 3, 1 }, 4)), y = t.input(random_array({ 2, 1 }, 5));
    const var<double> z = ops::concat(vars{ x, y }, 0);
    const var<double> f = 0.5 * ops::sum(z * ops::matmul(t.constant(A), z));
    const eigen_estimate<double> e = top_hessian_eigenvalue(f, { x, y }, 200, /*seed=*/1, /*rtol=*/1e-15);
    CHECK(std::abs(e.value - 4.0) <= 1e-6 * 4.0);
    CHECK(e.iterations < 200); // converged before the limit
    // Its vector is A's eigenvector: A v = 4 v.
    const f64 v = xt::concatenate(xt::xtuple(e.vector[0], e.vector[1]), 0);
    XGRAD_CHECK_CLOSE(f64(ref_matmul(A, v, false, false)), f64(4.0 * v), 1e-5, 1e-6);
    // A dominant negative eigenvalue comes out with its sign.
    const f64 B = matrix_with_eigenvalues({ -3.0, 1.0, 0.5 }, 6);
    tape<double> t2;
    const var<double> w = t2.input(random_array({ 3, 1 }, 7));
    const var<double> g = 0.5 * ops::sum(w * ops::matmul(t2.constant(B), w));
    CHECK(std::abs(top_hessian_eigenvalue(g, { w }, 200, 2, 1e-15).value + 3.0) <= 3e-6);
}

TEST_CASE("sharpness: a tiny model's top eigenvalue equals its dense Hessian's")
{
    // loss = cross_entropy(tanh(x W1) W2, targets); parameters W1 (3, 4) and W2 (4, 3): 24 numbers.
    const f64 X = random_array({ 5, 3 }, 10, -2, 2);
    const ids_t targets = make_ids({ 5 }, { 0, 2, 1, 1, -1 });
    const std::vector<f64> params = { random_array({ 3, 4 }, 11, -1.5, 1.5),
                                      random_array({ 4, 3 }, 12, -1.5, 1.5) };
    auto loss_of = [&](tape<double>& t, const vars& w)
    { return ops::cross_entropy(ops::matmul(ops::tanh(ops::matmul(t.constant(X), w[0])), w[1]), targets); };
    auto gradient = [&](const std::vector<f64>& at) { // first order only, flattened
        tape<double> t;
        const vars w = { t.input(at[0]), t.input(at[1]) };
        t.backward(loss_of(t, w));
        f64 g = xt::concatenate(xt::xtuple(xt::flatten(w[0].grad()), xt::flatten(w[1].grad())), 0);
        return g;
    };
    const std::size_t n = params[0].size() + params[1].size();
    f64 H = xt::zeros<double>({ n, n });
    const double eps = 1e-5;
    for (std::size_t j = 0; j < n; ++j) // column j: (g(w + eps e_j) - g(w - eps e_j)) / 2 eps
    {
        std::vector<f64> plus = params, minus = params;
        const std::size_t k = j < params[0].size() ? 0 : 1, at = k == 0 ? j : j - params[0].size();
        plus[k].flat(at) += eps;
        minus[k].flat(at) -= eps;
        const f64 column = (gradient(plus) - gradient(minus)) / (2 * eps);
        for (std::size_t i = 0; i < n; ++i)
        {
            H(i, j) = column(i);
        }
    }
    const f64 symmetric = 0.5 * (H + xt::transpose(H));
    const std::vector<double> eigenvalues = symmetric_eigenvalues(symmetric);
    REQUIRE(std::abs(eigenvalues[1]) < 0.95 * std::abs(eigenvalues[0])); // a gap for the power iteration

    tape<double> t;
    const vars w = { t.input(params[0]), t.input(params[1]) };
    const eigen_estimate<double> e = top_hessian_eigenvalue(loss_of(t, w), w, 3000, 4, 1e-14);
    CAPTURE(eigenvalues[0]);
    CAPTURE(eigenvalues[1]);
    CAPTURE(e.iterations);
    CHECK(std::abs(e.value - eigenvalues[0]) <= 1e-6 * std::abs(eigenvalues[0]));
}
}  // namespace test_gradgrad_sharpness
