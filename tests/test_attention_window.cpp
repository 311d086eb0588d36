// Sliding-window attention (docs/spec.md, `attention_window`): the query at absolute position t attends to
// the keys at positions s with t - w < s <= t. models::causal_mask(Tq, Tk, w) against that sentence read
// literally; the fused op (both layouts) against a loop-written softmax over that mask and against the
// composed graph given the mask, values and gradients in float64 to 1e-12, for w = 1, w = T, w > T,
// Tq < Tk (decoding's bottom-right alignment), grouped-query heads, T = 1, several tiles; central
// differences; the work counted on the tiles the window leaves; errors.
#include <doctest/doctest.h>

#include <ostream>

#include "test_util.hpp"

#include "kernels/attention.hpp"
#include "kernels/parallel.hpp"
#include "models/masks.hpp"
#include "models/mha.hpp"
#include "ops/composed.hpp"

namespace test_attention_window
{
using namespace xgrad;
using namespace xgrad::test;

namespace
{
// SPEC's sentence, in signed positions: query i of Tq sits at t = i + (Tk - Tq) (bottom-right aligned, as
// decoding with a cache of Tk - Tq earlier keys); key j at s = j; w = 0 is plain causal.
mask_t spec_window_mask(std::size_t tq, std::size_t tk, std::size_t w)
{
    mask_t m = mask_t::from_shape({tq, tk});
    for (std::size_t i = 0; i < tq; ++i)
    {
        for (std::size_t j = 0; j < tk; ++j)
        {
            const long long t = static_cast<long long>(i + tk) - static_cast<long long>(tq);
            const long long s = static_cast<long long>(j);
            m(i, j) = s <= t && (w == 0 || t - static_cast<long long>(w) < s);
        }
    }
    return m;
}

// softmax(q k^T / sqrt(dh) over the keys `mask` (Tq, Tk) keeps) v, query head h reading key/value head
// h / (H / G), loop-written in long double (ref_masked_softmax); rows that keep nothing give 0.
f64 reference_output(const f64& q, const f64& k, const f64& v, const mask_t& mask)
{
    const std::size_t B = q.shape()[0], H = q.shape()[1], Tq = q.shape()[2], dh = q.shape()[3];
    const std::size_t G = k.shape()[1], Tk = k.shape()[2];
    f64 out = filled<double>({B, H, Tq, dh}, 0.0);
    for (std::size_t b = 0; b < B; ++b)
    {
        for (std::size_t h = 0; h < H; ++h)
        {
            const std::size_t g = h / (H / G);
            f64 scores = filled<double>({Tq, Tk}, 0.0);
            for (std::size_t i = 0; i < Tq; ++i)
            {
                for (std::size_t j = 0; j < Tk; ++j)
                {
                    for (std::size_t c = 0; c < dh; ++c)
                    {
                        scores(i, j) += q(b, h, i, c) * k(b, g, j, c);
                    }
                }
            }
            const f64 p = ref_masked_softmax(scores, &mask, 1.0 / std::sqrt(static_cast<double>(dh)));
            for (std::size_t i = 0; i < Tq; ++i)
            {
                for (std::size_t j = 0; j < Tk; ++j)
                {
                    for (std::size_t c = 0; c < dh; ++c)
                    {
                        out(b, h, i, c) += p(i, j) * v(b, g, j, c);
                    }
                }
            }
        }
    }
    return out;
}

struct window_case
{
    std::size_t B, H, G, Tq, Tk, dh, window;
};

// What a failing check prints of its case (CAPTURE).
std::ostream& operator<<(std::ostream& out, const window_case& c)
{
    return out << "Tq " << c.Tq << ", Tk " << c.Tk << ", window " << c.window;
}

// Gradients within 1e-12 of their own size (absolute where they vanish up to rounding).
void check_close(const f64& fused, const f64& reference)
{
    const difference d = compare(fused, reference);
    CAPTURE(d.max_abs);
    CAPTURE(d.scale);
    CHECK(d.within(1e-14, 1e-12));
}

// q (B,H,Tq,dh), k and v (B,G,Tk,dh) of a case, drawn from seed, seed + 1 and seed + 2.
std::vector<f64> window_inputs(const window_case& c, unsigned seed)
{
    return {normal_array<double>({c.B, c.H, c.Tq, c.dh}, seed),
            normal_array<double>({c.B, c.G, c.Tk, c.dh}, seed + 1),
            normal_array<double>({c.B, c.G, c.Tk, c.dh}, seed + 2)};
}

// The fused op with the case's window, and the composed graph given causal_mask(Tq, Tk, w) and no causal
// flag: two independent ways to the same attention.
auto fused_window_op(const window_case& c)
{
    return [&c](const auto& x) { return ops::attention(x[0], x[1], x[2], nullptr, true, c.window); };
}
auto composed_window_op(const window_case& c)
{
    return [band = models::causal_mask(c.Tq, c.Tk, c.window)](const auto& x)
    { return ops::composed::attention(x[0], x[1], x[2], &band, false); };
}

// The fused op with the window = the loop-written reference (values) = the composed graph given
// causal_mask(Tq, Tk, w) and no causal flag (values and the gradients of q, k, v).
void check_window_op(const window_case& c, unsigned seed)
{
    CAPTURE(c);
    const std::vector<f64> in = window_inputs(c, seed);
    const auto f = evaluate_in<double>(fused_window_op(c), in, seed + 3);
    const auto r = evaluate_in<double>(composed_window_op(c), in, seed + 3);
    CHECK(all_finite(f.value));
    const mask_t spec = spec_window_mask(c.Tq, c.Tk, c.window);
    CHECK(max_relative_difference(f.value, reference_output(in[0], in[1], in[2], spec)) < 1e-12);
    CHECK(max_relative_difference(f.value, r.value) < 1e-12);
    for (std::size_t i = 0; i < 3; ++i)
    {
        CAPTURE(i);
        CHECK(all_finite(f.grads[i]));
        check_close(f.grads[i], r.grads[i]);
    }
}

// The fused op in float32 = the composed graph given causal_mask(Tq, Tk, w) in float64 (values and the
// gradients of q, k, v): the float32 kernel's own tile schedule against an independent one.
void check_window_float32(const window_case& c, unsigned seed)
{
    CAPTURE(c);
    const std::vector<f64> in = window_inputs(c, seed);
    const auto lo = evaluate_in<float>(fused_window_op(c), in, seed + 3);
    const auto hi = evaluate_in<double>(composed_window_op(c), in, seed + 3);
    CHECK(closeness(lo.value, hi.value, 1e-4, 1e-5) <= 1.0);
    for (std::size_t i = 0; i < 3; ++i)
    {
        CAPTURE(i);
        CHECK(closeness(lo.grads[i], hi.grads[i], 1e-4, 1e-5) <= 1.0);
    }
}

// Widths around the kernel's tile (64 rows, 64 keys), its edge strips (16 rows) and T = 200 (a last tile of
// 8 rows); 0 is plain causal, whose diagonal tiles are strips too.
const std::size_t band_widths[] = {0, 1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 199, 200, 260};

// The token-major op with the window = the heads-major op on split heads = the composed graph with the mask.
void check_window_token_major(const window_case& c, unsigned seed)
{
    CAPTURE(c.window);
    const std::vector<f64> in{random_array({c.B, c.Tq, c.H * c.dh}, seed),
                              random_array({c.B, c.Tk, c.G * c.dh}, seed + 1),
                              random_array({c.B, c.Tk, c.G * c.dh}, seed + 2)};
    const mask_t band = models::causal_mask(c.Tq, c.Tk, c.window);
    auto token_major = [&](const auto& x) {
        return ops::attention_token_major(x[0], x[1], x[2], c.H, c.G, nullptr, true, c.window);
    };
    auto heads_major = [&](const auto& x) {
        using models::split_heads;
        return models::combine_heads(ops::attention(split_heads(x[0], c.H), split_heads(x[1], c.G),
                                                    split_heads(x[2], c.G), nullptr, true, c.window));
    };
    auto masked = [&](const auto& x) {
        return ops::composed::attention_token_major(x[0], x[1], x[2], c.H, c.G, &band, false);
    };
    const auto f = evaluate_in<double>(token_major, in, seed + 3);
    for (const auto& r : {evaluate_in<double>(heads_major, in, seed + 3),
                          evaluate_in<double>(masked, in, seed + 3)})
    {
        CHECK(max_relative_difference(f.value, r.value) < 1e-12);
        for (std::size_t i = 0; i < 3; ++i)
        {
            CAPTURE(i);
            check_close(f.grads[i], r.grads[i]);
        }
    }
}
}  // namespace

TEST_CASE("causal_mask(Tq, Tk, w) is SPEC's band t - w < s <= t, bottom-right aligned")
{
    // T = 4, w = 2: each query sees itself and the key before it.
    CHECK(models::causal_mask(4, 4, 2) == mask_t{{true, false, false, false},
                                                 {true, true, false, false},
                                                 {false, true, true, false},
                                                 {false, false, true, true}});
    for (std::size_t tq : {1u, 3u, 5u})
    {
        for (std::size_t tk : {1u, 4u, 5u, 9u})
        {
            for (std::size_t w : {0u, 1u, 2u, 4u, 9u, 20u})
            {
                CAPTURE(tq);
                CAPTURE(tk);
                CAPTURE(w);
                CHECK(models::causal_mask(tq, tk, w) == spec_window_mask(tq, tk, w));
            }
        }
    }
    CHECK(models::causal_mask(5, 5, 5) == models::causal_mask(5, 5));  // w >= T: plain causal
}

TEST_CASE("windowed attention = masked reference: w = 1, w = T, w > T, Tq < Tk, Tq > Tk, T = 1")
{
    check_window_op({2, 2, 2, 6, 6, 3, 1}, 1);   // each query sees only its own key
    check_window_op({2, 2, 2, 6, 6, 3, 3}, 2);
    check_window_op({2, 2, 2, 6, 6, 3, 6}, 3);   // w = T: full causal
    check_window_op({2, 2, 2, 6, 6, 3, 50}, 4);  // w > T: full causal
    check_window_op({1, 2, 2, 2, 7, 4, 3}, 5);   // decode-like: 5 cached keys, the window slides past them
    check_window_op({1, 2, 2, 1, 9, 4, 4}, 6);   // one new token over a cache of 8
    check_window_op({1, 2, 2, 7, 3, 4, 2}, 7);   // Tq > Tk: the first 4 rows see nothing
    check_window_op({1, 1, 1, 1, 1, 2, 1}, 8);   // T = 1
}

TEST_CASE("windowed attention: grouped-query (G = 2) and multi-query (G = 1) heads")
{
    check_window_op({2, 4, 2, 7, 7, 3, 2}, 11);
    check_window_op({1, 4, 1, 5, 8, 2, 3}, 12);
}

TEST_CASE("windowed attention over several tiles: windows shorter, equal and longer than a 64-key tile")
{
    for (std::size_t w : {1u, 17u, 63u, 64u, 65u, 130u})
    {
        check_window_op({1, 2, 1, 200, 200, 3, w}, 20);
    }
    check_window_op({1, 2, 2, 70, 200, 4, 40}, 21);  // Tq < Tk across tiles
    check_window_op({1, 2, 2, 150, 90, 4, 70}, 22);  // Tq > Tk across tiles
}

TEST_CASE("windowed attention, the band's edges in row strips: widths around a tile, a strip and T, float64")
{
    for (std::size_t w : band_widths)
    {
        check_window_op({1, 2, 1, 200, 200, 4, w}, 90);
    }
    for (std::size_t w : {1u, 16u, 63u, 64u, 65u, 128u, 129u, 130u})
    {
        check_window_op({1, 2, 2, 130, 200, 4, w}, 91);  // Tq < Tk: 70 cached keys before the first query
        check_window_op({1, 2, 2, 200, 130, 4, w}, 92);  // Tq > Tk: the first 70 rows see nothing
    }
    check_window_op({1, 2, 2, 1, 1, 4, 1}, 93);  // T = 1
    check_window_op({1, 2, 2, 1, 1, 4, 5}, 94);
}

TEST_CASE("windowed attention, the band's edges in row strips: the same widths in float32")
{
    for (std::size_t w : band_widths)
    {
        check_window_float32({1, 2, 1, 200, 200, 4, w}, 95);
    }
    for (std::size_t w : {1u, 64u, 65u, 129u})
    {
        check_window_float32({1, 2, 2, 130, 200, 4, w}, 96);
        check_window_float32({1, 2, 2, 200, 130, 4, w}, 97);
    }
    check_window_float32({1, 2, 2, 1, 1, 4, 1}, 98);
}

namespace
{
// The token-major op in float32 = the composed graph given causal_mask(Tq, Tk, w) in float64.
void check_window_token_major_float32(const window_case& c, unsigned seed)
{
    CAPTURE(c);
    const std::vector<f64> in{random_array({c.B, c.Tq, c.H * c.dh}, seed),
                              random_array({c.B, c.Tk, c.G * c.dh}, seed + 1),
                              random_array({c.B, c.Tk, c.G * c.dh}, seed + 2)};
    auto token_major = [&](const auto& x) {
        return ops::attention_token_major(x[0], x[1], x[2], c.H, c.G, nullptr, true, c.window);
    };
    auto masked = [band = models::causal_mask(c.Tq, c.Tk, c.window), &c](const auto& x) {
        return ops::composed::attention_token_major(x[0], x[1], x[2], c.H, c.G, &band, false);
    };
    const auto lo = evaluate_in<float>(token_major, in, seed + 3);
    const auto hi = evaluate_in<double>(masked, in, seed + 3);
    CHECK(closeness(lo.value, hi.value, 1e-4, 1e-5) <= 1.0);
    for (std::size_t i = 0; i < 3; ++i)
    {
        CAPTURE(i);
        CHECK(closeness(lo.grads[i], hi.grads[i], 1e-4, 1e-5) <= 1.0);
    }
}
}  // namespace

TEST_CASE("windowed attention in float32 with heads as wide as the transposes' 16 x 16 blocks, and wider")
{
    // dh = 16 (one block of columns), 20 and 33 (blocks and a remainder); T = 200 and Tk - Tq = 70 give key
    // ranges whose first key and length are not multiples of 16.
    for (std::size_t dh : {16u, 20u, 33u})
    {
        for (std::size_t w : {0u, 17u, 64u, 129u})
        {
            check_window_float32({1, 2, 1, 200, 200, dh, w}, 110);
            check_window_float32({1, 2, 2, 130, 200, dh, w}, 111);
            check_window_token_major_float32({1, 4, 2, 130, 200, dh, w}, 112);
        }
    }
}

TEST_CASE("attention over key panels: a core wider than one panel of 512 keys, causal, windowed and not")
{
    // T = 700: from the tenth query tile on, plain causal rows see more than 512 + 64 keys, so their core
    // is split into two panels (the online softmax carries a row from one to the next); w = 600 likewise
    // (a core of 537 keys); w = 520 keeps one panel whose last chunk joins the right edge.
    for (std::size_t w : {0u, 520u, 600u})
    {
        check_window_op({1, 1, 1, 700, 700, 4, w}, 120);
        check_window_float32({1, 1, 1, 700, 700, 4, w}, 121);
    }
    check_window_op({1, 1, 1, 70, 700, 4, 0}, 122);    // Tq < Tk: every row's keys in two panels
    check_window_op({1, 1, 1, 70, 700, 4, 600}, 123);
}

TEST_CASE("attention over key panels: a mask hiding a row's keys in one panel, or in all, causal or not")
{
    const std::size_t Tq = 70, Tk = 700;
    mask_t mask = mask_t::from_shape({1, 1, Tq, Tk});
    for (std::size_t i = 0; i < Tq; ++i)
    {
        for (std::size_t j = 0; j < Tk; ++j)
        {
            const bool first_panel = j < 512;
            mask(0, 0, i, j) = i % 3 == 0   ? first_panel              // row sees the first panel only
                               : i % 3 == 1 ? !first_panel             // the second only
                                            : i != 5 && (i + j) % 4 != 0;  // both, sparsely; row 5 nothing
        }
    }
    const std::vector<f64> in{normal_array<double>({1, 2, Tq, 4}, 130),
                              normal_array<double>({1, 2, Tk, 4}, 131),
                              normal_array<double>({1, 2, Tk, 4}, 132)};
    for (bool causal : {false, true})
    {
        CAPTURE(causal);
        const mask_t both = causal ? mask_t(mask && models::causal_mask(Tq, Tk, 0)) : mask;
        auto fused = [&](const auto& x) { return ops::attention(x[0], x[1], x[2], &mask, causal); };
        auto masked = [&](const auto& x) { return ops::composed::attention(x[0], x[1], x[2], &both, false); };
        const auto f = evaluate_in<double>(fused, in, 133);
        const auto r = evaluate_in<double>(masked, in, 133);
        CHECK(all_finite(f.value));
        CHECK(max_relative_difference(f.value, r.value) < 1e-12);
        for (std::size_t i = 0; i < 3; ++i)
        {
            CAPTURE(i);
            check_close(f.grads[i], r.grads[i]);
        }
    }
}

TEST_CASE("windowed attention with a mask across the strips' key ranges = the composed graph, AND-ed mask")
{
    const std::size_t T = 200, w = 65;
    mask_t sparse = mask_t::from_shape({1, 1, T, T});  // about one key in five hidden, no pattern along rows
    for (std::size_t i = 0; i < T; ++i)
    {
        for (std::size_t j = 0; j < T; ++j)
        {
            sparse(0, 0, i, j) = (i * 7 + j * 3) % 5 != 0;
        }
    }
    const mask_t both = mask_t(sparse && models::causal_mask(T, T, w));
    const std::vector<f64> in{normal_array<double>({1, 2, T, 4}, 100),
                              normal_array<double>({1, 2, T, 4}, 101),
                              normal_array<double>({1, 2, T, 4}, 102)};
    auto fused = [&](const auto& x) { return ops::attention(x[0], x[1], x[2], &sparse, true, w); };
    auto masked = [&](const auto& x) { return ops::composed::attention(x[0], x[1], x[2], &both, false); };
    const auto f = evaluate_in<double>(fused, in, 103);
    const auto r = evaluate_in<double>(masked, in, 103);
    CHECK(max_relative_difference(f.value, r.value) < 1e-12);
    for (std::size_t i = 0; i < 3; ++i)
    {
        CAPTURE(i);
        check_close(f.grads[i], r.grads[i]);
    }
}

TEST_CASE("windowed attention with a padding mask: rows whose window holds only padding give 0, no NaN")
{
    // Keys 0 and 1 are real, the rest padding; w = 2: queries 3.. see only padding.
    mask_t padding = full_mask({1, 1, 1, 6}, false);
    padding(0, 0, 0, 0) = padding(0, 0, 0, 1) = true;
    const std::vector<f64> in{normal_array<double>({1, 2, 6, 3}, 30), normal_array<double>({1, 2, 6, 3}, 31),
                              normal_array<double>({1, 2, 6, 3}, 32)};
    const mask_t both = mask_t(padding && models::causal_mask(6, 6, 2));
    auto fused = [&](const auto& x) { return ops::attention(x[0], x[1], x[2], &padding, true, 2); };
    auto masked = [&](const auto& x) { return ops::composed::attention(x[0], x[1], x[2], &both, false); };
    const auto f = evaluate_in<double>(fused, in, 33);
    const auto r = evaluate_in<double>(masked, in, 33);
    CHECK(all_finite(f.value));
    CHECK(max_relative_difference(f.value, r.value) < 1e-12);
    for (std::size_t i = 3; i < 6; ++i)
    {
        CHECK(f.value(0, 0, i, 0) == 0.0);
        CHECK(f.value(0, 1, i, 2) == 0.0);
    }
    for (std::size_t i = 0; i < 3; ++i)
    {
        CHECK(all_finite(f.grads[i]));
        check_close(f.grads[i], r.grads[i]);
    }
}

TEST_CASE("token-major windowed attention = heads-major = masked composed graph")
{
    check_window_token_major({2, 4, 2, 6, 6, 3, 2}, 40);
    check_window_token_major({1, 2, 1, 3, 8, 2, 4}, 41);
    check_window_token_major({1, 2, 2, 1, 1, 2, 1}, 42);
    check_window_token_major({1, 2, 1, 140, 140, 2, 33}, 43);
}

TEST_CASE("windowed attention passes gradcheck (float64 central differences), both layouts")
{
    auto heads = [](tape<double>&, const vars& x) {
        return ops::attention(x[0], x[1], x[2], nullptr, true, 2);
    };
    XGRAD_CHECK_GRADIENTS(heads, {normal_array<double>({2, 4, 5, 3}, 50),
                                  normal_array<double>({2, 2, 6, 3}, 51),
                                  normal_array<double>({2, 2, 6, 3}, 52)});
    auto tokens = [](tape<double>&, const vars& x) {
        return ops::attention_token_major(x[0], x[1], x[2], 2, 1, nullptr, true, 3);
    };
    XGRAD_CHECK_GRADIENTS(tokens, {normal_array<double>({1, 5, 4}, 53), normal_array<double>({1, 5, 2}, 54),
                                   normal_array<double>({1, 5, 2}, 55)});
}

TEST_CASE("windowed attention works on the window's tiles only: O(T w) multiply-adds, not O(T^2)")
{
    const std::size_t B = 1, H = 2, T = 256, dh = 16;
    const auto q = normal_array<double>({B, H, T, dh}, 60), k = normal_array<double>({B, H, T, dh}, 61);
    auto multiply_adds = [&](std::size_t window) {
        return kernels::attention_forward(q, k, k, nullptr, true, window).multiply_adds;
    };
    // w = 32 is narrower than a 64-row tile: no key is seen by all its rows, so each 16-row strip from
    // row i0 + r0 visits keys (i0 + r0 - 32, i0 + r0 + 16), 47 of them; the first tile's first two strips
    // start at key 0 (16 and 32 keys). Full causal: the keys below the diagonal in products of all 64
    // rows (0, 64, 128, 192 keys), the diagonal tile in 16-row strips of 16, 32, 48, 64 keys.
    const std::size_t diagonal = 16 * (16 + 32 + 48 + 64);
    CHECK(multiply_adds(32) == 2ull * B * H * (16 * (16 + 32 + 47 + 47) + 3 * 16 * 4 * 47) * dh);
    CHECK(multiply_adds(0) == 2ull * B * H * (64 * (0 + 64 + 128 + 192) + 4 * diagonal) * dh);
    CHECK(multiply_adds(1000) == multiply_adds(0));
    CHECK(3 * multiply_adds(16) < 2 * multiply_adds(0));
}

TEST_CASE("windowed attention: w >= T is bit-identical to plain causal; two threads to one")
{
    const auto q = normal_array<double>({2, 4, 150, 8}, 70), k = normal_array<double>({2, 2, 150, 8}, 71);
    const auto plain = kernels::attention_forward(q, k, k, nullptr, true);
    const auto wide = kernels::attention_forward(q, k, k, nullptr, true, 150);
    CHECK(max_abs(array<double>(wide.output - plain.output)) == 0.0);
    auto run = [&] {
        const auto f = kernels::attention_forward(q, k, k, nullptr, true, 40);
        const auto g = kernels::attention_backward(q, k, k, f.output, f.log_sum_exp, q, nullptr, true, 40);
        return std::vector<f64>{f.output, g.q, g.k, g.v};
    };
    const auto one = run();
    set_num_threads(2);
    const auto two = run();
    set_num_threads(1);
    for (std::size_t i = 0; i < one.size(); ++i)
    {
        CAPTURE(i);
        CHECK(max_abs(array<double>(one[i] - two[i])) == 0.0);
    }
}

TEST_CASE("windowed attention: a window without causal throws, naming the op")
{
    tape<double> t;
    auto q = t.input(normal_array<double>({1, 2, 3, 4}, 80));
    auto flat = t.input(normal_array<double>({1, 3, 8}, 81));
    CHECK_THROWS_WITH_AS(ops::attention(q, q, q, nullptr, false, 2),
                         doctest::Contains("attention: window = 2"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops::attention_token_major(flat, flat, flat, 2, 2, nullptr, false, 1),
                         doctest::Contains("attention_token_major: window = 1 needs causal"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(kernels::attention_forward(q.value(), q.value(), q.value(), nullptr, false, 3),
                         doctest::Contains("needs causal = true"), std::invalid_argument);
    CHECK(t.size() == 2);  // nothing recorded by the refused calls
}
}  // namespace test_attention_window
