// The module layer (models/module.hpp): a model declared once in a visit walk gets initialisation,
// named_parameters, zero_grad, counting and checkpoints (io::save_module / load_module) from it; and the
// var conveniences that make a forward read like its math: scalar operators and item().
#include <doctest/doctest.h>

#include "autodiff/gradcheck.hpp"
#include "io/checkpoint.hpp"
#include "test_util.hpp"

namespace test_module
{
using namespace xgrad;

namespace
{
// y = tanh(x W + b) . v: three parameters, one of them declared only when `with_bias`.
template <class T>
struct small_model
{
    bool with_bias = true;
    parameter<T> W, b, v;

    template <class F>
    void visit(F&& f)
    {
        f("W", W, models::declare::normal({3, 4}, 0.5, "(3, 4)"));
        if (with_bias)
        {
            f("b", b, models::declare::ones({4}));
        }
        f("v", v, models::declare::normal({4}, 1.0));
    }
};
}  // namespace

TEST_CASE("initialise draws in visit order from one seeded generator; constants draw nothing")
{
    small_model<double> a, b, no_bias;
    no_bias.with_bias = false;
    models::initialise(a, 3);
    models::initialise(b, 3);
    models::initialise(no_bias, 3);
    CHECK(a.W.value() == b.W.value());
    CHECK(a.W.value() == no_bias.W.value());
    CHECK(a.v.value() == no_bias.v.value());  // the constant b between them drew nothing
    CHECK(a.b.value() == xt::ones<double>({4}));
    CHECK(a.W.name() == "W");
    small_model<float> f;
    models::initialise(f, 3);
    CHECK(f.W.value()(1, 2) == static_cast<float>(a.W.value()(1, 2)));  // drawn in double, rounded
    small_model<double> other;
    models::initialise(other, 4);
    CHECK(other.W.value() != a.W.value());
}

TEST_CASE("named_parameters, declared_parameters, parameter_scalars and zero_grad walk the declaration")
{
    small_model<double> m;
    models::initialise(m, 1);
    auto named = models::named_parameters<double>(m);
    REQUIRE(named.size() == 3);
    CHECK(named[0].name() == "W");
    CHECK(named[2].name() == "v");
    CHECK(models::parameter_scalars(m) == 12 + 4 + 4);
    const auto declared = models::declared_parameters(m);
    CHECK(declared[0].second.formula == "(3, 4)");
    CHECK(declared[1].second.shape == shape_t{4});
    m.W.grad() = xt::ones<double>({3, 4});
    named[0].value()(0, 0) = 7;  // a handle shares the model's storage
    CHECK(m.W.value()(0, 0) == 7);
    models::zero_grad(m);
    CHECK(m.W.grad() == xt::zeros<double>({3, 4}));
}

TEST_CASE("save_module and load_module: a round trip, and every disagreement named")
{
    test::temp_dir dir;
    small_model<double> m;
    models::initialise(m, 1);
    const std::string path = dir / "m.safetensors";
    io::checkpoint_extras extras;
    extras.metadata["note"] = "kept";
    extras.tensors["optim.state"] = {"F64", xt::zeros<double>({2})};
    io::save_module(path, m, {{"kind", "small"}}, extras);

    small_model<float> back;
    const io::checkpoint_extras read = io::load_module(path, back, {{"kind", "small"}});
    CHECK(back.W.value()(2, 3) == static_cast<float>(m.W.value()(2, 3)));
    CHECK(back.b.name() == "b");
    CHECK(read.metadata.at("note") == "kept");
    CHECK(read.tensors.count("optim.state") == 1);

    small_model<double> no_bias;
    no_bias.with_bias = false;
    models::initialise(no_bias, 2);
    CHECK_THROWS_WITH_AS(io::load_module(path, no_bias, {}), doctest::Contains("unknown tensor 'b' with shape (4)"),
                         io::format_error);
    io::save_module(dir / "nb.safetensors", no_bias, {});
    CHECK_THROWS_WITH_AS(io::load_module(dir / "nb.safetensors", back, {}), doctest::Contains("tensor 'b' is missing"),
                         io::format_error);
    CHECK_THROWS_WITH_AS(io::load_module(path, back, {{"kind", "large"}}),
                         doctest::Contains("metadata 'kind' is 'small' but the model has 'large'"), io::format_error);
    io::checkpoint_extras bad;
    bad.tensors["m.W"] = {"F64", xt::zeros<double>({1})};
    CHECK_THROWS_WITH_AS(io::save_module(dir / "bad.safetensors", m, {}, bad),
                         doctest::Contains("extra tensor 'm.W' must be optimiser state"), std::invalid_argument);
}

TEST_CASE("scalar operators on vars: values and gradients against central differences")
{
    const array<double> x0 = test::random_array({2, 3}, 7);
    auto f = [](tape<double>&, const std::vector<var<double>>& x) {
        const var<double>& a = x[0];
        return ops::sum(a * 2 + 1.5 * a - a / 4 + (1 + a) * (2 - a) - (a - 1) * 3 + (-a) * 0.5);
    };
    XGRAD_CHECK_GRADIENTS(f, {x0});
    tape<double> t;
    const var<double> a = t.input(x0);
    const array<double> expected = x0 * 2 + 1.5 * x0 - x0 / 4 + (1 + x0) * (2 - x0) - (x0 - 1) * 3 - x0 * 0.5;
    XGRAD_CHECK_CLOSE((a * 2 + 1.5 * a - a / 4 + (1 + a) * (2 - a) - (a - 1) * 3 + (-a) * 0.5).value(), expected,
                      1e-15, 1e-15);
    var<float> s = tape<float>().input(array<float>(2.5f)) * 2;
    CHECK(s.item() == 5.0f);
}

TEST_CASE("item: the value of a one-element var; anything else is an error naming the shape")
{
    tape<double> t;
    CHECK(ops::sum(t.input(xt::ones<double>({2, 2}))).item() == 4.0);
    CHECK(t.input(xt::ones<double>({1, 1})).item() == 1.0);
    const std::string message = test::invalid_argument_message([&] { t.input(xt::ones<double>({2, 3})).item(); });
    CHECK(test::contains(message, "item"));
    CHECK(test::contains(message, "(2, 3)"));
}
}  // namespace test_module
