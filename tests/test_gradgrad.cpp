// xgrad::grad and gradients of gradients: the mechanism (generic rules, twins, errors) on ops defined
// here, Hessian-vector products against closed forms, and gradgradcheck itself.
#include "autodiff/grad.hpp"
#include "autodiff/record.hpp"
#include "test_util.hpp"

namespace test_gradgrad
{
using namespace xgrad;
using namespace xgrad::test;

namespace
{
// y = x^3.   dL/dx = 3 g x^2   (one generic rule: arrays in a backward, vars with create_graph)
template<class T>
var<T> cube(const var<T>& x)
{
    array<T> y = x.value() * x.value() * x.value();
    return detail::record("cube",
                          { x },
                          std::move(y),
                          saves_input0,
                          [](auto& ctx)
                          {
                              const auto& x = ctx.input(0);
                              ctx.accumulate(0, T(3) * ctx.grad() * x * x);
                          });
}

// c = a * b.   dL/da = g b,  dL/db = g a   (generic)
template<class T>
var<T> times(const var<T>& a, const var<T>& b)
{
    array<T> c = a.value() * b.value();
    return detail::record("times",
                          { a, b },
                          std::move(c),
                          saves_input0 | saves_input1,
                          [](auto& ctx)
                          {
                              ctx.accumulate(0, ctx.grad() * ctx.input(1));
                              ctx.accumulate(1, ctx.grad() * ctx.input(0));
                          });
}

// y = x^3 again, with a rule on arrays only: its gradient cannot be differentiated.
template<class T>
var<T> cube_on_arrays(const var<T>& x)
{
    array<T> y = x.value() * x.value() * x.value();
    return detail::record("cube_on_arrays",
                          { x },
                          std::move(y),
                          saves_input0,
                          [](backward_context<T>& ctx)
                          { ctx.accumulate(0, T(3) * ctx.grad() * ctx.input(0) * ctx.input(0)); });
}

// y = a * b^2 as a "fused" op: its rule on arrays, and its twin from primitives for create_graph.
// dL/da = g b^2,  dL/db = 2 g a b
template<class T>
var<T> mul_square(const var<T>& a, const var<T>& b)
{
    array<T> y = a.value() * b.value() * b.value();
    auto on_arrays = [](backward_context<T>& ctx)
    {
        const auto &a = ctx.input(0), &b = ctx.input(1);
        ctx.accumulate(0, ctx.grad() * b * b);
        ctx.accumulate(1, T(2) * ctx.grad() * a * b);
    };
    auto twin = [](const std::vector<var<T>>& in) { return times(in[0], times(in[1], in[1])); };
    return detail::record("mul_square",
                          { a, b },
                          std::move(y),
                          saves_input0 | saves_input1,
                          detail::with_twin<T>(on_arrays, twin));
}
} // namespace

TEST_CASE("grad: first order equals tape::backward and leaves grad() untouched")
{
    const f64 X = normal_array<double>({ 3, 4 }, 1), W = normal_array<double>({ 4, 2 }, 2);
    tape<double> t;
    auto x = t.input(X), w = t.input(W);
    auto y = ops::sum(ops::tanh(ops::matmul(x, w)));
    const auto g = grad(y, { x, w }, grad_options().retain_graph());
    t.backward(y);
    XGRAD_CHECK_CLOSE(g[0].value(), x.grad(), 0.0, 0.0);
    XGRAD_CHECK_CLOSE(g[1].value(), w.grad(), 0.0, 0.0);
    CHECK_FALSE(g[0].requires_grad());
}

TEST_CASE("grad: without retain_graph the rules are freed, and a second walk names the op")
{
    tape<double> t;
    auto x = t.input(normal_array<double>({ 3 }, 1));
    auto y = ops::sum(ops::exp(x));
    grad(y, { x });
    CHECK(x.grad() == xt::zeros<double>({ 3 })); // grad() leaves x's gradient alone
    try
    {
        grad(y, { x });
        FAIL("no error");
    }
    catch (const std::logic_error& e)
    {
        CHECK(contains(e.what(), "'sum'"));
        CHECK(contains(e.what(), "released"));
    }
}

TEST_CASE("grad: second derivative of a generic rule, and H v of a cube against 6 x v")
{
    const f64 X = normal_array<double>({ 5 }, 3), V = normal_array<double>({ 5 }, 4);
    tape<double> t;
    auto x = t.input(X);
    auto gx = grad(cube(x), { x }, f64(xt::ones<double>({ 5 })), create_graph)[0];
    XGRAD_CHECK_CLOSE(gx.value(), f64(3.0 * X * X), 1e-14, 0.0);
    CHECK(gx.requires_grad());
    auto hv = grad(gx, { x }, V)[0];
    XGRAD_CHECK_CLOSE(hv.value(), f64(6.0 * X * V), 1e-14, 0.0);
}

TEST_CASE("grad: a fused op's twin gives its second derivatives, a reused input counted once")
{
    const f64 A = normal_array<double>({ 2, 3 }, 5), B = normal_array<double>({ 3 }, 6);
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return mul_square(v[0], v[1]); }, { A, B });
    const auto report =
      gradgradcheck([](tape<double>&, const vars& v) { return mul_square(v[0], v[1]); }, { A, B });
    CHECK_MESSAGE(report.ok, report.summary());
    CHECK(report.inputs.size() == 3); // a, b and the seed
    // mul_square(x, x) = x^3: d2/dx2 sum = 6 x.
    tape<double> t;
    auto x = t.input(B);
    const f64 ones = xt::ones<double>({ 3 });
    auto gx = grad(mul_square(x, x), { x }, ones, create_graph)[0];
    auto hv = grad(gx, { x }, ones)[0];
    XGRAD_CHECK_CLOSE(hv.value(), f64(6.0 * B), 1e-14, 0.0);
}

TEST_CASE("grad: an array-only rule refuses create_graph naming the op; first order still works")
{
    tape<double> t;
    auto x = t.input(normal_array<double>({ 3 }, 1));
    auto y = cube_on_arrays(x);
    const f64 ones = xt::ones<double>({ 3 });
    CHECK(grad(y, { x }, ones, grad_options().retain_graph())[0].value().size() == 3);
    try
    {
        grad(y, { x }, ones, create_graph);
        FAIL("no error");
    }
    catch (const std::logic_error& e)
    {
        CHECK(contains(e.what(), "'cube_on_arrays'"));
    }
}

TEST_CASE("grad: bad arguments")
{
    tape<double> t, other;
    auto x = t.input(normal_array<double>({ 3 }, 1));
    auto y = cube(x);
    auto z = other.input(normal_array<double>({ 3 }, 2));
    CHECK(contains(invalid_argument_message([&] { grad(y, { x }); }), "seed"));
    CHECK(contains(invalid_argument_message([&] { grad(ops::sum(y), { z }); }),
                   "input 0 is not on the output's tape"));
    CHECK(contains(invalid_argument_message([&] { grad(y, { x }, f64(xt::ones<double>({ 4 }))); }),
                   "seed shape (4) != output shape (3)"));
    // An input the output does not depend on gets zeros.
    auto unused = t.input(normal_array<double>({ 2 }, 3));
    const auto g = grad(y, { x, unused }, f64(xt::ones<double>({ 3 })), create_graph);
    CHECK(g[1].value() == xt::zeros<double>({ 2 }));
}

TEST_CASE("grad: a seed var is part of the graph (the VJP is linear in it)")
{
    const f64 X = normal_array<double>({ 4 }, 7), S = normal_array<double>({ 4 }, 8),
              U = normal_array<double>({ 4 }, 9);
    tape<double> t;
    auto x = t.input(X), s = t.input(S);
    auto gx = grad(cube(x), { x }, s, create_graph)[0]; // 3 s x^2
    auto gs = grad(ops::sum(gx * t.constant(U)), { s })[0];
    XGRAD_CHECK_CLOSE(gs.value(), f64(3.0 * X * X * U), 1e-14, 0.0);
}

TEST_CASE("gradgradcheck fails on a wrong second derivative")
{
    // A rule whose first derivative is right at the point checked but whose recorded form is wrong: 3 g x^2
    // computed as 3 g * constant(x^2) loses the dependence on x.
    auto f = [](tape<double>&, const vars& v)
    {
        const var<double>& x = v[0];
        array<double> y = x.value() * x.value() * x.value();
        return detail::record(
          "cube_frozen",
          { x },
          std::move(y),
          saves_input0,
          [](auto& ctx)
          {
              using ctx_t = std::decay_t<decltype(ctx)>;
              if constexpr (std::is_same_v<ctx_t, graph_context<double>>)
              {
                  const auto x = ctx.input(0);
                  ctx.accumulate(0,
                                 3.0 * ctx.grad() * constant_like(x, array<double>(x.value() * x.value())));
              }
              else
              {
                  ctx.accumulate(0, 3.0 * ctx.grad() * ctx.input(0) * ctx.input(0));
              }
          });
    };
    const f64 X = normal_array<double>({ 3 }, 1);
    CHECK(gradcheck(f, { X }).ok);
    CHECK_FALSE(gradgradcheck(f, { X }).ok);
}
}  // namespace test_gradgrad
