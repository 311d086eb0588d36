// A tiny training run: a student MHA layer learns to imitate a teacher MHA layer with hidden weights.
// Shows the training-loop pattern: parameters outlive tapes, a fresh tape per step, backward adds into
// the parameters' gradients, the optimiser reads them, zero_grad clears them.
//
// Usage: train_tiny [--steps N]   (default 300; --help prints the usage)
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "examples/command_line.hpp"
#include "models/mha.hpp"

using namespace xgrad;
using namespace xgrad::models;

int main(int argc, char** argv)
{
    examples::command_line cli{"A student MHA layer learns to imitate a teacher: the pattern of a training loop", "train_tiny"};
    int steps = 300;
    cli.add_option("--steps", steps, "training steps").positive();
    if (const auto status = cli.parse(argc, argv))
    {
        return *status;
    }
    const mha_config config{16, 4};
    const std::size_t B = 8, T = 12;
    auto teacher = mha_parameters<float>::init(config, 1);
    auto student = mha_parameters<float>::init(config, 2);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    const float learning_rate = 0.5f;

    std::printf("student MHA (d=%zu, H=%zu, %llu parameters) imitating a teacher, causal, B=%zu T=%zu, SGD lr=%.2f\n",
                config.d_model, config.heads, static_cast<unsigned long long>(parameter_count(config)), B, T,
                learning_rate);
    std::printf("%6s  %12s\n", "step", "mse loss");
    mha_options causal;
    causal.causal = true;
    for (int step = 0; step <= steps; ++step)
    {
        array<float> x = array<float>::from_shape({B, T, config.d_model});
        for (auto& v : x)
        {
            v = normal(rng);
        }
        tape<float> t;
        var<float> input = t.input(x, "X", false);
        array<float> target;
        {
            auto no_grad = t.no_grad();  // the teacher's forward records no backward rules
            target = self_attention(input, bind(t, teacher), config, causal).output.value();
        }
        var<float> y = self_attention(input, bind(t, student), config, causal).output;
        var<float> diff = y - t.constant(target, "target");
        var<float> loss = ops::mean(diff * diff);
        t.backward(loss);
        if (step % (steps / 10 > 0 ? steps / 10 : 1) == 0)
        {
            std::printf("%6d  %12.6f\n", step, loss.value()());
        }
        for (auto* p : {&student.W_Q, &student.W_K, &student.W_V, &student.W_O})
        {
            p->value() -= learning_rate * p->grad();
        }
        student.zero_grad();
    }
    return 0;
}
