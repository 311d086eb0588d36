// Every op of the op table is twice differentiable: gradgradcheck (float64, PyTorch's definition) of each,
// with broadcasting, reused inputs, size 1 and fully masked rows; and a test that lists the ops declared
// in ops/ and fails when one has no case here.
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "autodiff/grad.hpp"
#include "ops/composed.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"

namespace test_gradgrad_ops
{
using namespace xgrad;
using namespace xgrad::test;

namespace
{
struct gg_case
{
    std::string what;
    checked_function<double> f;
    std::vector<f64> inputs;
};

// Values away from 0 (relu's kink, log's and sqrt's pole): |x| in [0.3, 1.3], signs mixed.
f64 away_from_zero(const shape_t& shape, unsigned seed)
{
    f64 x = random_array(shape, seed, 0.3, 1.3);
    const f64 sign = random_array(shape, seed + 100);
    return x * xt::where(sign > 0, 1.0, -1.0);
}

f64 positive(const shape_t& shape, unsigned seed)
{
    return random_array(shape, seed, 0.5, 2.0);
}

mask_t mask_with_empty_row()
{
    mask_t m = random_mask({ 3, 4 }, 5, 0.6);
    for (std::size_t j = 0; j < 4; ++j)
    {
        m(1, j) = false; // row 1 sees nothing
    }
    m(0, 0) = true;
    return m;
}

using unary = var<double> (*)(const var<double>&);

gg_case elementwise(const std::string& name, unary op, f64 x)
{
    return { name, [op](tape<double>&, const vars& v) { return op(v[0]); }, { std::move(x) } };
}

std::map<std::string, std::vector<gg_case>> cases()
{
    std::map<std::string, std::vector<gg_case>> c;
    const f64 a23 = random_array({ 2, 3 }, 1), b3 = random_array({ 3 }, 2), b21 = random_array({ 2, 1 }, 3);
    c["add"] = {
        { "broadcast (2,3)+(3)", [](tape<double>&, const vars& v) { return v[0] + v[1]; }, { a23, b3 } },
        { "reused add(x, x)", [](tape<double>&, const vars& v) { return v[0] + v[0]; }, { a23 } },
        { "size 1 (1)+(2,1)",
          [](tape<double>&, const vars& v) { return v[0] + v[1]; },
          { random_array({ 1 }, 4), b21 } }
    };
    c["sub"] = {
        { "broadcast (2,3)-(2,1)", [](tape<double>&, const vars& v) { return v[0] - v[1]; }, { a23, b21 } }
    };
    c["mul"] = {
        { "broadcast (2,3)*(3)", [](tape<double>&, const vars& v) { return v[0] * v[1]; }, { a23, b3 } },
        { "reused mul(x, x)", [](tape<double>&, const vars& v) { return v[0] * v[0] * v[0]; }, { b3 } }
    };
    c["div"] = { { "broadcast (2,3)/(3)",
                   [](tape<double>&, const vars& v) { return v[0] / v[1]; },
                   { a23, away_from_zero({ 3 }, 6) } },
                 { "reused x / x^2",
                   [](tape<double>&, const vars& v) { return v[0] / (v[0] * v[0]); },
                   { away_from_zero({ 3 }, 7) } } };
    c["scale"] = {
        { "2.5 x", [](tape<double>&, const vars& v) { return ops::scale(v[0] * v[0], 2.5); }, { a23 } }
    };
    c["neg"] = { { "-x^2", [](tape<double>&, const vars& v) { return ops::neg(v[0] * v[0]); }, { a23 } } };
    c["add_scalar"] = { { "(x + 1)^2",
                          [](tape<double>&, const vars& v)
                          {
                              const var<double> y = ops::add_scalar(v[0], 1.0);
                              return y * y;
                          },
                          { a23 } } };
    c["exp"] = { elementwise("exp", ops::exp<double>, a23) };
    c["log"] = { elementwise("log", ops::log<double>, positive({ 2, 3 }, 8)) };
    c["tanh"] = { elementwise("tanh", ops::tanh<double>, a23) };
    c["softcap"] = { { "1.5 tanh(x / 1.5)",
                       [](tape<double>&, const vars& v) { return ops::softcap(v[0], 1.5); },
                       { random_array({ 2, 3 }, 41) } } };
    c["relu"] = { { "relu(x) x",
                    [](tape<double>&, const vars& v) { return ops::relu(v[0]) * v[0]; },
                    { away_from_zero({ 2, 3 }, 9) } } };
    c["sqrt"] = { elementwise("sqrt", ops::sqrt<double>, positive({ 2, 3 }, 10)) };
    c["rsqrt"] = { elementwise("rsqrt", ops::rsqrt<double>, positive({ 2, 3 }, 11)) };
    c["pow"] = {
        { "x^3", [](tape<double>&, const vars& v) { return ops::pow(v[0], 3.0); }, { a23 } },
        { "x^2.5",
          [](tape<double>&, const vars& v) { return ops::pow(v[0], 2.5); },
          { positive({ 3 }, 12) } },
        { "x^0 * x", [](tape<double>&, const vars& v) { return ops::pow(v[0], 0.0) * v[0]; }, { a23 } }
    };
    c["sigmoid"] = { elementwise("sigmoid", ops::sigmoid<double>, random_array({ 2, 3 }, 13, -3, 3)) };
    c["gelu"] = { elementwise("gelu", ops::gelu<double>, random_array({ 2, 3 }, 14, -3, 3)) };
    c["erf"] = { elementwise("erf", ops::erf<double>, random_array({ 2, 3 }, 15, -2, 2)) };
    c["silu"] = { elementwise("silu", ops::silu<double>, random_array({ 2, 3 }, 16, -3, 3)) };
    c["gelu_exact"] = { elementwise(
      "gelu_exact", ops::gelu_exact<double>, random_array({ 2, 3 }, 17, -3, 3)) };
    c["swiglu"] = { { "(2,3)",
                      [](tape<double>&, const vars& v) { return ops::swiglu(v[0], v[1]); },
                      { random_array({ 2, 3 }, 18, -2, 2), a23 } } };

    const f64 x234 = random_array({ 2, 3, 4 }, 20);
    auto squared = [](const var<double>& x) { return x * x; }; // so that the second derivative is not 0
    c["sum"] = { { "all", [=](tape<double>&, const vars& v) { return ops::sum(squared(v[0])); }, { x234 } },
                 { "axis 1 kept",
                   [=](tape<double>&, const vars& v) { return squared(ops::sum(v[0], { 1 }, true)); },
                   { x234 } },
                 { "axes 0, 2",
                   [=](tape<double>&, const vars& v) {
                       return squared(ops::sum(v[0], { 0, 2 }));
                   },
                   { x234 } } };
    c["mean"] = {
        { "all", [=](tape<double>&, const vars& v) { return squared(ops::mean(v[0])); }, { x234 } },
        { "axis 2", [=](tape<double>&, const vars& v) { return squared(ops::mean(v[0], { 2 })); }, { x234 } }
    };
    c["max"] = {
        { "axis 1", [=](tape<double>&, const vars& v) { return squared(ops::max(v[0], 1)); }, { x234 } },
        { "axis 2 kept",
          [=](tape<double>&, const vars& v) { return squared(ops::max(v[0], 2, true)); },
          { x234 } }
    };
    c["variance"] = {
        { "axis 2", [](tape<double>&, const vars& v) { return ops::variance(v[0], { 2 }); }, { x234 } },
        { "axes 0, 1 kept",
          [](tape<double>&, const vars& v) {
              return ops::variance(v[0], { 0, 1 }, true);
          },
          { x234 } }
    };
    c["reshape"] = { { "(2,3,4) -> (4,-1)",
                       [=](tape<double>&, const vars& v) {
                           return squared(ops::reshape(v[0], { 4, -1 }));
                       },
                       { x234 } } };
    c["permute"] = { { "(2,0,1)",
                       [=](tape<double>&, const vars& v) {
                           return squared(ops::permute(v[0], { 2, 0, 1 }));
                       },
                       { x234 } } };
    c["transpose"] = { { "1, 2",
                         [=](tape<double>&, const vars& v) { return squared(ops::transpose(v[0], 1, 2)); },
                         { x234 } } };
    c["slice"] = { { "axis 2 [1, 3)",
                     [=](tape<double>&, const vars& v) { return squared(ops::slice(v[0], 2, 1, 3)); },
                     { x234 } },
                   { "axis 0 [0, 1)",
                     [=](tape<double>&, const vars& v) { return squared(ops::slice(v[0], 0, 0, 1)); },
                     { x234 } } };
    c["concat"] = { { "three parts, one reused",
                      [=](tape<double>&, const vars& v) {
                          return squared(ops::concat(vars{ v[0], v[1], v[0] }, 1));
                      },
                      { a23, random_array({ 2, 2 }, 21) } },
                    { "six parts (a tree of nodes)",
                      [=](tape<double>&, const vars& v) {
                          return squared(ops::concat(vars{ v[0], v[1], v[0], v[1], v[0], v[1] }, 0));
                      },
                      { b3, random_array({ 3 }, 22) } } };
    c["embedding"] = { { "repeated ids",
                         [=](tape<double>&, const vars& v) {
                             return squared(ops::embedding(v[0], make_ids({ 2, 3 }, { 1, 0, 1, 3, 1, 0 })));
                         },
                         { random_array({ 4, 2 }, 23) } } };

    auto mm = [](bool ta, bool tb)
    {
        return [ta, tb](tape<double>&, const vars& v)
        { return ops::matmul(ops::matmul(v[0], v[1], ta, tb), v[1], false, !tb); };
    };
    c["matmul"] = {
        { "plain", mm(false, false), { random_array({ 2, 3 }, 24), random_array({ 3, 3 }, 25) } },
        { "transpose a", mm(true, false), { random_array({ 3, 2 }, 26), random_array({ 3, 3 }, 27) } },
        { "transpose b", mm(false, true), { random_array({ 2, 3 }, 28), random_array({ 3, 3 }, 29) } },
        { "both", mm(true, true), { random_array({ 3, 2 }, 30), random_array({ 3, 3 }, 31) } },
        { "batch broadcast (2,1,3,4) @ (3,4,2)",
          [](tape<double>&, const vars& v)
          {
              const var<double> y = ops::matmul(v[0], v[1]);
              return y * y;
          },
          { random_array({ 2, 1, 3, 4 }, 32), random_array({ 3, 4, 2 }, 33) } },
        { "reused x x^T",
          [](tape<double>&, const vars& v) { return ops::matmul(v[0], v[0], false, true); },
          { random_array({ 3, 2 }, 34) } }
    };

    const mask_t rows_mask = mask_with_empty_row();
    const f64 scores = random_array({ 2, 3, 4 }, 35, -2, 2);
    c["softmax"] = {
        { "scale 0.7", [](tape<double>&, const vars& v) { return ops::softmax(v[0], 0.7); }, { scores } },
        { "size 1 axis",
          [](tape<double>&, const vars& v) { return ops::softmax(v[0] * v[0]); },
          { random_array({ 3, 1 }, 36) } }
    };
    c["masked_softmax"] = { { "a fully masked row",
                              [rows_mask](tape<double>&, const vars& v)
                              { return ops::masked_softmax(v[0], rows_mask, 1.5); },
                              { scores } } };
    c["log_softmax"] = {
        { "(2,3,4)", [](tape<double>&, const vars& v) { return ops::log_softmax(v[0]); }, { scores } }
    };
    c["cross_entropy"] = { { "ignored targets",
                             [](tape<double>&, const vars& v) {
                                 return ops::cross_entropy(v[0], make_ids({ 2, 3 }, { 1, -1, 3, 0, -1, 2 }));
                             },
                             { scores } },
                           { "every target ignored",
                             [](tape<double>&, const vars& v) {
                                 return ops::cross_entropy(v[0],
                                                           make_ids({ 2, 3 }, { -1, -1, -1, -1, -1, -1 })) +
                                        ops::sum(v[0] * v[0]);
                             },
                             { scores } } };
    const f64 w4 = random_array({ 4 }, 37, 0.5, 1.5), b4 = random_array({ 4 }, 38);
    c["layer_norm"] = { { "(2,3,4)",
                          [](tape<double>&, const vars& v) { return ops::layer_norm(v[0], v[1], v[2]); },
                          { scores, w4, b4 } } };
    c["rms_norm"] = {
        { "(2,3,4)", [](tape<double>&, const vars& v) { return ops::rms_norm(v[0], v[1]); }, { scores, w4 } }
    };
    const f64 x_lin = random_array({ 2, 3, 4 }, 39), w_lin = random_array({ 4, 3 }, 40),
              b_lin = random_array({ 3 }, 41);
    c["linear"] = { { "(2,3,4) (4,3) (3)",
                      [](tape<double>&, const vars& v)
                      {
                          const var<double> y = ops::linear(v[0], v[1], v[2]);
                          return y * y;
                      },
                      { x_lin, w_lin, b_lin } } };
    c["linear_gelu"] = { { "(2,3,4) (4,3) (3)",
                           [](tape<double>&, const vars& v) { return ops::linear_gelu(v[0], v[1], v[2]); },
                           { x_lin, w_lin, b_lin } } };
    c["linear_gelu_exact"] = { { "(2,3,4) (4,3) (3)",
                                 [](tape<double>&, const vars& v)
                                 { return ops::linear_gelu_exact(v[0], v[1], v[2]); },
                                 { x_lin, w_lin, b_lin } } };
    c["dropout"] = { { "p 0.4",
                       [](tape<double>&, const vars& v)
                       {
                           std::mt19937_64 generator(3); // the same mask on every call
                           return ops::dropout(v[0] * v[0], 0.4, generator);
                       },
                       { a23 } } };
    c["rope"] = { { "offset 2",
                    [](tape<double>&, const vars& v) { return ops::rope(v[0] * v[0], 100.0, 2); },
                    { random_array({ 1, 2, 3, 4 }, 42) } } };

    const f64 q = random_array({ 1, 2, 3, 2 }, 43), k = random_array({ 1, 1, 3, 2 }, 44),
              v3 = random_array({ 1, 1, 3, 2 }, 45);
    mask_t padding = mask_t::from_shape({ 1, 1, 3, 3 });
    padding.fill(true);
    for (std::size_t j = 0; j < 3; ++j)
    {
        padding(0, 0, 2, j) = false; // query 2 sees no key
    }
    c["attention"] = {
        { "GQA, causal",
          [](tape<double>&, const vars& v) { return ops::attention(v[0], v[1], v[2], nullptr, true); },
          { q, k, v3 } },
        { "a fully masked row",
          [padding](tape<double>&, const vars& v) { return ops::attention(v[0], v[1], v[2], &padding); },
          { q, k, v3 } },
        { "reused x as q, k, v",
          [](tape<double>&, const vars& v) { return ops::attention(v[0], v[0], v[0]); },
          { random_array({ 1, 1, 3, 2 }, 46) } },
        { "GQA, causal, window 2",
          [](tape<double>&, const vars& v) { return ops::attention(v[0], v[1], v[2], nullptr, true, 2); },
          { q, k, v3 } }
    };
    // The NumPy-shaped ops (ops/elementwise_numpy.cpp, ops/select.cpp, ops/gather.cpp); abs, relu-like
    // kinks and ties kept away from the inputs.
    c["abs"] = { { "abs(x) x", [](tape<double>&, const vars& v) { return ops::abs(v[0]) * v[0]; },
                   { away_from_zero({ 2, 3 }, 60) } } };
    c["sin"] = { elementwise("sin", ops::sin<double>, a23) };
    c["cos"] = { elementwise("cos", ops::cos<double>, a23) };
    c["clip"] = { { "clip(x, -0.5, 0.5) x",
                    [](tape<double>&, const vars& v) { return ops::clip(v[0], -0.5, 0.5) * v[0]; },
                    { random_away_from_zero({ 2, 3 }, 61, 0.6) } } };
    c["maximum"] = { { "(2,3) and (3)",
                       [](tape<double>&, const vars& v) { return ops::maximum(v[0], v[1]) * v[0]; },
                       { random_array({ 2, 3 }, 62), random_array({ 3 }, 63) } } };
    c["minimum"] = { { "(2,3) and (3)",
                       [](tape<double>&, const vars& v) { return ops::minimum(v[0], v[1]) * v[1]; },
                       { random_array({ 2, 3 }, 64), random_array({ 3 }, 65) } } };
    c["where"] = { { "mask (2,1), (2,3) and (3)",
                     [](tape<double>&, const vars& v) {
                         return ops::where(random_mask({ 2, 1 }, 66, 0.5), v[0] * v[0], v[1] * v[0]);
                     },
                     { random_array({ 2, 3 }, 67), random_array({ 3 }, 68) } } };
    c["take"] = { { "repeated positions",
                    [](tape<double>&, const vars& v) {
                        const auto taken = ops::take(v[0], make_ids({ 2, 2 }, { 5, 0, 5, 3 }));
                        return taken * taken;
                    },
                    { random_array({ 2, 3 }, 69) } } };
    c["scatter_add"] = { { "repeated positions",
                           [](tape<double>&, const vars& v) {
                               const auto added = ops::scatter_add(v[0], make_ids({ 2, 2 }, { 5, 0, 5, 3 }),
                                                                   shape_t{ 2, 3 });
                               return added * added;
                           },
                           { random_array({ 2, 2 }, 70) } } };
    c["attention_token_major"] = {
        { "H 2, G 1, causal",
          [](tape<double>&, const vars& v)
          { return ops::attention_token_major(v[0], v[1], v[2], 2, 1, nullptr, true); },
          { random_array({ 1, 3, 4 }, 47), random_array({ 1, 3, 2 }, 48), random_array({ 1, 3, 2 }, 49) } },
        { "H 2, G 1, causal, window 2",
          [](tape<double>&, const vars& v)
          { return ops::attention_token_major(v[0], v[1], v[2], 2, 1, nullptr, true, 2); },
          { random_array({ 1, 3, 4 }, 47), random_array({ 1, 3, 2 }, 48), random_array({ 1, 3, 2 }, 49) } }
    };
    return c;
}

// The names of the ops declared in ops/*.hpp (namespace ops; not the composed twins).
std::set<std::string> declared_ops()
{
    std::set<std::string> names;
    const std::regex declaration(R"(template\s*<class T>\s*var<T>\s+(\w+)\s*\()");
    for (const auto& entry :
         std::filesystem::directory_iterator(std::filesystem::path(xgrad::test::source_dir()) / "ops"))
    {
        if (entry.path().extension() != ".hpp" || entry.path().filename() == "composed.hpp")
        {
            continue;
        }
        const std::string text = read_bytes(entry.path().string());
        for (std::sregex_iterator it(text.begin(), text.end(), declaration), end; it != end; ++it)
        {
            names.insert((*it)[1]);
        }
    }
    return names;
}
} // namespace

TEST_CASE("gradgradcheck: every op declared in ops/ has a case here")
{
    const auto table = cases();
    const std::set<std::string> declared = declared_ops();
    CHECK(declared.count("matmul") == 1); // the parse finds the ops
    for (const std::string& name : declared)
    {
        CHECK_MESSAGE(table.count(name) == 1,
                      "op '" << name << "' has no gradgradcheck case in " << __FILE__);
    }
}

TEST_CASE("gradgradcheck: every op, twice differentiable")
{
    for (const auto& [name, list] : cases())
    {
        for (const gg_case& c : list)
        {
            CAPTURE(name);
            CAPTURE(c.what);
            const gradcheck_report report = gradgradcheck(c.f, c.inputs);
            CHECK_MESSAGE(report.ok, name << " (" << c.what << ")\n" << report.summary());
            CHECK(report.inputs.size() == c.inputs.size() + 1);
        }
    }
}

TEST_CASE("gradgradcheck: the fused ops' second derivatives equal their composed twins'")
{
    // H v of sum(op(x) * G) through the fused op and through its composition, on the same point.
    const f64 X = random_array({ 2, 3, 4 }, 60), V = random_array({ 2, 3, 4 }, 61),
              G = random_array({ 2, 3, 4 }, 62);
    auto hvp_of = [&](auto op)
    {
        tape<double> t;
        const var<double> x = t.input(X);
        const var<double> gx = grad(ops::sum(op(x) * t.constant(G)), { x }, create_graph)[0];
        return array<double>(grad(ops::sum(gx * t.constant(V)), { x })[0].value());
    };
    XGRAD_CHECK_CLOSE(hvp_of([](const var<double>& x) { return ops::gelu(x); }),
                      hvp_of([](const var<double>& x) { return ops::composed::gelu(x); }),
                      1e-12,
                      1e-13);
    XGRAD_CHECK_CLOSE(hvp_of([](const var<double>& x) { return ops::log_softmax(x); }),
                      hvp_of([](const var<double>& x) { return ops::composed::log_softmax(x); }),
                      1e-12,
                      1e-13);
    XGRAD_CHECK_CLOSE(hvp_of([](const var<double>& x) { return ops::softmax(x, 0.5); }),
                      hvp_of(
                        [](const var<double>& x)
                        {
                            const var<double> e = ops::exp(ops::scale(x, 0.5));
                            return e / ops::sum(e, { 2 }, true);
                        }),
                      1e-12,
                      1e-13);
}
}  // namespace test_gradgrad_ops
