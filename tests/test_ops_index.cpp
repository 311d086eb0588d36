// slice, concat and embedding: forward values against loop references, gradients against central
// differences (float64) and against hand counts, size-1 and full-range cases, many-part concats (built as
// a tree of nodes of at most four inputs), NaN propagation, float32 against float64, and the argument
// errors with the op's name and the offending shapes or values in the message.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "test_util.hpp"

namespace test_ops_index
{
using namespace xgrad;
using namespace xgrad::test;

namespace
{
// x[..., begin:end, ...] along `axis`, element by element.
f64 ref_slice(const f64& x, std::size_t axis, std::size_t begin, std::size_t end)
{
    const shape_t in = to_shape(x.shape());
    shape_t out_shape = in;
    out_shape[axis] = end - begin;
    f64 out = f64::from_shape(out_shape);
    for (std::size_t i = 0; i < out.size(); ++i)
    {
        auto index = unravel(i, out_shape);
        index[axis] += begin;
        out.flat(i) = x.flat(ravel(index, in));
    }
    return out;
}

// The parts joined along `axis`, element by element: output index k along the axis belongs to the part
// whose range [offset, offset + length) holds k.
f64 ref_concat(const std::vector<f64>& parts, std::size_t axis)
{
    shape_t out_shape = to_shape(parts.front().shape());
    out_shape[axis] = 0;
    for (const auto& p : parts)
    {
        out_shape[axis] += p.shape()[axis];
    }
    f64 out = f64::from_shape(out_shape);
    for (std::size_t i = 0; i < out.size(); ++i)
    {
        auto index = unravel(i, out_shape);
        std::size_t part = 0;
        while (index[axis] >= parts[part].shape()[axis])
        {
            index[axis] -= parts[part].shape()[axis];
            ++part;
        }
        out.flat(i) = parts[part].flat(ravel(index, to_shape(parts[part].shape())));
    }
    return out;
}

std::vector<var<double>> inputs_of(tape<double>& t, const std::vector<f64>& values)
{
    std::vector<var<double>> vs;
    for (const auto& v : values)
    {
        vs.push_back(t.input(v));
    }
    return vs;
}

// Parts for a concat along `axis` of shapes equal to `base` except along the axis, where part k has
// length lengths[k].
std::vector<f64> concat_parts(const shape_t& base, std::size_t axis, const std::vector<std::size_t>& lengths,
                              unsigned seed)
{
    std::vector<f64> parts;
    for (auto length : lengths)
    {
        shape_t shape = base;
        shape[axis] = length;
        parts.push_back(random_array(shape, seed++));
    }
    return parts;
}
}  // namespace

// ---- slice -----------------------------------------------------------------------------------------

TEST_CASE("slice: forward matches a loop reference on every axis, full range, one element, empty")
{
    const f64 X = random_array({2, 3, 4}, 1);
    tape<double> t;
    auto x = t.input(X);
    for (std::size_t axis = 0; axis < 3; ++axis)
    {
        const std::size_t n = X.shape()[axis];
        for (std::size_t begin = 0; begin <= n; ++begin)
        {
            for (std::size_t end = begin; end <= n; ++end)
            {
                CAPTURE(axis);
                CAPTURE(begin);
                CAPTURE(end);
                const auto y = ops::slice(x, axis, begin, end);
                CHECK(std::string(y.op()) == "slice");
                XGRAD_CHECK_CLOSE(y.value(), ref_slice(X, axis, begin, end), 0.0, 0.0);
            }
        }
    }
    CHECK(ops::slice(x, 1, 0, 3).value() == X);  // the full range is the input
    const f64 one = ops::slice(ops::slice(ops::slice(x, 0, 1, 2), 1, 2, 3), 2, 3, 4).value();
    CHECK(one.shape() == std::vector<std::size_t>{1, 1, 1});
    CHECK(one.flat(0) == X(1, 2, 3));
    CHECK(ops::slice(x, 2, 2, 2).shape() == shape_t{2, 3, 0});
}

TEST_CASE("slice: gradcheck, and the gradient is g inside the range and 0 outside")
{
    struct slice_case
    {
        shape_t shape;
        std::size_t axis, begin, end;
    };
    const std::vector<slice_case> cases = {
        {{1}, 0, 0, 1},          {{5}, 0, 1, 4},          {{1, 1}, 1, 0, 1},       {{2, 3, 4}, 0, 1, 2},
        {{2, 3, 4}, 1, 0, 3},    {{2, 3, 4}, 1, 1, 2},    {{2, 3, 4}, 2, 1, 3},    {{3, 1, 2, 5}, 3, 4, 5},
    };
    unsigned seed = 10;
    for (const auto& c : cases)
    {
        CAPTURE(shape_str(c.shape));
        CAPTURE(c.axis);
        XGRAD_CHECK_GRADIENTS(
            [c](tape<double>&, const vars& v) { return ops::slice(v[0], c.axis, c.begin, c.end); },
            {random_array(c.shape, seed++)});
    }

    // L = sum(slice(x) * G): dL/dx = G where the slice read x, 0 elsewhere.
    const f64 X = random_array({3, 4}, 20), G = random_array({3, 2}, 21);
    tape<double> t;
    auto x = t.input(X);
    t.backward(ops::sum(ops::mul(ops::slice(x, 1, 1, 3), t.constant(G))));
    const f64 expected = {{0.0, G(0, 0), G(0, 1), 0.0}, {0.0, G(1, 0), G(1, 1), 0.0}, {0.0, G(2, 0), G(2, 1), 0.0}};
    CHECK(x.grad() == expected);
}

TEST_CASE("slice: two slices of one input sum their gradients; NaN is copied; float32 equals float64")
{
    const f64 X = random_array({4, 3}, 30);
    tape<double> t;
    auto x = t.input(X);
    t.backward(ops::sum(ops::add(ops::slice(x, 0, 0, 3), ops::slice(x, 0, 1, 4))));
    const f64 expected = {{1.0, 1.0, 1.0}, {2.0, 2.0, 2.0}, {2.0, 2.0, 2.0}, {1.0, 1.0, 1.0}};
    CHECK(x.grad() == expected);

    f64 with_nan = X;
    with_nan(2, 1) = std::numeric_limits<double>::quiet_NaN();
    tape<double> t2;
    const f64 y = ops::slice(t2.input(with_nan), 0, 1, 3).value();
    CHECK(std::isnan(y(1, 1)));
    CHECK(std::isfinite(y(0, 1)));

    tape<float> t32;
    const f32 y32 = ops::slice(t32.input(to_float_type<float>(X)), 1, 1, 3).value();
    XGRAD_CHECK_CLOSE(y32, to_float_type<float>(ref_slice(X, 1, 1, 3)), 0.0, 0.0);
}

TEST_CASE("slice: bad axis or range names the op, the range and the shape")
{
    tape<double> t;
    auto x = t.input(filled<double>({2, 3, 4}, 1.0));
    std::string message = invalid_argument_message([&] { ops::slice(x, 3, 0, 1); });
    CHECK(contains(message, "slice"));
    CHECK(contains(message, "axis 3"));
    CHECK(contains(message, "(2, 3, 4)"));
    message = invalid_argument_message([&] { ops::slice(x, 1, 1, 4); });
    CHECK(contains(message, "slice"));
    CHECK(contains(message, "[1, 4)"));
    CHECK(contains(message, "(2, 3, 4)"));
    message = invalid_argument_message([&] { ops::slice(x, 2, 3, 2); });
    CHECK(contains(message, "[3, 2)"));
    CHECK_THROWS_AS(ops::slice(t.input(filled<double>({}, 1.0)), 0, 0, 1), std::invalid_argument);
    CHECK(t.size() == 2);  // nothing recorded by the failed calls
}

// ---- concat ----------------------------------------------------------------------------------------

TEST_CASE("concat of 1, 2 and 5 parts along every axis: forward against a loop reference, gradcheck")
{
    const shape_t base = {2, 3, 2};
    const std::vector<std::vector<std::size_t>> length_lists = {{2}, {1, 3}, {2, 1, 3, 1, 2}};
    unsigned seed = 40;
    for (std::size_t axis = 0; axis < base.size(); ++axis)
    {
        for (const auto& lengths : length_lists)
        {
            CAPTURE(axis);
            CAPTURE(lengths.size());
            const auto parts = concat_parts(base, axis, lengths, seed);
            seed += static_cast<unsigned>(lengths.size());
            tape<double> t;
            const auto y = ops::concat(inputs_of(t, parts), axis);
            CHECK(std::string(y.op()) == "concat");
            XGRAD_CHECK_CLOSE(y.value(), ref_concat(parts, axis), 0.0, 0.0);
            XGRAD_CHECK_GRADIENTS([axis](tape<double>&, const vars& v) { return ops::concat(v, axis); }, parts);
        }
    }
}

TEST_CASE("concat of many parts is a tree of nodes with at most four inputs each")
{
    for (std::size_t count : {4, 5, 16, 17, 23})
    {
        CAPTURE(count);
        const auto parts = concat_parts({2, 1, 3}, 1, std::vector<std::size_t>(count, 1), 100);
        tape<double> t;
        auto inputs = inputs_of(t, parts);
        const auto y = ops::concat(inputs, 1);
        XGRAD_CHECK_CLOSE(y.value(), ref_concat(parts, 1), 0.0, 0.0);
        std::size_t concat_nodes = 0;
        for (const auto& n : t.nodes())
        {
            if (n.op == "concat")
            {
                ++concat_nodes;
                CHECK(n.inputs.size() <= max_inputs);
                CHECK(n.inputs.size() >= 2);
            }
        }
        // Groups of four, level by level: 4 -> 1 node, 5 -> 2, 16 -> 5, 17 -> 6, 23 -> 9.
        const std::size_t expected_nodes = count == 4 ? 1 : count == 5 ? 2 : count == 16 ? 5 : count == 17 ? 6 : 9;
        CHECK(concat_nodes == expected_nodes);
        // L = sum(y * G): part k's gradient is G's column k.
        const f64 G = random_array(to_shape(y.value().shape()), 7);
        t.backward(ops::sum(ops::mul(y, t.constant(G))));
        for (std::size_t k = 0; k < count; ++k)
        {
            CHECK(inputs[k].grad() == ref_slice(G, 1, k, k + 1));
        }
    }
    const auto parts = concat_parts({2, 2}, 0, {1, 2, 1, 1, 2, 1, 1, 3, 1}, 200);
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::concat(v, 0); }, parts);
}

TEST_CASE("concat: a part used twice receives both gradients; size-1 parts; NaN; float32 equals float64")
{
    const f64 A = random_array({2, 2}, 50);
    tape<double> t;
    auto a = t.input(A);
    auto b = t.input(random_array({2, 1}, 51));
    t.backward(ops::sum(ops::concat(std::vector<var<double>>{a, b, a}, 1)));
    CHECK(a.grad() == filled<double>({2, 2}, 2.0));
    CHECK(b.grad() == filled<double>({2, 1}, 1.0));

    const std::vector<f64> ones = {filled<double>({1}, 1.5), filled<double>({1}, -2.0)};
    tape<double> t1;
    const f64 expected = {1.5, -2.0};
    CHECK(ops::concat(inputs_of(t1, ones), 0).value() == expected);

    f64 with_nan = A;
    with_nan(1, 0) = std::numeric_limits<double>::quiet_NaN();
    tape<double> t2;
    const f64 y = ops::concat(inputs_of(t2, {A, with_nan}), 0).value();
    CHECK(std::isnan(y(3, 0)));
    CHECK(std::count_if(y.begin(), y.end(), [](double v) { return std::isnan(v); }) == 1);

    const auto parts = concat_parts({3, 2}, 1, {1, 2, 1, 3, 2}, 60);
    tape<float> t32;
    std::vector<var<float>> parts32;
    for (const auto& p : parts)
    {
        parts32.push_back(t32.input(to_float_type<float>(p)));
    }
    XGRAD_CHECK_CLOSE(ops::concat(parts32, 1).value(), to_float_type<float>(ref_concat(parts, 1)), 0.0, 0.0);
}

TEST_CASE("concat: bad arguments name the op and every part's shape")
{
    tape<double> t;
    auto a = t.input(filled<double>({2, 3}, 1.0));
    auto b = t.input(filled<double>({4, 3}, 1.0));
    auto c = t.input(filled<double>({2, 3, 1}, 1.0));
    std::string message = invalid_argument_message([&] { ops::concat(std::vector<var<double>>{a, b}, 1); });
    CHECK(contains(message, "concat"));
    CHECK(contains(message, "(2, 3)"));
    CHECK(contains(message, "(4, 3)"));
    CHECK(contains(message, "axis 1"));
    message = invalid_argument_message([&] { ops::concat(std::vector<var<double>>{a, c}, 0); });
    CHECK(contains(message, "(2, 3, 1)"));
    message = invalid_argument_message([&] { ops::concat(std::vector<var<double>>{a, a}, 2); });
    CHECK(contains(message, "concat"));
    CHECK(contains(message, "axis 2"));
    CHECK(contains(message, "(2, 3)"));
    CHECK(contains(invalid_argument_message([&] { ops::concat(std::vector<var<double>>{}, 0); }), "concat"));
    // A mismatch in the last of many parts fails before any node is recorded.
    std::vector<var<double>> many(9, a);
    many.push_back(c);
    CHECK(contains(invalid_argument_message([&] { ops::concat(many, 0); }), "(2, 3, 1)"));
    tape<double> other;
    many.back() = other.input(filled<double>({2, 3}, 1.0));
    CHECK(contains(invalid_argument_message([&] { ops::concat(many, 0); }), "different tapes"));
    CHECK(t.size() == 3);
}

// ---- embedding -------------------------------------------------------------------------------------

TEST_CASE("embedding: rows gathered for ids of shape (), (1), (4) and (2, 3)")
{
    const f64 W = random_array({5, 3}, 70);
    const std::vector<std::pair<shape_t, std::vector<std::int64_t>>> cases = {
        {{}, {4}}, {{1}, {0}}, {{4}, {3, 3, 0, 4}}, {{2, 3}, {1, 0, 4, 2, 2, 3}}};
    for (const auto& c : cases)
    {
        CAPTURE(shape_str(c.first));
        const ids_t ids = make_ids(c.first, c.second);
        tape<double> t;
        const auto y = ops::embedding(t.input(W), ids);
        CHECK(std::string(y.op()) == "embedding");
        shape_t expected_shape = c.first;
        expected_shape.push_back(3);
        REQUIRE(y.shape() == expected_shape);
        for (std::size_t i = 0; i < ids.size(); ++i)
        {
            for (std::size_t j = 0; j < 3; ++j)
            {
                CHECK(y.value().flat(i * 3 + j) == W(static_cast<std::size_t>(c.second[i]), j));
            }
        }
    }
    // V = 1, d = 1.
    tape<double> t;
    const f64 w11 = filled<double>({1, 1}, 0.25);
    auto w = t.input(w11);
    const auto y = ops::embedding(w, make_ids({3}, {0, 0, 0}));
    CHECK(y.value() == filled<double>({3, 1}, 0.25));
    t.backward(ops::sum(y));
    CHECK(w.grad() == filled<double>({1, 1}, 3.0));
}

TEST_CASE("embedding: repeated ids accumulate their gradients (against a hand count)")
{
    // ids = [[2, 0, 2], [2, 4, 0]] into V = 5 rows: id 2 three times, 0 twice, 4 once, 1 and 3 never.
    const ids_t ids = make_ids({2, 3}, {2, 0, 2, 2, 4, 0});
    tape<double> t;
    auto w = t.input(random_array({5, 2}, 80));
    t.backward(ops::sum(ops::embedding(w, ids)));
    const f64 counts = {{2.0, 2.0}, {0.0, 0.0}, {3.0, 3.0}, {0.0, 0.0}, {1.0, 1.0}};
    CHECK(w.grad() == counts);

    // L = sum(y * G): dW[v] = sum of G's rows at the positions holding v.
    const f64 G = {{{1.0, 10.0}, {2.0, 20.0}, {3.0, 30.0}}, {{4.0, 40.0}, {5.0, 50.0}, {6.0, 60.0}}};
    tape<double> t2;
    auto w2 = t2.input(random_array({5, 2}, 81));
    t2.backward(ops::sum(ops::mul(ops::embedding(w2, ids), t2.constant(G))));
    const f64 expected = {{2.0 + 6.0, 20.0 + 60.0}, {0.0, 0.0}, {1.0 + 3.0 + 4.0, 10.0 + 30.0 + 40.0}, {0.0, 0.0},
                          {5.0, 50.0}};
    CHECK(w2.grad() == expected);
}

TEST_CASE("embedding: gradcheck with repeated ids; a parameter's gradient accumulates over steps")
{
    const ids_t ids = make_ids({3, 4}, {1, 1, 0, 6, 3, 1, 6, 6, 2, 0, 1, 5});
    XGRAD_CHECK_GRADIENTS([ids](tape<double>&, const vars& v) { return ops::embedding(v[0], ids); },
                          {random_array({7, 3}, 90)});
    XGRAD_CHECK_GRADIENTS([](tape<double>&, const vars& v) { return ops::embedding(v[0], make_ids({}, {0})); },
                          {random_array({1, 4}, 91)});

    parameter<double> wte(random_array({4, 2}, 92));
    for (int step = 0; step < 2; ++step)
    {
        tape<double> t;
        t.backward(ops::sum(ops::embedding(t.param(wte), make_ids({2}, {3, 3}))));
    }
    const f64 expected = {{0.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}, {4.0, 4.0}};
    CHECK(wte.grad() == expected);
}

TEST_CASE("embedding: NaN rows are copied where picked; float32 equals float64; large gather")
{
    f64 W = random_array({4, 3}, 100);
    W(2, 1) = std::numeric_limits<double>::quiet_NaN();
    tape<double> t;
    const f64 y = ops::embedding(t.input(W), make_ids({3}, {2, 0, 2})).value();
    CHECK(std::isnan(y(0, 1)));
    CHECK(std::isnan(y(2, 1)));
    CHECK(std::count_if(y.begin(), y.end(), [](double v) { return std::isnan(v); }) == 2);

    const f64 W64 = random_array({50, 16}, 101);
    ids_t ids = ids_t::from_shape({8, 64});
    for (std::size_t i = 0; i < ids.size(); ++i)
    {
        ids.flat(i) = static_cast<std::int64_t>((i * 37 + 11) % 50);
    }
    tape<float> t32;
    tape<double> t64;
    auto w32 = t32.input(to_float_type<float>(W64));
    auto w64 = t64.input(W64);
    const auto y32 = ops::embedding(w32, ids);
    const auto y64 = ops::embedding(w64, ids);
    XGRAD_CHECK_CLOSE(y32.value(), to_float_type<float>(y64.value()), 0.0, 0.0);
    t32.backward(ops::sum(y32));
    t64.backward(ops::sum(y64));
    XGRAD_CHECK_CLOSE(w32.grad(), to_float_type<float>(w64.grad()), 0.0, 0.0);  // small integer counts
    // Every id is (37 i + 11) mod 50 for i < 512: id v appears 10 or 11 times.
    f64 counts = filled<double>({50, 16}, 0.0);
    for (std::size_t i = 0; i < ids.size(); ++i)
    {
        for (std::size_t j = 0; j < 16; ++j)
        {
            counts(static_cast<std::size_t>(ids.flat(i)), j) += 1.0;
        }
    }
    CHECK(w64.grad() == counts);
}

TEST_CASE("embedding: an id outside [0, V) or a weight that is not 2-D names the op, id, position, shape")
{
    tape<double> t;
    auto w = t.input(filled<double>({5, 3}, 1.0));
    std::string message = invalid_argument_message([&] { ops::embedding(w, make_ids({2, 3}, {0, 1, 2, 3, 4, 5})); });
    CHECK(contains(message, "embedding"));
    CHECK(contains(message, "id 5"));
    CHECK(contains(message, "(1, 2)"));  // the position of the bad id
    CHECK(contains(message, "(5, 3)"));  // the weight's shape
    message = invalid_argument_message([&] { ops::embedding(w, make_ids({3}, {0, -1, 2})); });
    CHECK(contains(message, "id -1"));
    CHECK(contains(message, "(1)"));
    message = invalid_argument_message([&] { ops::embedding(t.input(filled<double>({5}, 1.0)), make_ids({1}, {0})); });
    CHECK(contains(message, "embedding"));
    CHECK(contains(message, "(5)"));
    CHECK_THROWS_AS(ops::embedding(t.input(filled<double>({2, 2, 2}, 1.0)), make_ids({1}, {0})),
                    std::invalid_argument);
    CHECK_THROWS_AS(ops::embedding(t.input(filled<double>({0, 2}, 1.0)), make_ids({1}, {0})),
                    std::invalid_argument);
    CHECK(t.size() == 4);  // the three weights made above, nothing else
}
}  // namespace test_ops_index
