// Assignment 3, the C++ half: multi-head attention's backward by hand on xtensor arrays, checked against
// the library's hand-derived one (models/mha_manual.hpp, Listing 20.3).
//
// The forward is the library's (manual::mha_forward): its cache holds X, the weights, the split heads
// q, k, v (B, H, T, dh), the softmax weights P (B, H, T, T) and the joined heads (B, T, d). Write
// my_mha_backward below; this program compares each of your gradients with the library's, in backward
// order, and prints "PASS 3.2 mha_backward (C++)" or the first wrong gradient; exit status 0 iff right.
//
// Build against an installed xgrad (cmake --install build --prefix P):
//   cmake -S cpp -B cpp/build -DCMAKE_PREFIX_PATH=P && cmake --build cpp/build && cpp/build/a3_mha_backward
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xrandom.hpp>

#include "autodiff/compare.hpp"
#include "models/mha_manual.hpp"

namespace manual = xgrad::models::manual;
using array = xgrad::array<double>;

// dL/d(xq, xk, xv, W_Q, W_K, W_V, W_O) from dL/d output (B, T, d) and the forward's cache.
// manual::split_heads and manual::combine_heads may help; the library's own answer is
// manual::mha_backward (do not call it here).
manual::mha_gradients<double> my_mha_backward(const array& grad_output,
                                              const manual::mha_cache<double>& cache)
{
#ifdef XGRAD_COURSE_REFERENCE
    return manual::mha_backward(grad_output, cache);  // the tests' reference solution: the library's path
#else
    (void)grad_output;
    (void)cache;
    throw std::logic_error("not implemented yet: write my_mha_backward");
#endif
}

int main()
{
    const xgrad::models::mha_config config{8, 2, 0};
    xt::random::seed(34);
    const array x = xt::random::randn<double>({2, 4, 8});
    std::vector<array> w;
    for (int k = 0; k < 4; ++k)
    {
        w.push_back(0.5 * xt::random::randn<double>({8, 8}));
    }
    const array grad_output = xt::random::randn<double>({2, 4, 8});
    xgrad::models::mha_options options;
    options.causal = true;
    const auto forward = manual::mha_forward(x, x, x, w[0], w[1], w[2], w[3], config, options);
    const auto reference = manual::mha_backward(grad_output, forward.cache);
    try
    {
        const auto mine = my_mha_backward(grad_output, forward.cache);
        const std::vector<std::pair<std::string, std::pair<const array*, const array*>>> in_backward_order{
            {"W_O", {&mine.w_o, &reference.w_o}}, {"W_Q", {&mine.w_q, &reference.w_q}},
            {"W_K", {&mine.w_k, &reference.w_k}}, {"W_V", {&mine.w_v, &reference.w_v}},
            {"Xq", {&mine.xq, &reference.xq}},    {"Xk", {&mine.xk, &reference.xk}},
            {"Xv", {&mine.xv, &reference.xv}}};
        for (const auto& [name, pair] : in_backward_order)
        {
            if (pair.first->shape() != pair.second->shape())
            {
                std::printf("FAIL 3.2 mha_backward (C++): first wrong gradient '%s': wrong shape\n",
                            name.c_str());
                return 1;
            }
            const xgrad::difference d = xgrad::compare(*pair.first, *pair.second);
            if (!d.within(1e-10, 1e-7))
            {
                std::printf("FAIL 3.2 mha_backward (C++): first wrong gradient '%s': "
                            "max |mine - reference| = %.3g, relative %.3g\n",
                            name.c_str(), d.max_abs, d.max_rel);
                return 1;
            }
        }
    }
    catch (const std::exception& e)
    {
        std::printf("FAIL 3.2 mha_backward (C++): %s\n", e.what());
        return 1;
    }
    std::printf("PASS 3.2 mha_backward (C++)\n");
    return 0;
}
