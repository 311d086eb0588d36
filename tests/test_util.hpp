// Helpers shared by the tests: temporary folders and whole-file reads, seeded random arrays, masks and
// token ids, loop-written reference implementations (no xtensor expressions, so no lazy-reducer traps),
// closeness checks, float32 against float64, the weighted sum for tape-free backward checks, the message of
// an expected std::invalid_argument, and a gradcheck wrapper that prints the report when it fails.
#pragma once

#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "autodiff/compare.hpp"
#include "autodiff/gradcheck.hpp"
#include "ops/ops.hpp"

namespace xgrad::test
{
using f64 = array<double>;
using f32 = array<float>;
using vars = std::vector<var<double>>;

// Whether this program runs under AddressSanitizer, whose shadow memory and quarantine inflate resident
// memory: the tests of peak memory check their bounds in the plain build only.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool under_address_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool under_address_sanitizer = true;
#else
inline constexpr bool under_address_sanitizer = false;
#endif
#else
inline constexpr bool under_address_sanitizer = false;
#endif

// ---- files ---------------------------------------------------------------------------------------

// A fresh directory under the system's temp folder, removed with everything in it when the test ends.
struct temp_dir
{
    std::filesystem::path path;
    temp_dir()
    {
        std::string pattern = (std::filesystem::temp_directory_path() / "xgrad-test-XXXXXX").string();
        REQUIRE(mkdtemp(pattern.data()) != nullptr);
        path = pattern;
    }
    ~temp_dir()
    {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// A practice text with structure to learn: `count` words drawn at random (std::mt19937 seeded with `seed`)
// from `words`, each word carrying its own trailing blank or newline.
inline std::string practice_text(int count = 1500, unsigned seed = 3,
                                 const std::vector<std::string>& words = {"the ", "cat ", "sat ", "on ", "a ", "mat. ",
                                                                          "dogs ", "run ", "fast!\n"})
{
    std::string text;
    std::mt19937 rng(seed);
    for (int i = 0; i < count; ++i)
    {
        text += words[rng() % words.size()];
    }
    return text;
}

inline std::string read_bytes(const std::string& path)
{
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void write_bytes(const std::string& path, const std::string& bytes)
{
    std::ofstream f(path, std::ios::binary);
    f << bytes;
}

// The names of the entries of a folder.
inline std::set<std::string> listing(const std::filesystem::path& dir)
{
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
    {
        names.insert(e.path().filename().string());
    }
    return names;
}

// ---- running a tool ------------------------------------------------------------------------------

// What one run of a command-line tool returned and printed.
struct tool_run
{
    int status = -1;
    std::string out, err;
};

inline std::string quote(const std::filesystem::path& p)
{
    return "'" + p.string() + "'";
}

// Runs `tool` with `args` (already shell-quoted where needed) inside the folder `scratch`, capturing
// stdout and stderr; a tool killed by a signal fails the test.
inline tool_run run_tool(const std::string& tool, const temp_dir& scratch, const std::string& args)
{
    const std::string out = scratch / ".stdout.txt", err = scratch / ".stderr.txt";
    const std::string command =
        "cd " + quote(scratch.path) + " && " + quote(tool) + " " + args + " >" + quote(out) + " 2>" + quote(err);
    const int raw = std::system(command.c_str());
    INFO(command);
    REQUIRE(raw != -1);
    REQUIRE_FALSE(WIFSIGNALED(raw));
    tool_run r{WEXITSTATUS(raw), read_bytes(out), read_bytes(err)};
    CHECK(r.status < 128);  // the shell reports a child killed by a signal as 128 + signal
    std::filesystem::remove(out);
    std::filesystem::remove(err);
    return r;
}

// ---- seeded data ---------------------------------------------------------------------------------

// Normal values with standard deviation `scale`, in any float type (MHA inputs and weights).
template <class T>
array<T> normal_array(const shape_t& shape, unsigned seed, double scale = 1.0)
{
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal(0.0, scale);
    array<T> a = array<T>::from_shape(shape);
    for (auto& x : a)
    {
        x = static_cast<T>(normal(rng));
    }
    return a;
}

// Uniform values in [lo, hi).
inline f64 random_array(const shape_t& shape, unsigned seed, double lo = -1.0, double hi = 1.0)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> uniform(lo, hi);
    f64 a = f64::from_shape(shape);
    for (auto& v : a)
    {
        v = uniform(rng);
    }
    return a;
}

// Values with |v| in [min_abs, max_abs] and a random sign: keeps relu's kink out of the differences.
inline f64 random_away_from_zero(const shape_t& shape, unsigned seed, double min_abs = 0.1,
                                 double max_abs = 1.0)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> magnitude(min_abs, max_abs);
    std::bernoulli_distribution negative(0.5);
    f64 a = f64::from_shape(shape);
    for (auto& v : a)
    {
        v = negative(rng) ? -magnitude(rng) : magnitude(rng);
    }
    return a;
}

inline mask_t random_mask(const shape_t& shape, unsigned seed, double p_keep = 0.6)
{
    std::mt19937 rng(seed);
    std::bernoulli_distribution keep(p_keep);
    mask_t m = mask_t::from_shape(shape);
    for (auto& v : m)
    {
        v = keep(rng);
    }
    return m;
}

inline mask_t full_mask(const shape_t& shape, bool value)
{
    mask_t m = mask_t::from_shape(shape);
    std::fill(m.begin(), m.end(), value);
    return m;
}

// Ids of `shape` holding `values` in row-major order.
inline ids_t make_ids(const shape_t& shape, const std::vector<std::int64_t>& values)
{
    ids_t ids = ids_t::from_shape(shape);
    std::copy(values.begin(), values.end(), ids.begin());
    return ids;
}

// (batch, length) token ids drawn uniformly from [0, vocab).
inline ids_t random_ids(std::size_t batch, std::size_t length, std::size_t vocab, unsigned seed)
{
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::int64_t> id(0, static_cast<std::int64_t>(vocab) - 1);
    ids_t ids = ids_t::from_shape({batch, length});
    for (auto& v : ids)
    {
        v = id(rng);
    }
    return ids;
}

template <class T>
array<T> filled(const shape_t& shape, T value)
{
    array<T> a = array<T>::from_shape(shape);
    std::fill(a.begin(), a.end(), value);
    return a;
}

template <class T>
array<T> to_float_type(const f64& a)
{
    array<T> out = array<T>::from_shape(to_shape(a.shape()));
    for (std::size_t i = 0; i < a.size(); ++i)
    {
        out.flat(i) = static_cast<T>(a.flat(i));
    }
    return out;
}

// ---- index arithmetic for the references ---------------------------------------------------------

inline std::vector<std::size_t> unravel(std::size_t flat, const shape_t& shape)
{
    std::vector<std::size_t> index(shape.size());
    for (std::size_t ax = shape.size(); ax-- > 0;)
    {
        index[ax] = flat % shape[ax];
        flat /= shape[ax];
    }
    return index;
}

inline std::size_t ravel(const std::vector<std::size_t>& index, const shape_t& shape)
{
    std::size_t flat = 0;
    for (std::size_t ax = 0; ax < shape.size(); ++ax)
    {
        flat = flat * shape[ax] + index[ax];
    }
    return flat;
}

// The flat index into an operand of shape `in` that NumPy broadcasting reads for element `index` of
// an output of rank index.size() (right-aligned; size-1 axes read index 0).
inline std::size_t broadcast_source(const std::vector<std::size_t>& index, const shape_t& in)
{
    const std::size_t lead = index.size() - in.size();
    std::vector<std::size_t> source(in.size());
    for (std::size_t ax = 0; ax < in.size(); ++ax)
    {
        source[ax] = in[ax] == 1 ? 0 : index[lead + ax];
    }
    return ravel(source, in);
}

inline shape_t broadcast_pair(const shape_t& a, const shape_t& b)
{
    const std::size_t rank = std::max(a.size(), b.size());
    shape_t out(rank);
    for (std::size_t i = 0; i < rank; ++i)
    {
        const std::size_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const std::size_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        out[i] = da == 1 ? db : da;
    }
    return out;
}

// ---- loop references -----------------------------------------------------------------------------

template <class T>
array<T> ref_binary(const array<T>& a, const array<T>& b, const std::function<T(T, T)>& op)
{
    const shape_t sa = to_shape(a.shape()), sb = to_shape(b.shape());
    const shape_t out_shape = broadcast_pair(sa, sb);
    array<T> out = array<T>::from_shape(out_shape);
    for (std::size_t i = 0; i < out.size(); ++i)
    {
        const auto index = unravel(i, out_shape);
        out.flat(i) = op(a.flat(broadcast_source(index, sa)), b.flat(broadcast_source(index, sb)));
    }
    return out;
}

template <class T>
array<T> ref_unary(const array<T>& x, const std::function<T(T)>& op)
{
    array<T> out = array<T>::from_shape(to_shape(x.shape()));
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        out.flat(i) = op(x.flat(i));
    }
    return out;
}

// Sum over `axes`; the reduced axes are dropped, or kept as size 1.
inline f64 ref_sum(const f64& x, const std::vector<std::size_t>& axes, bool keep_dims)
{
    const shape_t in = to_shape(x.shape());
    shape_t kept = in;
    for (auto a : axes)
    {
        kept[a] = 1;
    }
    f64 out = filled<double>(kept, 0.0);
    for (std::size_t i = 0; i < x.size(); ++i)
    {
        auto index = unravel(i, in);
        for (auto a : axes)
        {
            index[a] = 0;
        }
        out.flat(ravel(index, kept)) += x.flat(i);
    }
    if (!keep_dims)
    {
        shape_t dropped;
        for (std::size_t ax = 0; ax < in.size(); ++ax)
        {
            if (std::find(axes.begin(), axes.end(), ax) == axes.end())
            {
                dropped.push_back(in[ax]);
            }
        }
        out.reshape(dropped);
    }
    return out;
}

// out.shape[i] = x.shape[axes[i]]; out[j_0, ..., j_n] = x[i] with i[axes[k]] = j_k.
inline f64 ref_permute(const f64& x, const std::vector<std::size_t>& axes)
{
    const shape_t in = to_shape(x.shape());
    shape_t out_shape(axes.size());
    for (std::size_t k = 0; k < axes.size(); ++k)
    {
        out_shape[k] = in[axes[k]];
    }
    f64 out = f64::from_shape(out_shape);
    for (std::size_t j = 0; j < out.size(); ++j)
    {
        const auto out_index = unravel(j, out_shape);
        std::vector<std::size_t> in_index(in.size());
        for (std::size_t k = 0; k < axes.size(); ++k)
        {
            in_index[axes[k]] = out_index[k];
        }
        out.flat(j) = x.flat(ravel(in_index, in));
    }
    return out;
}

// op(A) op(B) over the last two axes with broadcast batch axes; op = transpose when the flag is set.
template <class T>
array<T> ref_matmul(const array<T>& a, const array<T>& b, bool ta, bool tb)
{
    const shape_t sa = to_shape(a.shape()), sb = to_shape(b.shape());
    const shape_t batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
    const std::size_t ra = sa[sa.size() - 2], ca = sa.back(), rb = sb[sb.size() - 2], cb = sb.back();
    const std::size_t m = ta ? ca : ra, k = ta ? ra : ca, n = tb ? rb : cb;
    const shape_t batch = broadcast_pair(batch_a, batch_b);
    std::size_t count = 1;
    for (auto s : batch)
    {
        count *= s;
    }
    shape_t out_shape = batch;
    out_shape.push_back(m);
    out_shape.push_back(n);
    array<T> out = array<T>::from_shape(out_shape);
    for (std::size_t p = 0; p < count; ++p)
    {
        const auto index = unravel(p, batch);
        const std::size_t oa = broadcast_source(index, batch_a) * ra * ca;
        const std::size_t ob = broadcast_source(index, batch_b) * rb * cb;
        for (std::size_t i = 0; i < m; ++i)
        {
            for (std::size_t j = 0; j < n; ++j)
            {
                double acc = 0;
                for (std::size_t q = 0; q < k; ++q)
                {
                    const T av = ta ? a.flat(oa + q * ca + i) : a.flat(oa + i * ca + q);
                    const T bv = tb ? b.flat(ob + j * cb + q) : b.flat(ob + q * cb + j);
                    acc += static_cast<double>(av) * static_cast<double>(bv);
                }
                out.flat((p * m + i) * n + j) = static_cast<T>(acc);
            }
        }
    }
    return out;
}

// softmax(scale * x) over the last axis among entries the mask (broadcast to x) keeps; a row with no
// kept entry is all zeros. `mask == nullptr` keeps everything. Computed in long double.
inline f64 ref_masked_softmax(const f64& x, const mask_t* mask, double scale)
{
    const shape_t shape = to_shape(x.shape());
    const shape_t mshape = mask ? to_shape(mask->shape()) : shape_t{};
    const std::size_t n = shape.back();
    f64 out = filled<double>(shape, 0.0);
    for (std::size_t row = 0; row < x.size() / n; ++row)
    {
        std::vector<bool> keep(n, true);
        bool any = false;
        long double top = -std::numeric_limits<long double>::infinity();
        for (std::size_t j = 0; j < n; ++j)
        {
            const std::size_t i = row * n + j;
            keep[j] = mask ? mask->flat(broadcast_source(unravel(i, shape), mshape)) : true;
            if (keep[j])
            {
                any = true;
                top = std::max(top, static_cast<long double>(scale) * x.flat(i));
            }
        }
        if (!any)
        {
            continue;
        }
        long double total = 0;
        std::vector<long double> e(n, 0);
        for (std::size_t j = 0; j < n; ++j)
        {
            if (keep[j])
            {
                e[j] = std::exp(static_cast<long double>(scale) * x.flat(row * n + j) - top);
                total += e[j];
            }
        }
        for (std::size_t j = 0; j < n; ++j)
        {
            out.flat(row * n + j) = static_cast<double>(e[j] / total);
        }
    }
    return out;
}

// ---- comparisons ---------------------------------------------------------------------------------

template <class A, class B>
bool shapes_equal(const A& a, const B& b)
{
    return to_shape(a.shape()) == to_shape(b.shape());
}

// Largest |a - b| / (atol + rtol |b|); <= 1 means every element is close. Shapes must agree.
template <class TA, class TB>
double closeness(const array<TA>& a, const array<TB>& b, double rtol, double atol)
{
    if (!shapes_equal(a, b))
    {
        return std::numeric_limits<double>::infinity();
    }
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
    {
        const double x = static_cast<double>(a.flat(i)), y = static_cast<double>(b.flat(i));
        if (x == y)
        {
            continue;  // also when both tolerances are 0
        }
        const double err = std::abs(x - y) / (atol + rtol * std::abs(y));
        worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : std::max(worst, err);
    }
    return worst;
}

// compare(a, b).max_rel (autodiff/compare.hpp, the project's one measure): max |a - b| over the largest
// |entry| of either. Takes views too. Shapes must agree.
inline double max_relative_difference(const array<double>& a, const array<double>& b)
{
    REQUIRE(a.shape() == b.shape());
    return xgrad::compare(a, b).max_rel;
}

template <class T>
double max_abs(const array<T>& a)
{
    double m = 0;
    for (T v : a)
    {
        m = std::max(m, std::abs(static_cast<double>(v)));
    }
    return m;
}

template <class T>
bool all_finite(const array<T>& a)
{
    return std::all_of(a.begin(), a.end(), [](T v) { return std::isfinite(v); });
}

template <class T>
std::string describe(const array<T>& actual, const array<T>& expected)
{
    std::ostringstream out;
    out << "shape " << shape_str(to_shape(actual.shape())) << " vs expected "
        << shape_str(to_shape(expected.shape()));
    if (shapes_equal(actual, expected))
    {
        double worst = 0;
        for (std::size_t i = 0; i < actual.size(); ++i)
        {
            worst = std::max(
                worst, std::abs(static_cast<double>(actual.flat(i)) - static_cast<double>(expected.flat(i))));
        }
        out << ", max |actual - expected| = " << worst;
    }
    out << "\nactual:\n" << actual << "\nexpected:\n" << expected;
    return out.str();
}

// ---- float32 against float64 ---------------------------------------------------------------------

// The value of f at `inputs` and the gradients of sum(f * G) for a seeded G, computed in T.
template <class T>
struct values_and_gradients
{
    array<T> value;
    std::vector<array<T>> grads;
};

template <class T, class F>
values_and_gradients<T> evaluate_in(F f, const std::vector<f64>& inputs, unsigned seed)
{
    tape<T> t;
    std::vector<var<T>> x;
    for (const auto& in : inputs)
    {
        x.push_back(t.input(to_float_type<T>(in)));
    }
    const var<T> y = f(x);
    const var<T> G = t.constant(to_float_type<T>(random_array(y.shape(), seed)));
    t.backward(ops::sum(ops::mul(y, G)));
    values_and_gradients<T> out{y.value(), {}};
    for (const auto& v : x)
    {
        out.grads.push_back(v.grad());
    }
    return out;
}

// The T of a list of var<T> (unevaluated: for decltype in generic lambdas, to write T(0.5)).
template <class T>
T float_type_of(const std::vector<var<T>>&);

// Checks f in float32 against f in float64, values and gradients. f is a generic lambda taking
// `const auto& v`, a std::vector<var<T>> of the inputs, and returning a var<T>.
template <class F>
void check_float32_agrees(F f, const std::vector<f64>& inputs, double rtol = 2e-5, double atol = 2e-6)
{
    const auto lo = evaluate_in<float>(f, inputs, 77);
    const auto hi = evaluate_in<double>(f, inputs, 77);
    CHECK(closeness(lo.value, hi.value, rtol, atol) <= 1.0);
    for (std::size_t k = 0; k < inputs.size(); ++k)
    {
        CAPTURE(k);
        CHECK(closeness(lo.grads[k], hi.grads[k], rtol, atol) <= 1.0);
    }
}

// sum(out * weights), elementwise over equal shapes: the loss whose gradient is `weights`, for checking
// a backward that has no tape against numeric_gradient.
inline double weighted_sum(const f64& out, const f64& weights)
{
    REQUIRE(shapes_equal(out, weights));
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i)
    {
        s += out.flat(i) * weights.flat(i);
    }
    return s;
}

// ---- errors ----------------------------------------------------------------------------------------

// What the what() of the std::invalid_argument thrown by f says; fails the test if f throws nothing or
// something else.
template <class F>
std::string invalid_argument_message(F&& f)
{
    try
    {
        f();
    }
    catch (const std::invalid_argument& e)
    {
        return e.what();
    }
    catch (...)
    {
        FAIL("threw something other than std::invalid_argument");
        return "";
    }
    FAIL("did not throw");
    return "";
}

inline bool contains(const std::string& text, const std::string& part)
{
    return text.find(part) != std::string::npos;
}

// ---- checks ----------------------------------------------------------------------------------------

// Elementwise |actual - expected| <= atol + rtol |expected|, with equal shapes.
#define XGRAD_CHECK_CLOSE(actual, expected, rtol, atol)                                  \
    CHECK_MESSAGE(::xgrad::test::closeness((actual), (expected), (rtol), (atol)) <= 1.0, \
                  ::xgrad::test::describe((actual), (expected)))

// Gradients of f at `inputs` against central differences in float64; prints the report on failure.
#define XGRAD_CHECK_GRADIENTS(...)                                                           \
    do                                                                                       \
    {                                                                                        \
        const ::xgrad::gradcheck_report report_ = ::xgrad::test::run_gradcheck(__VA_ARGS__); \
        CHECK_MESSAGE(report_.ok, report_.summary());                                        \
    } while (false)

inline gradcheck_report run_gradcheck(const checked_function<double>& f, const std::vector<f64>& inputs,
                                      const gradcheck_options& options = {})
{
    gradcheck_report report = gradcheck(f, inputs, options);
    // Every input was checked: an empty report must not pass silently.
    if (report.inputs.size() != inputs.size())
    {
        report.ok = false;
    }
    return report;
}

// "{0, 2}"
inline std::string axes_str(const std::vector<std::size_t>& axes)
{
    std::string s = "{";
    for (auto a : axes)
    {
        s += (s.size() > 1 ? ", " : "") + std::to_string(a);
    }
    return s + "}";
}

inline std::string shapes_str(const std::vector<shape_t>& shapes)
{
    std::string s;
    for (const auto& shape : shapes)
    {
        s += (s.empty() ? "" : " ") + shape_str(shape);
    }
    return s;
}
}  // namespace xgrad::test
