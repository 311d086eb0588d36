// Muon (optim/muon.hpp). tests/data/muon_fixtures/ holds three Muon steps on a wide, a tall and a square
// matrix, taken by PyTorch in float64 and float32 from the update's text
// (tests/fixtures/make_muon_fixtures.py): Newton–Schulz's result, every step's parameters and the final
// momentum must agree with it. Around them: the property Newton–Schulz is for (every singular value of its
// result within [0.6, 1.2024], for random and ill-conditioned inputs, the singular values computed here by
// Jacobi in double), bit-for-bit resume through export/import, Muon beside AdamW, and errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "autodiff/compare.hpp"
#include "io/npy.hpp"
#include "kernels/precision.hpp"
#include "optim/muon.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"

namespace test_muon
{
using namespace xgrad;
using namespace xgrad::optim;
using xgrad::test::normal_array;
namespace fs = std::filesystem;

namespace
{
const fs::path data_dir = fs::path(xgrad::test::source_dir()) / "tests" / "data" / "muon_fixtures";
const std::vector<std::string> parameter_names = {"wide.W", "tall.W", "square.W"};
constexpr std::size_t steps = 3;

template <class T>
array<T> load(const fs::path& path)
{
    return npy::load_float<T>(path.string());
}

template <class T>
const char* dtype_folder()
{
    return std::is_same_v<T, double> ? "float64" : "float32";
}

// Entry k of a (steps, *shape) stack.
template <class T>
array<T> stack_entry(const array<T>& stacked, std::size_t k)
{
    const shape_t shape(stacked.shape().begin() + 1, stacked.shape().end());
    array<T> out = array<T>::from_shape(shape);
    std::copy_n(stacked.data() + k * out.size(), out.size(), out.data());
    return out;
}

template <class T>
std::vector<parameter<T>> initial_parameters()
{
    std::vector<parameter<T>> params;
    for (const std::string& name : parameter_names)
    {
        params.emplace_back(load<T>(data_dir / "initial" / (name + ".npy")), name);
    }
    return params;
}

template <class T>
std::vector<parameter<T>> copies_of(const std::vector<parameter<T>>& params)
{
    std::vector<parameter<T>> out;
    for (const parameter<T>& p : params)
    {
        out.emplace_back(array<T>(p.value()), p.name());
    }
    return out;
}

template <class T>
void set_fixture_gradients(std::vector<parameter<T>>& params, std::size_t k)
{
    for (parameter<T>& p : params)
    {
        p.grad() = stack_entry(load<T>(data_dir / "grads" / (p.name() + ".npy")), k);
    }
}

muon_options fixture_options()
{
    const array<double> h = load<double>(data_dir / "hyperparameters.npy");
    return muon_options{h(0), h(1)};
}

// float32 takes torch's float32 arithmetic in another order (and the GEMM backends' own): 1e-5 of the
// largest entry. float64: rounding alone.
template <class T>
double tolerance()
{
    return std::is_same_v<T, double> ? 1e-12 : 1e-5;
}

template <class T>
void check_close(const array<T>& actual, const array<T>& expected, const std::string& what)
{
    const difference d = compare(actual, expected);
    INFO(what << ": max_rel " << d.max_rel);
    CHECK(d.max_rel <= tolerance<T>());
}

template <class T>
bool same_bits(const array<T>& a, const array<T>& b)
{
    return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// ---- singular values, by the cyclic Jacobi eigenvalue method on X X^T (short side), in double -----------

using matrix_d = std::vector<std::vector<double>>;

// The eigenvalues of a symmetric matrix: rotations zero each off-diagonal entry in turn until the
// off-diagonal mass is negligible.
std::vector<double> symmetric_eigenvalues(matrix_d a)
{
    const std::size_t n = a.size();
    for (int sweep = 0; sweep < 100; ++sweep)
    {
        double off = 0;
        for (std::size_t p = 0; p < n; ++p)
        {
            for (std::size_t q = p + 1; q < n; ++q)
            {
                off += a[p][q] * a[p][q];
            }
        }
        if (off < 1e-30)
        {
            break;
        }
        for (std::size_t p = 0; p < n; ++p)
        {
            for (std::size_t q = p + 1; q < n; ++q)
            {
                if (a[p][q] == 0)
                {
                    continue;
                }
                // The angle that zeroes a[p][q]: tan(2 theta) = 2 a_pq / (a_qq - a_pp).
                const double theta = 0.5 * std::atan2(2 * a[p][q], a[q][q] - a[p][p]);
                const double c = std::cos(theta), s = std::sin(theta);
                for (std::size_t k = 0; k < n; ++k)  // A = A J
                {
                    const double akp = a[k][p], akq = a[k][q];
                    a[k][p] = c * akp - s * akq;
                    a[k][q] = s * akp + c * akq;
                }
                for (std::size_t k = 0; k < n; ++k)  // A = J^T A
                {
                    const double apk = a[p][k], aqk = a[q][k];
                    a[p][k] = c * apk - s * aqk;
                    a[q][k] = s * apk + c * aqk;
                }
            }
        }
    }
    std::vector<double> eigenvalues(n);
    for (std::size_t i = 0; i < n; ++i)
    {
        eigenvalues[i] = a[i][i];
    }
    std::sort(eigenvalues.begin(), eigenvalues.end());
    return eigenvalues;
}

// sigma_i(X) = sqrt(lambda_i(X X^T)) over the short side, ascending.
template <class T>
std::vector<double> singular_values(const array<T>& x)
{
    const bool tall = x.shape()[0] > x.shape()[1];
    const std::size_t r = tall ? x.shape()[1] : x.shape()[0];
    const std::size_t c = tall ? x.shape()[0] : x.shape()[1];
    const auto at = [&](std::size_t i, std::size_t j) {
        return static_cast<double>(tall ? x(j, i) : x(i, j));
    };
    matrix_d gram(r, std::vector<double>(r, 0.0));
    for (std::size_t i = 0; i < r; ++i)
    {
        for (std::size_t j = 0; j < r; ++j)
        {
            for (std::size_t k = 0; k < c; ++k)
            {
                gram[i][j] += at(i, k) * at(j, k);
            }
        }
    }
    std::vector<double> sigma;
    for (const double lambda : symmetric_eigenvalues(gram))
    {
        sigma.push_back(std::sqrt(std::max(0.0, lambda)));
    }
    return sigma;
}

// An n x n orthogonal matrix: Gram–Schmidt on normal columns.
matrix_d random_orthogonal(std::size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal;
    matrix_d q(n, std::vector<double>(n));  // q[j] is column j
    for (std::size_t j = 0; j < n; ++j)
    {
        for (double& v : q[j])
        {
            v = normal(rng);
        }
        for (int pass = 0; pass < 2; ++pass)  // twice: orthogonal to rounding
        {
            for (std::size_t i = 0; i < j; ++i)
            {
                double dot = 0;
                for (std::size_t k = 0; k < n; ++k)
                {
                    dot += q[j][k] * q[i][k];
                }
                for (std::size_t k = 0; k < n; ++k)
                {
                    q[j][k] -= dot * q[i][k];
                }
            }
        }
        double norm = 0;
        for (const double v : q[j])
        {
            norm += v * v;
        }
        for (double& v : q[j])
        {
            v /= std::sqrt(norm);
        }
    }
    return q;
}

// U diag(sigma) V^T of shape (rows, cols) with the given singular values (min(rows, cols) of them).
template <class T>
array<T> with_singular_values(std::size_t rows, std::size_t cols, const std::vector<double>& sigma,
                              unsigned seed)
{
    const matrix_d u = random_orthogonal(rows, seed);
    const matrix_d v = random_orthogonal(cols, seed + 1);
    array<T> out = array<T>::from_shape({rows, cols});
    for (std::size_t i = 0; i < rows; ++i)
    {
        for (std::size_t j = 0; j < cols; ++j)
        {
            double sum = 0;
            for (std::size_t k = 0; k < sigma.size(); ++k)
            {
                sum += u[k][i] * sigma[k] * v[k][j];
            }
            out(i, j) = static_cast<T>(sum);
        }
    }
    return out;
}

// The largest singular value Newton–Schulz can return: its step maps a singular value s (at most 1 after
// the normalisation) to p(s) = a s + b s^3 + c s^5, whose maximum on [0, 1] is at s^2 = the smaller root of
// p'(s) = a + 3 b s^2 + 5 c s^4 = 0: p = 1.2024, a little above 1.2 (a random 32 x 32 matrix reaches 1.2021).
double newton_schulz_ceiling()
{
    const double a = newton_schulz_a, b = newton_schulz_b, c = newton_schulz_c;
    const double s2 = (-3 * b - std::sqrt(9 * b * b - 20 * a * c)) / (10 * c);
    const double s = std::sqrt(s2);
    return a * s + b * s * s2 + c * s * s2 * s2;
}

// The property's interval: [0.6, 1.2] as docs/training.md states it, its top raised to the iteration's
// own ceiling.
constexpr double sigma_floor = 0.6;
const double sigma_ceiling = newton_schulz_ceiling();

// n values from 1 down to 1 / condition, evenly spaced in log.
std::vector<double> log_spaced(std::size_t n, double condition)
{
    std::vector<double> sigma(n);
    for (std::size_t k = 0; k < n; ++k)
    {
        sigma[k] = std::pow(condition, -static_cast<double>(k) / static_cast<double>(n - 1));
    }
    return sigma;
}
}  // namespace

TEST_CASE_TEMPLATE("newton_schulz equals PyTorch's on a wide, a tall and a square matrix", T, float, double)
{
    for (const std::string& name : parameter_names)
    {
        const array<T> g = stack_entry(load<T>(data_dir / "grads" / (name + ".npy")), 0);
        const array<T> expected = load<T>(data_dir / dtype_folder<T>() / "newton_schulz" / (name + ".npy"));
        // Step 1's momentum is g, so its Nesterov u is (1 + mu) g: the same direction, another norm.
        array<T> u = g * static_cast<T>(1 + fixture_options().momentum);
        check_close(newton_schulz(u), expected, name);
    }
}

TEST_CASE_TEMPLATE("three Muon steps equal PyTorch's, parameters and momentum", T, float, double)
{
    std::vector<parameter<T>> params = initial_parameters<T>();
    muon<T> opt(params, fixture_options());
    for (std::size_t k = 0; k < steps; ++k)
    {
        set_fixture_gradients(params, k);
        opt.step();
        for (const parameter<T>& p : params)
        {
            const array<T> after = load<T>(data_dir / dtype_folder<T>() / "after" / (p.name() + ".npy"));
            check_close(p.value(), stack_entry(after, k), p.name() + " after step " + std::to_string(k + 1));
        }
    }
    const named_tensors<T> state = opt.export_state();
    CHECK(state.size() == 1 + parameter_names.size());
    CHECK(state.at("optim.step")() == T(3));
    for (const std::string& name : parameter_names)
    {
        const std::string key = "optim.momentum." + name;
        check_close(state.at(key), load<T>(data_dir / dtype_folder<T>() / (key + ".npy")), key);
    }
}

TEST_CASE("newton_schulz stays in float32 inside a bf16 scope")
{
    const array<float> u = normal_array<float>({24, 40}, 8);
    const array<float> plain = newton_schulz(u);
    const precision_scope bf16(matmul_precision::bf16);
    CHECK(same_bits(newton_schulz(u), plain));
}

TEST_CASE("muon_scale is sqrt(max(1, fan_out / fan_in)) of an (fan_in, fan_out) matrix")
{
    CHECK(muon_scale({4, 7}) == doctest::Approx(std::sqrt(7.0 / 4.0)));
    CHECK(muon_scale({9, 3}) == 1.0);
    CHECK(muon_scale({5, 5}) == 1.0);
    CHECK(muon_scale({64, 256}) == 2.0);
}

TEST_CASE("the Jacobi singular values of a known matrix")
{
    const std::vector<double> sigma = {3.0, 0.5, 0.01};
    const std::vector<double> found = singular_values(with_singular_values<double>(3, 5, sigma, 7));
    REQUIRE(found.size() == 3);
    CHECK(found[0] == doctest::Approx(0.01).epsilon(1e-9));
    CHECK(found[1] == doctest::Approx(0.5).epsilon(1e-12));
    CHECK(found[2] == doctest::Approx(3.0).epsilon(1e-12));
    const std::vector<double> of_tall = singular_values(with_singular_values<double>(6, 2, {2.0, 1.0}, 9));
    CHECK(of_tall[0] == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(of_tall[1] == doctest::Approx(2.0).epsilon(1e-12));
}

TEST_CASE("the ceiling of Newton-Schulz's step polynomial is 1.2024")
{
    CHECK(sigma_ceiling == doctest::Approx(1.2024).epsilon(1e-4));
}

TEST_CASE_TEMPLATE("every singular value of newton_schulz's result lies in [0.6, 1.2024]", T, float, double)
{
    SUBCASE("random normal matrices, wide, tall and square, at any scale")
    {
        const std::vector<shape_t> shapes = {{16, 64}, {64, 16}, {32, 32}, {48, 144}, {1, 10}, {10, 1}};
        unsigned seed = 1;
        for (const shape_t& shape : shapes)
        {
            for (const double scale : {1e-3, 1.0, 1e3})
            {
                const std::vector<double> sigma =
                    singular_values(newton_schulz(normal_array<T>(shape, seed++, scale)));
                INFO("shape " << shape_str(shape) << " scale " << scale);
                CHECK(sigma.front() >= sigma_floor);
                CHECK(sigma.back() <= sigma_ceiling);
            }
        }
    }
    SUBCASE("ill-conditioned: singular values spread over a factor of 100")
    {
        const std::vector<std::pair<std::size_t, std::size_t>> shapes = {{24, 24}, {16, 40}, {40, 16}};
        for (const auto& [rows, cols] : shapes)
        {
            const std::size_t n = std::min(rows, cols);
            const std::vector<double> sigma =
                singular_values(newton_schulz(with_singular_values<T>(rows, cols, log_spaced(n, 100.0), 11)));
            INFO(rows << " x " << cols);
            CHECK(sigma.front() >= sigma_floor);
            CHECK(sigma.back() <= sigma_ceiling);
        }
    }
    SUBCASE("one dominant direction: the small ones are still brought up")
    {
        std::vector<double> spread(12, 0.05);
        spread[0] = 1.0;
        const std::vector<double> sigma =
            singular_values(newton_schulz(with_singular_values<T>(12, 20, spread, 5)));
        CHECK(sigma.front() >= sigma_floor);
        CHECK(sigma.back() <= sigma_ceiling);
    }
}

TEST_CASE("newton_schulz's limit: a direction below about 1e-3 of the norm stays small after five steps")
{
    // Each step multiplies a small singular value by about a = 3.4445 (a^5 ~ 484): one at 1e-5 of the
    // Frobenius norm ends near 5e-3, a zero one stays zero. The property above holds only above that.
    std::vector<double> sigma = log_spaced(8, 10.0);
    sigma.back() = 1e-5;
    const std::vector<double> out =
        singular_values(newton_schulz(with_singular_values<double>(8, 8, sigma, 3)));
    CHECK(out.front() < 0.01);
    CHECK(out[1] >= sigma_floor);
    CHECK(out.back() <= sigma_ceiling);
}

TEST_CASE("a zero gradient leaves the parameter as it was, without NaN")
{
    std::vector<parameter<float>> params{parameter<float>(normal_array<float>({3, 5}, 2), "w")};
    const array<float> before = params[0].value();
    muon<float> opt(params, muon_options{});
    params[0].grad() = xt::zeros<float>({3, 5});
    opt.step();
    CHECK(same_bits(params[0].value(), before));
}

TEST_CASE("a clip's grad_scale scales the gradient before the momentum, as clip_grad_norm then step")
{
    std::vector<parameter<double>> clipped = initial_parameters<double>();
    std::vector<parameter<double>> scaled = copies_of(clipped);
    muon<double> a(clipped, fixture_options()), b(scaled, fixture_options());
    for (std::size_t k = 0; k < steps; ++k)
    {
        set_fixture_gradients(clipped, k);
        set_fixture_gradients(scaled, k);
        const double factor = clip_factor(grad_norm(clipped), 1.0);
        clip_grad_norm(clipped, 1.0);
        a.step();
        b.scaled_step(factor);
    }
    for (std::size_t i = 0; i < clipped.size(); ++i)
    {
        CHECK(same_bits(clipped[i].value(), scaled[i].value()));
    }
}

TEST_CASE_TEMPLATE("export_state then import_state resumes bit for bit", T, float, double)
{
    std::vector<parameter<T>> params = initial_parameters<T>();
    muon<T> first(params, fixture_options());
    for (std::size_t k = 0; k < 2; ++k)
    {
        set_fixture_gradients(params, k);
        first.step();
    }
    std::vector<parameter<T>> resumed_params = copies_of(params);
    muon<T> resumed(resumed_params, fixture_options());
    resumed.import_state(first.export_state());
    CHECK(resumed.step_count() == 2);
    set_fixture_gradients(params, 2);
    set_fixture_gradients(resumed_params, 2);
    first.step();
    resumed.step();
    for (std::size_t i = 0; i < params.size(); ++i)
    {
        CHECK(same_bits(params[i].value(), resumed_params[i].value()));
    }
    const named_tensors<T> a = first.export_state(), b = resumed.export_state();
    REQUIRE(a.size() == b.size());
    for (const auto& [name, tensor] : a)
    {
        CHECK(same_bits(tensor, b.at(name)));
    }
}

TEST_CASE("Muon refuses what it cannot take, naming it")
{
    const auto message = [](auto&& make) {
        try
        {
            make();
        }
        catch (const std::invalid_argument& e)
        {
            return std::string(e.what());
        }
        return std::string("no exception");
    };
    std::vector<parameter<float>> vector_param{parameter<float>(xt::zeros<float>({4}), "ln.bias")};
    const std::string vector_error = message([&] { muon<float>(vector_param, muon_options{}); });
    CHECK(vector_error.find("'ln.bias'") != std::string::npos);
    CHECK(vector_error.find("(4)") != std::string::npos);
    CHECK(vector_error.find("matrices") != std::string::npos);

    std::vector<parameter<float>> stacked{parameter<float>(xt::zeros<float>({2, 3, 4}), "conv.W")};
    CHECK(message([&] { muon<float>(stacked, muon_options{}); }).find("'conv.W'") != std::string::npos);

    std::vector<parameter<float>> matrix{parameter<float>(xt::zeros<float>({2, 3}), "W")};
    const auto momentum_error = [&](double momentum) {
        return message([&] { muon<float>(matrix, muon_options{0.02, momentum}); });
    };
    CHECK(momentum_error(1.0).find("momentum must be in [0, 1)") != std::string::npos);
    CHECK(momentum_error(-0.1).find("momentum must be in [0, 1)") != std::string::npos);
    CHECK(message([&] { muon<float>(matrix, muon_options{-1.0, 0.9}); }).find("learning rate") !=
          std::string::npos);
    CHECK(message([&] { newton_schulz<float>(xt::zeros<float>({2, 2, 2})); }).find("newton_schulz") !=
          std::string::npos);
}

TEST_CASE("muon_with_adamw: Muon on the chosen matrices, AdamW on the rest, one state")
{
    const auto make_params = [] {
        return std::vector<parameter<float>>{parameter<float>(normal_array<float>({6, 4}, 1), "wte"),
                                             parameter<float>(normal_array<float>({4, 8}, 2), "blocks.0.W"),
                                             parameter<float>(normal_array<float>({8}, 3), "blocks.0.b")};
    };
    const auto is_block_matrix = [](const parameter<float>& p) { return p.name() == "blocks.0.W"; };
    const auto set_gradients = [](std::vector<parameter<float>>& params, unsigned seed) {
        for (parameter<float>& p : params)
        {
            p.grad() = normal_array<float>(to_shape(p.value().shape()), seed++);
        }
    };
    std::vector<parameter<float>> params = make_params();
    muon_with_adamw<float> both(params, is_block_matrix, adamw_options(0.01, 0.1), muon_options{});
    CHECK(both.has_muon());

    // Against the two optimisers run by hand on copies.
    std::vector<parameter<float>> by_hand = make_params();
    adam<float> adamw_alone({by_hand[0], by_hand[2]}, adamw_options(0.01, 0.1));
    muon<float> muon_alone({by_hand[1]}, muon_options{});
    for (unsigned s = 1; s <= 2; ++s)
    {
        set_gradients(params, 10 * s);
        set_gradients(by_hand, 10 * s);
        both.set_lr(0.01 / s, 0.02 / s);
        adamw_alone.set_lr(0.01 / s);
        muon_alone.set_lr(0.02 / s);
        both.scaled_step(0.5);
        adamw_alone.scaled_step(0.5);
        muon_alone.scaled_step(0.5);
        both.zero_grad();
    }
    for (std::size_t i = 0; i < params.size(); ++i)
    {
        CHECK(same_bits(params[i].value(), by_hand[i].value()));
        CHECK(xt::all(xt::equal(params[i].grad(), 0.0f)));
    }

    const named_tensors<float> state = both.export_state();
    std::set<std::string> names;
    for (const auto& entry : state)
    {
        names.insert(entry.first);
    }
    CHECK(names == std::set<std::string>{"optim.step", "optim.exp_avg.wte", "optim.exp_avg_sq.wte",
                                         "optim.exp_avg.blocks.0.b", "optim.exp_avg_sq.blocks.0.b",
                                         "optim.momentum.blocks.0.W"});

    SUBCASE("resume bit for bit")
    {
        std::vector<parameter<float>> copy;
        for (const parameter<float>& p : params)
        {
            copy.emplace_back(array<float>(p.value()), p.name());
        }
        muon_with_adamw<float> resumed(copy, is_block_matrix, adamw_options(0.01, 0.1), muon_options{});
        resumed.import_state(state);
        CHECK(resumed.step_count() == 2);
        both.set_lr(0.003, 0.004);  // hyperparameters are not state: each step's come from the schedule
        resumed.set_lr(0.003, 0.004);
        set_gradients(params, 99);
        set_gradients(copy, 99);
        both.scaled_step(1.0);
        resumed.scaled_step(1.0);
        for (std::size_t i = 0; i < params.size(); ++i)
        {
            CHECK(same_bits(params[i].value(), copy[i].value()));
        }
    }
    SUBCASE("an AdamW-only state does not import, and changes nothing")
    {
        std::vector<parameter<float>> other = make_params();
        muon_with_adamw<float> adamw_only(other, [](const parameter<float>&) { return false; },
                                          adamw_options(0.01, 0.1), muon_options{});
        CHECK_FALSE(adamw_only.has_muon());
        named_tensors<float> adamw_state = adamw_only.export_state();
        CHECK(adamw_state.count("optim.exp_avg.blocks.0.W") == 1);
        CHECK_THROWS_WITH_AS(both.import_state(adamw_state), doctest::Contains("optim.exp_avg.blocks.0.W"),
                             std::invalid_argument);
        adamw_state.erase("optim.exp_avg.blocks.0.W");
        adamw_state.erase("optim.exp_avg_sq.blocks.0.W");
        CHECK_THROWS_WITH_AS(both.import_state(adamw_state), doctest::Contains("optim.momentum.blocks.0.W"),
                             std::invalid_argument);
        const named_tensors<float> after = both.export_state();
        for (const auto& [name, tensor] : state)
        {
            CHECK(same_bits(tensor, after.at(name)));
        }
    }
    SUBCASE("a chosen parameter that is not a matrix is named")
    {
        std::vector<parameter<float>> other = make_params();
        const auto all_but_wte = [](const parameter<float>& p) { return p.name() != "wte"; };
        CHECK_THROWS_WITH_AS(
            muon_with_adamw<float>(other, all_but_wte, adamw_options(0.01, 0.1), muon_options{}),
            doctest::Contains("'blocks.0.b'"), std::invalid_argument);
    }
}
}  // namespace test_muon
