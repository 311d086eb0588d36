// The module layer: a model declares each of its parameters once, in one `visit` walk over
// (name, parameter, declaration) triples, and everything that needs the parameters walks that one list:
// initialisation, named_parameters, zero_grad, binding to a tape, checkpoints, the optimiser, the tools.
//
//   struct my_model
//   {
//       parameter<float> W, b;
//       template <class F> void visit(F&& f)
//       {
//           f("W", W, declare::normal({4, 3}, 0.02));
//           f("b", b, declare::zeros({3}));
//       }
//   };
//   my_model m;
//   initialise(m, /*seed=*/1);               // draws in visit order from one seeded generator
//   auto params = named_parameters(m);       // handles sharing storage, each named
//
// The trainer (train/trainer.hpp) also asks a model for `forward(tape, tokens, targets, forward_options)`
// returning logits and loss, and for its checkpoint's metadata (io/checkpoint.hpp, save_module).
// A model whose parameters depend on its config (a variant without biases, say) simply does not call
// f for the parameters it lacks: the walk is the declaration.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "autodiff/tape.hpp"

namespace xgrad::models
{
// How a model's forward runs: the same struct for the GPT and for a user's module.
struct forward_options
{
    bool fused = true;  // fused norm / activation / attention / cross_entropy ops; false: composed from primitives
    // Inverted dropout with probability `dropout` where the model applies it, drawn from `generator`:
    // training only (no generator, no dropout). The GPT drops the embedding sum, each attention output
    // after W_O and each MLP output.
    double dropout = 0;
    std::mt19937_64* generator = nullptr;
    // Every named activation a node of its own, with a gradient after the backward (the first-divergence
    // report reads them). false lets the fused path merge nodes across one: the GPT's MLP then runs its
    // first linear and the GELU as one node (ops::linear_gelu) and lists no "blocks.{i}.mlp_hidden".
    // A training loop, which reads no activation, sets it false.
    bool every_activation = true;
};

// What a parameter is in its model, for optimisers that treat kinds apart (Muon takes the matrices, and
// AdamW decays matrices, embeddings and heads but neither norms nor biases).
enum class parameter_role
{
    matrix,       // a weight matrix inside the model (attention, MLP)
    embedding,    // a table looked up by index (wte, wpe)
    head,         // the output projection to the vocabulary
    norm_weight,  // a norm's gain
    bias,         // an additive vector
};

// How a parameter starts: N(0, std_dev) drawn in double and rounded to T, or a constant; and its role.
struct declaration
{
    enum class rule
    {
        normal,
        constant,
    };
    shape_t shape;
    rule how = rule::constant;
    double value = 0;           // the std_dev of a normal draw, or the constant
    std::string formula;        // the shape as the model's documentation writes it, e.g. "(d, 4d)"
    parameter_role role = parameter_role::matrix;
};

namespace declare
{
inline declaration normal(shape_t shape, double std_dev, std::string formula = "",
                          parameter_role role = parameter_role::matrix)
{
    return {std::move(shape), declaration::rule::normal, std_dev, std::move(formula), role};
}
inline declaration zeros(shape_t shape, std::string formula = "", parameter_role role = parameter_role::bias)
{
    return {std::move(shape), declaration::rule::constant, 0.0, std::move(formula), role};
}
inline declaration ones(shape_t shape, std::string formula = "", parameter_role role = parameter_role::norm_weight)
{
    return {std::move(shape), declaration::rule::constant, 1.0, std::move(formula), role};
}
}  // namespace declare

// The walk on a const model: parameters are handles whose copies share storage, so reading them
// through a const model is what the non-const walk does minus the assignment.
template <class Model, class F>
void visit_parameters(const Model& model, F&& f)
{
    const_cast<Model&>(model).visit(std::forward<F>(f));
}

// Fills every declared parameter: normal draws in visit order from one generator seeded by `seed`, so a
// seed gives the same model whatever T is. Each parameter is named as declared; gradients start at zero.
template <class Model>
void initialise(Model& model, std::uint64_t seed)
{
    std::mt19937_64 rng(seed);
    model.visit([&rng](const std::string& name, auto& p, const declaration& d) {
        using T = typename std::decay_t<decltype(p.value())>::value_type;
        array<T> value = array<T>::from_shape(d.shape);
        if (d.how == declaration::rule::normal)
        {
            std::normal_distribution<double> draw(0.0, d.value);
            for (auto& v : value)
            {
                v = static_cast<T>(draw(rng));
            }
        }
        else
        {
            std::fill(value.begin(), value.end(), static_cast<T>(d.value));
        }
        p = std::decay_t<decltype(p)>(std::move(value), name);
    });
}

// Every parameter in visit order; the handles share storage with the model.
template <class T, class Model>
std::vector<parameter<T>> named_parameters(const Model& model)
{
    std::vector<parameter<T>> all;
    visit_parameters(model, [&all](const std::string&, parameter<T>& p, const declaration&) { all.push_back(p); });
    return all;
}

// (name, declaration) in visit order, without touching the parameters' values: what a checkpoint
// reader checks a file against before it allocates anything.
template <class Model>
std::vector<std::pair<std::string, declaration>> declared_parameters(const Model& model)
{
    std::vector<std::pair<std::string, declaration>> all;
    visit_parameters(model,
                     [&all](const std::string& name, auto&, const declaration& d) { all.emplace_back(name, d); });
    return all;
}

template <class Model>
void zero_grad(Model& model)
{
    model.visit([](const std::string&, auto& p, const declaration&) { p.zero_grad(); });
}

// The number of scalars the model declares.
template <class Model>
std::uint64_t parameter_scalars(const Model& model)
{
    std::uint64_t n = 0;
    for (const auto& [name, d] : declared_parameters(model))
    {
        std::uint64_t size = 1;
        for (std::size_t extent : d.shape)
        {
            size *= extent;
        }
        n += size;
    }
    return n;
}
}  // namespace xgrad::models
