// The variants' hand-derived layers (models/manual_layers.hpp) against the tape: each *_forward gives the
// fused op's value and each *_backward the tape's gradients (the fused ops, themselves checked against
// central differences), to 1e-12 in float64 and 1e-5 in float32, on shapes with size 1, T = 1, dh = 2;
// causal self-attention with and without biases and rotary embedding, for G = H, G < H and G = 1; and the
// errors naming the layer and the shapes.
#include <doctest/doctest.h>

#include "models/manual_faults.hpp"
#include "models/manual_layers.hpp"
#include "models/mha.hpp"
#include "test_util.hpp"

namespace test_manual_layers
{
using namespace xgrad;
using namespace xgrad::test;
namespace manual = xgrad::models::manual;

namespace
{
// Values close to rtol, with an absolute floor of rtol times the largest entry, or times `floor` if that
// is larger (for gradients that are 0 but for rounding, such as b_K's: softmax ignores a shift of a row).
template <class T>
void check_close(const array<T>& actual, const array<T>& expected, double rtol, double floor = 0)
{
    XGRAD_CHECK_CLOSE(actual, expected, rtol, rtol * std::max(max_abs(expected), floor));
}

template <class T>
double tolerance()
{
    return sizeof(T) == 8 ? 1e-12 : 2e-5;
}

// The tape's value and gradients of f at `inputs`, backward seeded with G.
template <class T>
std::pair<array<T>, std::vector<array<T>>> on_tape(
    const std::function<var<T>(const std::vector<var<T>>&)>& f, const std::vector<array<T>>& inputs,
    const array<T>& G)
{
    tape<T> t;
    std::vector<var<T>> xs;
    for (const auto& x : inputs)
    {
        xs.push_back(t.input(x));
    }
    const var<T> y = f(xs);
    t.backward(y, G);
    std::vector<array<T>> grads;
    for (const auto& x : xs)
    {
        grads.push_back(x.grad());
    }
    return {y.value(), grads};
}

template <class T>
array<T> random_of(const shape_t& shape, unsigned seed, double lo = -1.0, double hi = 1.0)
{
    return to_float_type<T>(random_array(shape, seed, lo, hi));
}

const std::vector<shape_t> row_shapes = {{1, 1, 1}, {1, 1, 2}, {2, 3, 8}, {1, 5, 33}};
}  // namespace

TEST_CASE_TEMPLATE("rmsnorm_forward and rmsnorm_backward equal the tape's rms_norm", T, double, float)
{
    unsigned seed = 1;
    for (const auto& shape : row_shapes)
    {
        CAPTURE(shape_str(shape));
        const array<T> x = random_of<T>(shape, seed, -2.0, 2.0), w = random_of<T>({shape.back()}, seed + 1, 0.5, 1.5);
        const array<T> G = random_of<T>(shape, seed + 2);
        seed += 3;
        manual::rmsnorm_cache<T> cache;
        const array<T> y = manual::rmsnorm_forward(x, w, cache);
        const auto g = manual::rmsnorm_backward(G, cache, w);
        const auto [value, grads] = on_tape<T>([](const auto& v) { return ops::rms_norm(v[0], v[1]); }, {x, w}, G);
        check_close(y, value, tolerance<T>());
        check_close(g.x, grads[0], tolerance<T>());
        check_close(g.weight, grads[1], tolerance<T>());
    }
}

TEST_CASE_TEMPLATE("rope_forward and rope_backward equal the tape's rope, offsets and bases", T, double, float)
{
    const std::vector<shape_t> shapes = {{1, 1, 1, 2}, {2, 3, 1, 6}, {2, 2, 5, 2}, {1, 4, 6, 8}};
    unsigned seed = 20;
    for (const auto& shape : shapes)
    {
        for (std::size_t offset : {0, 9})
        {
            for (double base : {10000.0, 2.5})
            {
                CAPTURE(shape_str(shape));
                CAPTURE(offset);
                const array<T> x = random_of<T>(shape, seed), G = random_of<T>(shape, seed + 1);
                seed += 2;
                const auto [value, grads] =
                    on_tape<T>([&](const auto& v) { return ops::rope(v[0], base, offset); }, {x}, G);
                check_close(manual::rope_forward(x, base, offset), value, tolerance<T>());
                check_close(manual::rope_backward(G, base, offset), grads[0], tolerance<T>());
            }
        }
    }
}

TEST_CASE_TEMPLATE("gelu_exact and swiglu pairs equal the tape's ops, large values included", T, double, float)
{
    unsigned seed = 40;
    for (const auto& shape : row_shapes)
    {
        for (double scale : {1.0, 12.0})
        {
            CAPTURE(shape_str(shape));
            CAPTURE(scale);
            const array<T> a = random_of<T>(shape, seed, -scale, scale), b = random_of<T>(shape, seed + 1);
            const array<T> G = random_of<T>(shape, seed + 2);
            seed += 3;
            const auto gelu = on_tape<T>([](const auto& v) { return ops::gelu_exact(v[0]); }, {a}, G);
            check_close(manual::gelu_exact_forward(a), gelu.first, tolerance<T>());
            check_close(manual::gelu_exact_backward(G, a), gelu.second[0], tolerance<T>());
            const auto glu = on_tape<T>([](const auto& v) { return ops::swiglu(v[0], v[1]); }, {a, b}, G);
            const auto g = manual::swiglu_backward(G, a, b);
            check_close(manual::swiglu_forward(a, b), glu.first, tolerance<T>());
            check_close(g.gate, glu.second[0], tolerance<T>());
            check_close(g.up, glu.second[1], tolerance<T>());
        }
    }
}

TEST_CASE_TEMPLATE("head_rms, relu2 and softcap pairs equal the tape's compositions and op", T, double, float)
{
    unsigned seed = 60;
    for (const auto& shape : row_shapes)
    {
        CAPTURE(shape_str(shape));
        const array<T> x = random_of<T>(shape, seed, -3.0, 3.0), G = random_of<T>(shape, seed + 1);
        seed += 2;
        // QK-norm: x / sqrt(mean(x^2) + 1e-5) per row, composed of primitives on the tape
        const auto norm = on_tape<T>(
            [](const auto& v) {
                const var<T> ms = ops::mean(v[0] * v[0], {v[0].shape().size() - 1}, true);
                return v[0] * ops::rsqrt(ops::add_scalar(ms, T(1e-5)));
            },
            {x}, G);
        manual::head_rms_cache<T> cache;
        check_close(manual::head_rms_forward(x, cache), norm.first, tolerance<T>());
        check_close(manual::head_rms_backward(G, cache), norm.second[0], tolerance<T>(), 1.0);  // 0 at dh = 1
        // relu(x)^2
        const auto relu2 = on_tape<T>([](const auto& v) { return ops::relu(v[0]) * ops::relu(v[0]); }, {x}, G);
        check_close(manual::relu2_forward(x), relu2.first, tolerance<T>());
        check_close(manual::relu2_backward(G, x), relu2.second[0], tolerance<T>());
        // c tanh(x / c), against tanh and scale on the tape
        for (double cap : {0.5, 30.0})
        {
            const auto capped = on_tape<T>(
                [cap](const auto& v) { return ops::scale(ops::tanh(ops::scale(v[0], T(1 / cap))), T(cap)); }, {x}, G);
            const array<T> y = manual::softcap_forward(x, cap);
            check_close(y, capped.first, tolerance<T>());
            check_close(manual::softcap_backward(G, y, cap), capped.second[0], tolerance<T>());
        }
        // Caps far below the logits (1 / c^2 overflows float32 below about 5e-20): the op and the pair
        // agree and stay finite, the derivative 1 - tanh^2 being 0 wherever |x| >> c.
        for (double cap : {1e-20, 1e-30})
        {
            CAPTURE(cap);
            const auto capped = on_tape<T>([cap](const auto& v) { return ops::softcap(v[0], cap); }, {x}, G);
            const array<T> y = manual::softcap_forward(x, cap);
            check_close(y, capped.first, tolerance<T>());
            CHECK(test::all_finite(capped.second[0]));
            check_close(manual::softcap_backward(G, y, cap), capped.second[0], tolerance<T>());
        }
    }
}

TEST_CASE_TEMPLATE("linear_forward and linear_backward, with and without a bias, equal the tape", T, double, float)
{
    const array<T> x = random_of<T>({2, 3, 4}, 60), w = random_of<T>({4, 5}, 61), b = random_of<T>({5}, 62);
    const array<T> G = random_of<T>({2, 3, 5}, 63);
    for (bool with_bias : {true, false})
    {
        CAPTURE(with_bias);
        const auto [value, grads] = on_tape<T>(
            [&](const auto& v) { return with_bias ? ops::add(ops::matmul(v[0], v[1]), v[2]) : ops::matmul(v[0], v[1]); },
            {x, w, b}, G);
        const auto g = manual::linear_backward(G, x, w, with_bias);
        check_close(manual::linear_forward(x, w, with_bias ? &b : nullptr), value, tolerance<T>());
        check_close(g.x, grads[0], tolerance<T>());
        check_close(g.w, grads[1], tolerance<T>());
        if (with_bias)
        {
            check_close(g.b, grads[2], tolerance<T>());
            check_close(manual::bias_backward(G), grads[2], tolerance<T>());
        }
        else
        {
            CHECK(g.b.dimension() == 0);  // not computed
        }
    }
}

namespace
{
// Causal self-attention on the tape, from ops: the composition the manual pair must match.
// v: x, W_Q, W_K, W_V, W_O, then b_Q, b_K, b_V, b_O when `bias`.
template <class T>
var<T> attention_on_tape(const std::vector<var<T>>& v, const models::mha_config& config, bool bias,
                         const manual::attention_variant& variant)
{
    const auto project = [&](std::size_t w, std::size_t b) {
        const var<T> p = ops::matmul(v[0], v[w]);
        return bias ? ops::add(p, v[b]) : p;
    };
    var<T> q = models::split_heads(project(1, 5), config.heads);
    var<T> k = models::split_heads(project(2, 6), config.kv_head_count());
    const var<T> vv = models::split_heads(project(3, 7), config.kv_head_count());
    if (variant.qk_norm)  // x / sqrt(mean(x^2) + 1e-5) per head vector
    {
        const auto normalised = [](const var<T>& x) {
            return x * ops::rsqrt(ops::add_scalar(ops::mean(x * x, {3}, true), T(1e-5)));
        };
        q = normalised(q);
        k = normalised(k);
    }
    if (variant.rope)
    {
        q = ops::rope(q, variant.rope_base, variant.position_offset);
        k = ops::rope(k, variant.rope_base, variant.position_offset);
    }
    const var<T> y = ops::matmul(models::combine_heads(ops::attention(q, k, vv, nullptr, true, variant.window)), v[4]);
    return bias ? ops::add(y, v[8]) : y;
}
}  // namespace

TEST_CASE_TEMPLATE("causal_self_attention pair equals the tape: biases, rope, QK-norm, windows, G = H, G < H, "
                   "G = 1, T = 1", T, double, float)
{
    struct attention_case
    {
        std::size_t heads, groups, length;
        bool bias, rope;
        bool qk_norm = false;
        std::size_t window = 0;
    };
    const std::size_t d = 8;
    const std::vector<attention_case> cases = {
        {2, 2, 5, false, false}, {2, 2, 5, true, false}, {2, 2, 5, false, true}, {4, 2, 6, true, true},
        {4, 1, 4, false, true},  {2, 2, 1, true, true},  {4, 2, 1, false, true},
        {2, 2, 5, true, false, true}, {4, 2, 6, false, true, true, 2}, {2, 1, 5, true, false, false, 1},
        {4, 2, 6, true, true, false, 3},
    };
    unsigned seed = 80;
    for (const auto& c : cases)
    {
        for (std::size_t offset : {0, 3})
        {
            CAPTURE(c.heads);
            CAPTURE(c.groups);
            CAPTURE(c.length);
            CAPTURE(c.bias);
            CAPTURE(c.rope);
            CAPTURE(offset);
            const models::mha_config config{d, c.heads, c.groups};
            const std::size_t kv = c.groups * (d / c.heads);
            CAPTURE(c.qk_norm);
            CAPTURE(c.window);
            const manual::attention_variant variant{c.rope, 500.0, offset, c.window, c.qk_norm};
            std::vector<array<T>> inputs = {random_of<T>({2, c.length, d}, seed), random_of<T>({d, d}, seed + 1),
                                            random_of<T>({d, kv}, seed + 2), random_of<T>({d, kv}, seed + 3),
                                            random_of<T>({d, d}, seed + 4)};
            if (c.bias)
            {
                for (std::size_t n : {d, kv, kv, d})
                {
                    inputs.push_back(random_of<T>({n}, seed + 5 + static_cast<unsigned>(inputs.size())));
                }
            }
            const array<T> G = random_of<T>({2, c.length, d}, seed + 10);
            seed += 11;
            const auto [value, grads] = on_tape<T>(
                [&](const auto& v) { return attention_on_tape<T>(v, config, c.bias, variant); }, inputs, G);
            manual::attention_weights<T> w{&inputs[1], &inputs[2], &inputs[3], &inputs[4]};
            if (c.bias)
            {
                w.b_q = &inputs[5], w.b_k = &inputs[6], w.b_v = &inputs[7], w.b_o = &inputs[8];
            }
            manual::attention_cache<T> cache;
            check_close(manual::causal_self_attention_forward(inputs[0], w, config, variant, cache), value,
                        tolerance<T>());
            const auto g = manual::causal_self_attention_backward(G, cache, w);
            const std::vector<const array<T>*> manual_grads = {&g.x, &g.w_q, &g.w_k, &g.w_v, &g.w_o,
                                                               &g.b_q, &g.b_k, &g.b_v, &g.b_o};
            double largest = 0;
            for (const auto& grad : grads)
            {
                largest = std::max(largest, max_abs(grad));
            }
            for (std::size_t k = 0; k < inputs.size(); ++k)
            {
                CAPTURE(k);
                check_close(*manual_grads[k], grads[k], tolerance<T>(), largest);
            }
        }
    }
}

TEST_CASE("the manual layers refuse shapes that disagree, naming the layer and the shapes")
{
    const f64 x = random_array({2, 3, 4}, 1);
    manual::rmsnorm_cache<double> cache;
    std::string m = invalid_argument_message([&] { manual::rmsnorm_forward(x, random_array({3}, 2), cache); });
    CHECK(contains(m, "rmsnorm_forward"));
    CHECK(contains(m, "(3)"));
    m = invalid_argument_message([&] { manual::rope_forward(random_array({1, 2, 3, 5}, 3), 10000.0, 0); });
    CHECK(contains(m, "rope_forward"));
    CHECK(contains(m, "(1, 2, 3, 5)"));
    CHECK(contains(invalid_argument_message([&] { manual::rope_backward(x, 10000.0, 0); }), "rope_backward"));
    m = invalid_argument_message([&] { manual::swiglu_forward(x, random_array({2, 3, 5}, 4)); });
    CHECK(contains(m, "swiglu_forward"));
    CHECK(contains(m, "(2, 3, 5)"));
    const f64 b = random_array({6}, 5);
    m = invalid_argument_message([&] { manual::linear_forward(x, random_array({4, 5}, 6), &b); });
    CHECK(contains(m, "linear_forward"));
    CHECK(contains(m, "(6)"));
    const f64 wq = random_array({4, 4}, 7), bq = random_array({4}, 8);
    manual::attention_weights<double> w{&wq, &wq, &wq, &wq, &bq};
    manual::attention_cache<double> ac;
    m = invalid_argument_message(
        [&] { manual::causal_self_attention_forward(x, w, models::mha_config{4, 2, 2}, {}, ac); });
    CHECK(contains(m, "causal_self_attention_forward"));
    CHECK(contains(m, "b_Q"));
    w.b_q = nullptr;
    m = invalid_argument_message(
        [&] { manual::causal_self_attention_forward(x, w, models::mha_config{4, 3, 3}, {}, ac); });
    CHECK(contains(m, "causal_self_attention_forward"));
}

TEST_CASE("each deliberate mistake of models/manual_faults.hpp gives a gradient far from the correct rule's")
{
    const f64 x = random_array({2, 3, 6}, 1, -2.0, 2.0), w = random_array({6}, 2, 0.5, 1.5), G = random_array({2, 3, 6}, 3);
    const f64 up = random_array({2, 3, 6}, 4);
    const auto far = [](const f64& wrong, const f64& right) { return max_relative_difference(wrong, right) > 1e-2; };
    manual::rmsnorm_cache<double> cache;
    manual::rmsnorm_forward(x, w, cache);
    CHECK(far(manual::faults::rmsnorm_constant_scale(G, cache, w).x, manual::rmsnorm_backward(G, cache, w).x));
    const f64 q = random_array({1, 2, 3, 6}, 5);
    CHECK(far(manual::faults::rope_same_angle(q, 10000.0, 0), manual::rope_backward(q, 10000.0, 0)));
    CHECK(far(manual::faults::gelu_exact_cdf_only(G, x), manual::gelu_exact_backward(G, x)));
    CHECK(far(manual::faults::swiglu_sigmoid_slope(G, x, up).gate, manual::swiglu_backward(G, x, up).gate));
    CHECK(far(manual::faults::bias_first_sequence(G), manual::bias_backward(G)));
}
}  // namespace test_manual_layers
