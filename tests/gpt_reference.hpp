// A loop-written reference of the whole GPT (docs/spec.md, "The model") in double: plain loops over row-major
// std::vector<double>, no ops, no tape. test_gpt judges the tape by it, gpt_tool_test the xgrad-gpt-npy tool.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/gpt.hpp"

namespace xgrad::test::gpt_reference
{
using models::gpt_config;
using models::gpt_parameters;

using matrix = std::vector<double>;  // row-major (rows, cols)

inline const array<double>& value_of(const gpt_parameters<double>& p, const std::string& name)
{
    for (const auto& q : p.named_parameters())
    {
        if (q.name() == name)
        {
            return q.value();
        }
    }
    FAIL("no parameter named " << name);
    throw std::logic_error("unreachable");
}

// (n, k) @ W (k, m) [+ b]
inline matrix ref_linear(const matrix& x, std::size_t n, const array<double>& w,
                         const array<double>* b = nullptr)
{
    const std::size_t k = w.shape()[0], m = w.shape()[1];
    matrix y(n * m, 0.0);
    for (std::size_t i = 0; i < n; ++i)
    {
        for (std::size_t j = 0; j < m; ++j)
        {
            double acc = b ? b->flat(j) : 0.0;
            for (std::size_t q = 0; q < k; ++q)
            {
                acc += x[i * k + q] * w.flat(q * m + j);
            }
            y[i * m + j] = acc;
        }
    }
    return y;
}

inline matrix ref_layer_norm(const matrix& x, std::size_t n, const array<double>& w, const array<double>& b)
{
    const std::size_t d = w.size();
    matrix y(x.size());
    for (std::size_t i = 0; i < n; ++i)
    {
        double mean = 0, var = 0;
        for (std::size_t j = 0; j < d; ++j)
        {
            mean += x[i * d + j] / d;
        }
        for (std::size_t j = 0; j < d; ++j)
        {
            var += (x[i * d + j] - mean) * (x[i * d + j] - mean) / d;
        }
        for (std::size_t j = 0; j < d; ++j)
        {
            y[i * d + j] = (x[i * d + j] - mean) / std::sqrt(var + 1e-5) * w.flat(j) + b.flat(j);
        }
    }
    return y;
}

// Causal attention of T queries; query head h reads key/value head h / (H / G).
inline matrix ref_attention(const matrix& q, const matrix& k, const matrix& v, std::size_t T, std::size_t H,
                            std::size_t G, std::size_t dh)
{
    matrix out(T * H * dh, 0.0);
    for (std::size_t h = 0; h < H; ++h)
    {
        const std::size_t g = h / (H / G);
        for (std::size_t i = 0; i < T; ++i)
        {
            std::vector<double> s(i + 1);
            double top = -1e300, total = 0;
            for (std::size_t j = 0; j <= i; ++j)
            {
                s[j] = 0;
                for (std::size_t c = 0; c < dh; ++c)
                {
                    s[j] += q[i * H * dh + h * dh + c] * k[j * G * dh + g * dh + c] / std::sqrt(double(dh));
                }
                top = std::max(top, s[j]);
            }
            for (auto& e : s)
            {
                e = std::exp(e - top);
                total += e;
            }
            for (std::size_t j = 0; j <= i; ++j)
            {
                for (std::size_t c = 0; c < dh; ++c)
                {
                    out[i * H * dh + h * dh + c] += s[j] / total * v[j * G * dh + g * dh + c];
                }
            }
        }
    }
    return out;
}

inline double ref_gelu(double x)
{
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// docs/spec.md's forward, one sequence at a time: logits (B, T, V).
inline array<double> ref_logits(const gpt_parameters<double>& p, const ids_t& tokens)
{
    const gpt_config& c = p.config;
    const std::size_t B = tokens.shape()[0], T = tokens.shape()[1], d = c.d_model, V = c.vocab_size;
    const std::size_t H = c.heads, G = c.kv_heads ? c.kv_heads : H, dh = d / H;
    array<double> logits = array<double>::from_shape({B, T, V});
    for (std::size_t b = 0; b < B; ++b)
    {
        matrix x(T * d);
        for (std::size_t t = 0; t < T; ++t)
        {
            for (std::size_t j = 0; j < d; ++j)
            {
                x[t * d + j] = p.wte.value().flat(tokens(b, t) * d + j) + p.wpe.value().flat(t * d + j);
            }
        }
        for (std::size_t i = 0; i < c.layers; ++i)
        {
            const std::string n = "blocks." + std::to_string(i) + ".";
            auto w = [&](const std::string& name) -> const array<double>& { return value_of(p, n + name); };
            const matrix h = ref_layer_norm(x, T, w("ln_1.weight"), w("ln_1.bias"));
            const matrix heads = ref_attention(ref_linear(h, T, w("attn.W_Q")), ref_linear(h, T, w("attn.W_K")),
                                               ref_linear(h, T, w("attn.W_V")), T, H, G, dh);
            const matrix attn = ref_linear(heads, T, w("attn.W_O"));
            for (std::size_t e = 0; e < x.size(); ++e)
            {
                x[e] += attn[e];
            }
            matrix hidden = ref_linear(ref_layer_norm(x, T, w("ln_2.weight"), w("ln_2.bias")), T, w("mlp.W_fc"),
                                       &w("mlp.b_fc"));
            for (auto& e : hidden)
            {
                e = ref_gelu(e);
            }
            const matrix out = ref_linear(hidden, T, w("mlp.W_proj"), &w("mlp.b_proj"));
            for (std::size_t e = 0; e < x.size(); ++e)
            {
                x[e] += out[e];
            }
        }
        const matrix f = ref_layer_norm(x, T, p.ln_f_weight.value(), p.ln_f_bias.value());
        for (std::size_t t = 0; t < T; ++t)
        {
            for (std::size_t v = 0; v < V; ++v)
            {
                double acc = 0;
                for (std::size_t j = 0; j < d; ++j)
                {
                    acc += f[t * d + j] * p.wte.value().flat(v * d + j);
                }
                logits(b, t, v) = acc;
            }
        }
    }
    return logits;
}

// Mean over kept positions of logsumexp(logits) - logits[target], in long double.
inline double ref_loss(const array<double>& logits, const ids_t& targets)
{
    const std::size_t V = logits.shape()[2];
    long double total = 0;
    std::size_t kept = 0;
    for (std::size_t r = 0; r < targets.size(); ++r)
    {
        if (targets.flat(r) == -1)
        {
            continue;
        }
        long double top = -1e300L, sum = 0;
        for (std::size_t v = 0; v < V; ++v)
        {
            top = std::max<long double>(top, logits.flat(r * V + v));
        }
        for (std::size_t v = 0; v < V; ++v)
        {
            sum += std::exp(static_cast<long double>(logits.flat(r * V + v)) - top);
        }
        total += top + std::log(sum) - logits.flat(r * V + static_cast<std::size_t>(targets.flat(r)));
        ++kept;
    }
    return kept ? static_cast<double>(total / kept) : 0.0;
}
}  // namespace xgrad::test::gpt_reference
