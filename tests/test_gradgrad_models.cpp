// Second order on whole models: Hessian-vector products of MHA (composed and fused) and of two-layer GPTs
// (default and Llama variant) against PyTorch's double backward (tests/fixtures/make_hvp_fixtures.py),
// Hessian symmetry, a hand-derived Hessian-vector product of cross-entropy over a linear layer, and
// first_divergence on second-order gradients.
#include <filesystem>
#include <map>

#include "autodiff/grad.hpp"
#include "io/checkpoint.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "models/divergence.hpp"
#include "models/gpt.hpp"
#include "models/mha.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"

namespace test_gradgrad_models
{
using namespace xgrad;
using namespace xgrad::test;
namespace fs = std::filesystem;

namespace
{
const fs::path fixtures = fs::path(xgrad::test::source_dir()) / "tests" / "data";

std::string first_line(const std::string& text)
{
    return text.substr(0, text.find('\n'));
}

// max |a - b| / max |b|: the relative error of a whole tensor.
double relative_error(const f64& actual, const f64& expected)
{
    REQUIRE(actual.shape() == expected.shape());
    return max_abs(f64(actual - expected)) / std::max(max_abs(expected), 1e-300);
}

// <a, b> summed over every input.
double dot(const std::vector<f64>& a, const std::vector<f64>& b)
{
    double s = 0;
    for (std::size_t k = 0; k < a.size(); ++k)
    {
        s += xt::sum(a[k] * b[k])();
    }
    return s;
}

// H v for a loss of `inputs` (vars on the loss's tape): one recorded backward, one more through it.
std::vector<f64> hessian_times(const var<double>& loss,
                               const std::vector<var<double>>& inputs,
                               const std::vector<f64>& vectors)
{
    const std::vector<var<double>> g = grad(loss, inputs, create_graph);
    var<double> g_dot_v = ops::sum(g[0] * constant_like(loss, vectors[0]));
    for (std::size_t k = 1; k < g.size(); ++k)
    {
        g_dot_v = g_dot_v + ops::sum(g[k] * constant_like(loss, vectors[k]));
    }
    std::vector<f64> products;
    for (const var<double>& hv : grad(g_dot_v, inputs))
    {
        products.push_back(hv.value());
    }
    return products;
}

// ---- MHA ----

const std::vector<std::string> mha_names = { "X", "W_Q", "W_K", "W_V", "W_O" };

var<double> mha_loss(tape<double>& t,
                     const std::vector<var<double>>& in,
                     const mask_t& mask,
                     const f64& G,
                     bool fused)
{
    const models::mha_config config{ 8, 4, 2 };
    const models::mha_weights<double> w{ in[1], in[2], in[3], in[4] };
    models::mha_options options;
    options.mask = &mask;
    options.causal = true;
    options.fused = fused;
    return ops::sum(models::self_attention(in[0], w, config, options).output * t.constant(G));
}

f64 load(const std::string& name)
{
    return npy::load_float<double>((fixtures / "hvp_fixtures" / "mha" / (name + ".npy")).string());
}

// ---- GPT ----

struct gpt_case
{
    io::checkpoint<double> checkpoint;
    ids_t tokens, targets;
    std::map<std::string, f64> vectors, expected;
};

gpt_case load_gpt(const std::string& name)
{
    const fs::path dir = fixtures / "hvp_fixtures" / name;
    const fs::path source = fixtures / first_line(read_bytes((dir / "source.txt").string()));
    gpt_case c{ io::load_checkpoint<double>((source / "model.safetensors").string()),
                npy::load_ids((source / "in" / "tokens.npy").string()),
                npy::load_ids((source / "in" / "targets.npy").string()),
                {},
                {} };
    for (auto& [key, stored] : io::read_safetensors((dir / "vectors.safetensors").string()).tensors)
    {
        c.vectors[key] = std::move(stored.values);
    }
    for (auto& [key, stored] : io::read_safetensors((dir / "hvp.safetensors").string()).tensors)
    {
        c.expected[key] = std::move(stored.values);
    }
    return c;
}

// The GPT's loss on a fresh tape, its parameters' leaves and their names.
struct gpt_graph
{
    var<double> loss;
    std::vector<std::string> names;
    std::vector<var<double>> leaves;
};

gpt_graph gpt_loss(tape<double>& t, const gpt_case& c, bool fused)
{
    models::gpt_options options;
    options.fused = fused;
    gpt_graph g{ models::gpt_forward(t, c.checkpoint.params, c.tokens, &c.targets, options).loss, {}, {} };
    for (const auto& [name, leaf] : parameter_leaves(g.loss))
    {
        g.names.push_back(name);
        g.leaves.push_back(leaf);
    }
    return g;
}
} // namespace

TEST_CASE("second order: MHA's H v equals PyTorch's double backward (composed and fused)")
{
    std::vector<f64> inputs, vectors, expected;
    for (const auto& name : mha_names)
    {
        inputs.push_back(load(name));
        vectors.push_back(load("v_" + name));
        expected.push_back(load("hvp_" + name));
    }
    const mask_t mask = npy::load_bool((fixtures / "hvp_fixtures" / "mha" / "mask.npy").string());
    const f64 G = load("G");
    for (const bool fused : { false, true })
    {
        CAPTURE(fused);
        tape<double> t;
        std::vector<var<double>> in;
        for (const f64& a : inputs)
        {
            in.push_back(t.input(a));
        }
        const std::vector<f64> products = hessian_times(mha_loss(t, in, mask, G, fused), in, vectors);
        for (std::size_t k = 0; k < in.size(); ++k)
        {
            CAPTURE(mha_names[k]);
            CHECK(relative_error(products[k], expected[k]) < 1e-12);
        }
    }
}

TEST_CASE("second order: a two-layer GPT's H v equals PyTorch's (default and Llama; fused and composed)")
{
    for (const std::string name : { "gpt_default", "gpt_llama" })
    {
        const gpt_case c = load_gpt(name);
        for (const bool fused : { true, false })
        {
            CAPTURE(name);
            CAPTURE(fused);
            tape<double> t;
            const gpt_graph g = gpt_loss(t, c, fused);
            REQUIRE(g.names.size() == c.expected.size());
            std::vector<f64> vectors;
            for (const auto& n : g.names)
            {
                vectors.push_back(c.vectors.at(n));
            }
            const std::vector<f64> products = hessian_times(g.loss, g.leaves, vectors);
            for (std::size_t k = 0; k < products.size(); ++k)
            {
                CAPTURE(g.names[k]);
                CHECK(relative_error(products[k], c.expected.at(g.names[k])) < 1e-11);
            }
        }
    }
}

TEST_CASE("second order: Hessian symmetry u^T H v = v^T H u on MHA and a small GPT")
{
    SUBCASE("MHA")
    {
        std::vector<f64> inputs, u, v;
        for (std::size_t k = 0; k < mha_names.size(); ++k)
        {
            inputs.push_back(load(mha_names[k]));
            u.push_back(random_array(to_shape(inputs[k].shape()), 70 + k));
            v.push_back(random_array(to_shape(inputs[k].shape()), 80 + k));
        }
        const mask_t mask = npy::load_bool((fixtures / "hvp_fixtures" / "mha" / "mask.npy").string());
        for (const bool fused : { false, true })
        {
            auto H = [&](const std::vector<f64>& w)
            {
                tape<double> t;
                std::vector<var<double>> in;
                for (const f64& a : inputs)
                {
                    in.push_back(t.input(a));
                }
                return hessian_times(mha_loss(t, in, mask, load("G"), fused), in, w);
            };
            const double uHv = dot(u, H(v)), vHu = dot(v, H(u));
            CHECK(std::abs(uHv - vHu) <= 1e-10 * std::abs(uHv));
        }
    }
    SUBCASE("GPT")
    {
        const gpt_case c = load_gpt("gpt_llama");
        tape<double> t;
        const gpt_graph g = gpt_loss(t, c, true);
        std::vector<f64> u, v;
        for (std::size_t k = 0; k < g.leaves.size(); ++k)
        {
            u.push_back(random_array(g.leaves[k].shape(), 90 + k));
            v.push_back(random_array(g.leaves[k].shape(), 190 + k));
        }
        const std::vector<var<double>> grads = grad(g.loss, g.leaves, create_graph);
        auto H = [&](const std::vector<f64>& w) { // the recorded gradient, differentiated once per vector
            var<double> g_dot_w = ops::sum(grads[0] * t.constant(w[0]));
            for (std::size_t k = 1; k < grads.size(); ++k)
            {
                g_dot_w = g_dot_w + ops::sum(grads[k] * t.constant(w[k]));
            }
            std::vector<f64> out;
            for (const var<double>& h : grad(g_dot_w, g.leaves, grad_options().retain_graph()))
            {
                out.push_back(h.value());
            }
            return out;
        };
        const double uHv = dot(u, H(v)), vHu = dot(v, H(u));
        CHECK(std::abs(uHv - vHu) <= 1e-10 * std::abs(uHv));
    }
}

namespace
{
// ---- the hand-derived side ----
//
// Cross-entropy over a linear layer: z = x W (rows r = 1..N, classes V), p_r = softmax(z_r), and
// L = (1/n) sum_{kept r} (lse(z_r) - z_{r, t_r}), n the number of kept rows.
//
// First order: dL/dz_r = (p_r - e_{t_r}) / n on kept rows, 0 on ignored ones.
// Second order, per kept row: d^2 L / dz_r^2 = (diag(p_r) - p_r p_r^T) / n (the softmax's Jacobian; the
// one-hot term is constant), and rows do not mix. So for a direction r_z of z:
//     (H_z r_z)_r = (p_r * r_{z,r} - p_r (p_r . r_{z,r})) / n.
// Through the linear layer, with directions (u_x, u_W) of (x, W): z moves by r_z = u_x W + x u_W, and
//     H v for W:  x^T (H_z r_z) + u_x^T dL/dz      (the second term: d/dx of x^T dL/dz, moved by u_x)
//     H v for x:  (H_z r_z) W^T + dL/dz u_W^T      (likewise, W's own move)
struct hand_hvp
{
    f64 hz_rz, hv_W, hv_x; // in backward order: H_z r_z first, then the parameters'
};

hand_hvp cross_entropy_linear_hvp(const f64& x,
                                  const f64& W,
                                  const ids_t& targets,
                                  const f64& u_x,
                                  const f64& u_W,
                                  bool forget_outer_product)
{
    const f64 z = ref_matmul(x, W, false, false);
    const f64 r_z = f64(ref_matmul(u_x, W, false, false) + ref_matmul(x, u_W, false, false));
    const std::size_t N = z.shape()[0], V = z.shape()[1];
    std::size_t n = 0;
    for (std::size_t r = 0; r < N; ++r)
    {
        n += targets(r) != -1;
    }
    f64 dz = xt::zeros<double>({ N, V }), hz = xt::zeros<double>({ N, V });
    for (std::size_t r = 0; r < N; ++r)
    {
        if (targets(r) == -1)
        {
            continue;
        }
        double top = z(r, 0), total = 0, p_dot_r = 0;
        for (std::size_t j = 1; j < V; ++j)
        {
            top = std::max(top, z(r, j));
        }
        std::vector<double> p(V);
        for (std::size_t j = 0; j < V; ++j)
        {
            total += p[j] = std::exp(z(r, j) - top);
        }
        for (std::size_t j = 0; j < V; ++j)
        {
            p[j] /= total;
            p_dot_r += p[j] * r_z(r, j);
        }
        for (std::size_t j = 0; j < V; ++j)
        {
            dz(r, j) = (p[j] - (static_cast<std::int64_t>(j) == targets(r) ? 1.0 : 0.0)) / double(n);
            hz(r, j) = (p[j] * r_z(r, j) - (forget_outer_product ? 0.0 : p[j] * p_dot_r)) / double(n);
        }
    }
    return { hz,
             f64(ref_matmul(x, hz, true, false) + ref_matmul(u_x, dz, true, false)),
             f64(ref_matmul(hz, W, false, true) + ref_matmul(dz, u_W, false, true)) };
}

models::named_gradients<double> by_hand(const hand_hvp& h)
{
    return { { "H_z r_z", h.hz_rz }, { "Hv W", h.hv_W }, { "Hv x", h.hv_x } };
}
} // namespace

TEST_CASE("second order: the hand-derived H v of cross-entropy over a linear layer equals the tape's")
{
    const f64 x = random_array({ 5, 3 }, 1), W = random_array({ 3, 4 }, 2), u_x = random_array({ 5, 3 }, 3),
              u_W = random_array({ 3, 4 }, 4);
    const ids_t targets = make_ids({ 5 }, { 2, -1, 0, 3, 3 });
    tape<double> t;
    const var<double> xv = t.input(x), Wv = t.input(W);
    const var<double> z = ops::matmul(xv, Wv);
    const var<double> loss = ops::cross_entropy(z, targets);
    // The tape's side, named as by_hand names them: H_z r_z is the second backward's gradient at z.
    const std::vector<var<double>> g = grad(loss, { xv, Wv, z }, create_graph);
    const var<double> r_z = ops::matmul(t.constant(u_x), Wv) + ops::matmul(xv, t.constant(u_W));
    const f64 hz =
      grad(ops::sum(g[2] * t.constant(r_z.value())), { z }, grad_options().retain_graph())[0].value();
    const std::vector<var<double>> hv =
      grad(ops::sum(g[0] * t.constant(u_x)) + ops::sum(g[1] * t.constant(u_W)), { xv, Wv });
    const models::named_gradients<double> taped = { { "H_z r_z", hz },
                                                    { "Hv W", hv[1].value() },
                                                    { "Hv x", hv[0].value() } };

    const models::divergence_report right =
      models::first_divergence(taped, by_hand(cross_entropy_linear_hvp(x, W, targets, u_x, u_W, false)));
    CHECK_MESSAGE(!right.diverged(), right.to_string());
    // A hand derivation that forgets the softmax's outer product goes wrong at H_z r_z, and first_divergence
    // names it.
    const models::divergence_report wrong =
      models::first_divergence(taped, by_hand(cross_entropy_linear_hvp(x, W, targets, u_x, u_W, true)));
    REQUIRE(wrong.diverged());
    CHECK(wrong.first_divergence()->name == "H_z r_z");
}
}  // namespace test_gradgrad_models
