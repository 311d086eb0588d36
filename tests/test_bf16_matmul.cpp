// ops::matmul, ops::linear and ops::linear_gelu at bf16 precision (kernels/bf16.hpp, ops/bf16_operands.hpp):
// the vectorised rounding against an independent reference; the rounded-once path (forward and both
// backward products) against the GEMM door, which rounds inside every call; a parameter updated between
// two tapes is never served from a stale copy.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"
#include "kernels/precision.hpp"
#include "test_util.hpp"

namespace test_bf16_matmul
{
using namespace xgrad;

namespace
{
// x rounded to 8 significant bits, ties to even, by frexp and nearbyint (normal floats).
float bf16_reference(float x)
{
    int exponent = 0;
    const double fraction = std::frexp(static_cast<double>(x), &exponent);
    return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(fraction, 8)), exponent - 8));
}

std::uint32_t bits_of(float x)
{
    std::uint32_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
}

array<float> random_float(const shape_t& shape, unsigned seed)
{
    return xt::cast<float>(test::random_array(shape, seed));
}

// C = op(A) op(B) through kernels::matmul_into: at bf16 precision the door rounds in every call.
array<float> door_product(const array<float>& a, bool ta, const array<float>& b, bool tb, const shape_t& c_shape)
{
    array<float> c = array<float>::from_shape(c_shape);
    kernels::matmul_into(a, ta, b, tb, c);
    return c;
}

array<float> scaled(const array<float>& a, float s)
{
    array<float> out = a;
    out *= s;
    return out;
}

struct forward_and_gradients
{
    array<float> y, dx, dw;
};

// y = matmul(x, w), loss = sum(y * g), at the calling thread's precision, w a parameter.
forward_and_gradients run_matmul(const array<float>& x, bool ta, parameter<float>& w, bool tb, const array<float>& g)
{
    w.zero_grad();
    tape<float> t;
    const var<float> xv = t.input(x), wv = t.param(w);
    const var<float> y = ops::matmul(xv, wv, ta, tb);
    t.backward(ops::sum(ops::mul(y, t.constant(g))));
    return {y.value(), xv.grad(), w.grad()};
}
}  // namespace

TEST_CASE("round_to_bf16: ties to even, infinities, NaN quiet, the same on the vector lanes and the tail")
{
    const float ulp = std::ldexp(1.0f, -7);
    std::vector<float> x;
    for (int i = 0; i < 40; ++i)
    {
        x.push_back(static_cast<float>(std::ldexp(1.0 + i * 0.37, i % 9 - 4)) * (i % 2 ? -1.0f : 1.0f));
    }
    x.push_back(1.0f + ulp / 2);      // tie, down to even
    x.push_back(1.0f + 3 * ulp / 2);  // tie, up to even
    x.push_back(-(1.0f + 3 * ulp / 2));
    const std::size_t normals = x.size();
    x.push_back(std::numeric_limits<float>::infinity());
    x.push_back(-std::numeric_limits<float>::infinity());
    x.push_back(std::numeric_limits<float>::max());  // rounds up to infinity
    x.push_back(std::nanf(""));
    std::uint32_t signalling = 0x7f800001u;  // a NaN whose payload lies only in the dropped bits
    float snan;
    std::memcpy(&snan, &signalling, sizeof snan);
    x.push_back(snan);
    for (std::size_t offset : {std::size_t(0), std::size_t(3)})  // whole lanes first, then misaligned
    {
        std::vector<std::uint16_t> bits(x.size() - offset);
        kernels::bf16::round_to_bf16(x.data() + offset, bits.size(), bits.data());
        std::vector<float> values(bits.size());
        kernels::bf16::round_to_bf16_values(x.data() + offset, values.size(), values.data());
        for (std::size_t i = 0; i < bits.size(); ++i)
        {
            const float in = x[i + offset], out = kernels::bf16::widen(bits[i]);
            CAPTURE(in);
            CHECK(bits_of(values[i]) == bits_of(out));
            if (i + offset < normals)
            {
                CHECK(out == bf16_reference(in));
            }
            else if (std::isnan(in))
            {
                CHECK(std::isnan(out));
                CHECK((bits[i] & 0x40u) != 0);  // quiet
            }
            else
            {
                CHECK(out == (in > 0 ? 1.0f : -1.0f) * std::numeric_limits<float>::infinity());
            }
        }
    }
    const float halfway = 1.0f + ulp / 2;
    CHECK(bf16_reference(halfway) == 1.0f);  // the reference itself ties to even
}

TEST_CASE("round_to_bf16 over a large array: chunks across threads, every value as the reference rounds it")
{
    const std::size_t n = (std::size_t(1) << 19) + 5;  // past the one-thread size, with a partial chunk
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i)
    {
        const float sign = i % 2 ? -1.0f : 1.0f;
        x[i] = sign * static_cast<float>(std::ldexp(1.0 + (i % 977) * 0.00097, int(i % 13) - 6));
    }
    for (int threads : {1, 2})
    {
        CAPTURE(threads);
        set_num_threads(threads);
        std::vector<std::uint16_t> bits(n);
        std::vector<float> values(n);
        kernels::bf16::round_to_bf16(x.data(), n, bits.data());
        kernels::bf16::round_to_bf16_values(x.data(), n, values.data());
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i)
        {
            const float reference = bf16_reference(x[i]);
            wrong += kernels::bf16::widen(bits[i]) != reference || values[i] != reference;
        }
        CHECK(wrong == 0);
    }
    set_num_threads(1);
}

TEST_CASE("bf16 matmul with rounded-once operands equals the door's per-call rounding, forward and backward")
{
    if (!bf16_supported())
    {
        MESSAGE("this CPU has no bfloat16 dot products: nothing to compare");
        return;
    }
    struct product_case
    {
        shape_t x, w;
        bool ta, tb;
    };
    const product_case cases[] = {
        {{8, 64, 128}, {128, 96}, false, false},     // folded rows (X W), dW folded columns
        {{8, 64, 96}, {128, 96}, false, true},       // X W^T (a tied head)
        {{3, 128, 128}, {3, 128, 128}, false, false},  // one GEMM per batch entry
        {{2, 128, 128}, {128, 160}, true, false},     // op(A) = A^T
    };
    for (int threads : {1, 2})
    {
        set_num_threads(threads);
        for (const product_case& pc : cases)
        {
            CAPTURE(threads);
            CAPTURE(pc.ta);
            CAPTURE(pc.tb);
            const array<float> x = random_float(pc.x, 1);
            parameter<float> w(random_float(pc.w, 2));
            const precision_scope bf16(matmul_precision::bf16);
            REQUIRE(kernels::bf16::matmul_takes_rounded(x, pc.ta, w.value(), pc.tb));
            tape<float> shapes_only;
            const shape_t y_shape =
                ops::matmul(shapes_only.input(x), shapes_only.input(w.value()), pc.ta, pc.tb).value().shape();
            const array<float> g = random_float(y_shape, 3);
            const forward_and_gradients r = run_matmul(x, pc.ta, w, pc.tb, g);
            // the same products through the door: y = op(x) op(w), dx and dw as matmul's rule writes them
            const array<float> y = door_product(x, pc.ta, w.value(), pc.tb, y_shape);
            const array<float> dx = pc.ta ? door_product(w.value(), pc.tb, g, true, x.shape())
                                          : door_product(g, false, w.value(), !pc.tb, x.shape());
            const array<float> dw = pc.tb ? door_product(g, true, x, pc.ta, w.value().shape())
                                          : door_product(x, !pc.ta, g, false, w.value().shape());
            CHECK(test::closeness(r.y, y, 1e-6, 1e-6) == 0);
            CHECK(test::closeness(r.dx, dx, 1e-6, 1e-6) == 0);
            CHECK(test::closeness(r.dw, dw, 1e-6, 1e-6) == 0);
            const precision_scope fp32(matmul_precision::fp32);
            const array<float> y32 = door_product(x, pc.ta, w.value(), pc.tb, y_shape);
            CHECK(xt::amax(xt::abs(r.y - y32))() > 1e-4);  // bf16 indeed: far from the float32 product
        }
    }
    set_num_threads(1);
}

TEST_CASE("linear and linear_gelu at bf16 round x and W once: the door's per-call products, and the copies' bytes")
{
    if (!bf16_supported())
    {
        MESSAGE("this CPU has no bfloat16 dot products: nothing to compare");
        return;
    }
    const shape_t x_shape{8, 64, 128}, w_shape{128, 96};
    const array<float> x = random_float(x_shape, 21), b = random_float({96}, 23);
    const array<float> g = random_float({8, 64, 96}, 24);
    parameter<float> w(random_float(w_shape, 22));
    for (bool with_gelu : {false, true})
    {
        CAPTURE(with_gelu);
        const precision_scope bf16(matmul_precision::bf16);
        REQUIRE(kernels::bf16::matmul_takes_rounded(x, false, w.value(), false));
        // the node: y = x W + b or gelu(x W + b), loss = sum(y * g)
        w.zero_grad();
        tape<float> t;
        const var<float> xv = t.input(x), wv = t.param(w), bv = t.input(b);
        const var<float> y = with_gelu ? ops::linear_gelu(xv, wv, bv) : ops::linear(xv, wv, bv);
        const std::size_t saved = t.bytes_saved_for_backward(false);
        t.backward(ops::sum(ops::mul(y, t.constant(g))));
        // the reference: h = x W + b through the door, then dh = dL/dh from gelu's own node (or g)
        array<float> h = door_product(x, false, w.value(), false, {8, 64, 96}) + b;
        tape<float> r;
        const var<float> hv = r.input(h);
        const var<float> yr = with_gelu ? ops::gelu(hv) : ops::mul(hv, r.constant(array<float>({1.0f})));
        r.backward(ops::sum(ops::mul(yr, r.constant(g))));
        const array<float>& dh = hv.grad();
        CHECK(test::closeness(y.value(), yr.value(), 1e-5, 1e-6) == 0);
        CHECK(test::closeness(xv.grad(), door_product(dh, false, w.value(), true, x_shape), 1e-5, 1e-6) == 0);
        CHECK(test::closeness(w.grad(), door_product(x, true, dh, false, w_shape), 1e-5, 1e-6) == 0);
        const array<float> db = xt::sum(dh, {0, 1});
        CHECK(test::closeness(bv.grad(), db, 1e-5, 1e-5) <= 1);  // summed in another order
        // the rule keeps both bf16 copies (x's for dW, W's for dx) beside x and W themselves
        const std::size_t copies = (x.size() + w.value().size()) * sizeof(std::uint16_t);
        const precision_scope fp32(matmul_precision::fp32);
        tape<float> t32;
        const var<float> x32 = t32.input(x), w32 = t32.param(w), b32 = t32.input(b);
        (void)(with_gelu ? ops::linear_gelu(x32, w32, b32) : ops::linear(x32, w32, b32));
        CHECK(saved == t32.bytes_saved_for_backward(false) + copies);
    }
}

TEST_CASE("a parameter updated between two tapes is multiplied at its new value, never a stale copy")
{
    if (!bf16_supported())
    {
        return;
    }
    const array<float> x = random_float({4, 128, 64}, 4);
    parameter<float> w(random_float({64, 64}, 5));
    const array<float> g = random_float({4, 128, 64}, 6);
    const precision_scope bf16(matmul_precision::bf16);
    REQUIRE(kernels::bf16::matmul_takes_rounded(x, false, w.value(), false));
    const forward_and_gradients first = run_matmul(x, false, w, false, g);
    w.value() *= -0.5f;  // an optimiser step, in place, after the first tape's backward
    const forward_and_gradients second = run_matmul(x, false, w, false, g);
    // -0.5 is exact in bfloat16, so the new products are exactly -0.5 times the old ones
    CHECK(test::closeness(second.y, scaled(first.y, -0.5f), 0, 0) == 0);
    CHECK(test::closeness(second.dx, scaled(first.dx, -0.5f), 0, 0) == 0);
    CHECK(test::closeness(second.dw, first.dw, 0, 0) == 0);  // dW = X^T G does not read W
    CHECK(test::closeness(second.y, door_product(x, false, w.value(), false, {4, 128, 64}), 1e-6, 1e-6) == 0);
}

TEST_CASE("matmul_takes_rounded: only at bf16 precision, only for products oneDNN takes")
{
    const array<float> big = random_float({4, 128, 64}, 7), w = random_float({64, 64}, 8);
    const array<float> small = random_float({1, 8, 8}, 9), w_small = random_float({8, 8}, 10);
    CHECK_FALSE(kernels::bf16::matmul_takes_rounded(big, false, w, false));  // fp32
    const precision_scope bf16(matmul_precision::bf16);
    CHECK(kernels::bf16::matmul_takes_rounded(big, false, w, false) == bf16_supported());
    CHECK_FALSE(kernels::bf16::matmul_takes_rounded(small, false, w_small, false));
}
}  // namespace test_bf16_matmul
