// Muon and the Muon + AdamW pair (formulas in optim/muon.hpp).
#include "optim/muon.hpp"

#include <algorithm>
#include <cmath>

#include "autodiff/instantiate.hpp"
#include "kernels/gemm.hpp"
#include "kernels/precision.hpp"

namespace xgrad::optim
{
namespace
{
bool is_matrix(const shape_t& shape)
{
    return shape.size() == 2;
}

// A row-major r x c matrix in a flat buffer.
template <class T>
struct matrix
{
    std::size_t rows = 0, cols = 0;
    std::vector<T> values;
};

template <class T>
matrix<T> transposed(const matrix<T>& x)
{
    matrix<T> out{x.cols, x.rows, std::vector<T>(x.values.size())};
    for (std::size_t i = 0; i < x.rows; ++i)
    {
        for (std::size_t j = 0; j < x.cols; ++j)
        {
            out.values[j * x.rows + i] = x.values[i * x.cols + j];
        }
    }
    return out;
}

// u / (||u||_F + eps), the norm summed in double.
template <class T>
void normalise_frobenius(std::vector<T>& values)
{
    double sum_of_squares = 0;
    for (const T v : values)
    {
        sum_of_squares += static_cast<double>(v) * static_cast<double>(v);
    }
    const T denominator = static_cast<T>(std::sqrt(sum_of_squares)) + static_cast<T>(newton_schulz_eps);
    for (T& v : values)
    {
        v /= denominator;
    }
}

// One step on a wide X (r <= c): A = X X^T (r x r);  B = b A + c A A;  X = a X + B X.
template <class T>
void newton_schulz_step(matrix<T>& x, std::vector<T>& a, std::vector<T>& b)
{
    const std::size_t r = x.rows, c = x.cols;
    const T coef_a = static_cast<T>(newton_schulz_a);
    const T coef_b = static_cast<T>(newton_schulz_b);
    const T coef_c = static_cast<T>(newton_schulz_c);
    kernels::gemm(false, true, r, r, c, x.values.data(), c, x.values.data(), c, T(0), a.data(), r);
    kernels::gemm(false, false, r, r, r, a.data(), r, a.data(), r, T(0), b.data(), r);
    for (std::size_t k = 0; k < r * r; ++k)
    {
        b[k] = coef_b * a[k] + coef_c * b[k];
    }
    std::vector<T> next(x.values.size());
    for (std::size_t k = 0; k < next.size(); ++k)
    {
        next[k] = coef_a * x.values[k];
    }
    kernels::gemm(false, false, r, c, r, b.data(), r, x.values.data(), c, T(1), next.data(), c);
    x.values = std::move(next);
}

void check_momentum(double momentum)
{
    if (!(momentum >= 0 && momentum < 1))
    {
        fail("muon", "momentum must be in [0, 1), got " + std::to_string(momentum));
    }
}

template <class T>
void check_matrices(const std::vector<parameter<T>>& params)
{
    for (const parameter<T>& p : params)
    {
        const shape_t shape = to_shape(p.value().shape());
        if (!is_matrix(shape))
        {
            fail("muon", "parameter '" + p.name() + "' has shape " + shape_str(shape) +
                             ": Muon takes only matrices (2-D)");
        }
    }
}
}  // namespace

template <class T>
array<T> newton_schulz(const array<T>& u)
{
    const shape_t shape = to_shape(u.shape());
    if (!is_matrix(shape))
    {
        fail("newton_schulz", "needs a matrix, got shape " + shape_str(shape));
    }
    const precision_scope full(matmul_precision::fp32);  // in T even inside a bf16 training run
    matrix<T> x{shape[0], shape[1], std::vector<T>(u.begin(), u.end())};
    normalise_frobenius(x.values);
    const bool tall = x.rows > x.cols;
    if (tall)
    {
        x = transposed(x);
    }
    std::vector<T> a(x.rows * x.rows), b(x.rows * x.rows);
    for (int k = 0; k < newton_schulz_steps; ++k)
    {
        newton_schulz_step(x, a, b);
    }
    if (tall)
    {
        x = transposed(x);
    }
    array<T> out = array<T>::from_shape(shape);
    std::copy(x.values.begin(), x.values.end(), out.begin());
    return out;
}

double muon_scale(const shape_t& shape)
{
    const double fan_in = static_cast<double>(shape.at(0));
    const double fan_out = static_cast<double>(shape.at(1));
    return std::sqrt(std::max(1.0, fan_out / fan_in));
}

template <class T>
muon<T>::muon(std::vector<parameter<T>> params, const muon_options& options)
    : optimiser<T>("muon", std::move(params), options.lr), options_(options)
{
    check_matrices(this->params_);
    check_momentum(options.momentum);
    this->add_state("momentum");
}

template <class T>
void muon<T>::update(std::int64_t /*step*/)
{
    const T mu = static_cast<T>(options_.momentum);
    std::vector<array<T>>& momentum = this->state("momentum");
    for (std::size_t i = 0; i < this->params_.size(); ++i)
    {
        parameter<T>& param = this->params_[i];
        const array<T>& g = param.grad();
        array<T>& m = momentum[i];
        array<T> u = array<T>::from_shape(g.shape());
        for (std::size_t k = 0; k < g.size(); ++k)
        {
            m.data()[k] = mu * m.data()[k] + g.data()[k];
            u.data()[k] = g.data()[k] + mu * m.data()[k];
        }
        const array<T> x = newton_schulz(u);
        const T step_size = static_cast<T>(this->lr() * muon_scale(to_shape(param.value().shape())));
        T* p = param.value().data();
        for (std::size_t k = 0; k < x.size(); ++k)
        {
            p[k] -= step_size * x.data()[k];
        }
    }
}

template <class T>
muon_with_adamw<T>::muon_with_adamw(const std::vector<parameter<T>>& params, const choice& takes_muon,
                                    const adam_options& adamw, const muon_options& muon_opts)
{
    std::vector<parameter<T>> for_muon, for_adamw;
    for (const parameter<T>& p : params)
    {
        (takes_muon(p) ? for_muon : for_adamw).push_back(p);
    }
    if (!for_muon.empty())
    {
        muon_ = std::make_unique<muon<T>>(std::move(for_muon), muon_opts);
    }
    if (!for_adamw.empty() || !muon_)
    {
        adamw_ = std::make_unique<adam<T>>(std::move(for_adamw), adamw);
    }
}

template <class T>
void muon_with_adamw<T>::set_lr(double adamw_lr, double muon_lr)
{
    if (adamw_)
    {
        adamw_->set_lr(adamw_lr);
    }
    if (muon_)
    {
        muon_->set_lr(muon_lr);
    }
}

template <class T>
void muon_with_adamw<T>::scaled_step(double grad_scale)
{
    if (adamw_)
    {
        adamw_->scaled_step(grad_scale);
    }
    if (muon_)
    {
        muon_->scaled_step(grad_scale);
    }
}

template <class T>
void muon_with_adamw<T>::zero_grad()
{
    if (adamw_)
    {
        adamw_->zero_grad();
    }
    if (muon_)
    {
        muon_->zero_grad();
    }
}

template <class T>
std::int64_t muon_with_adamw<T>::step_count() const
{
    return adamw_ ? adamw_->step_count() : muon_->step_count();
}

template <class T>
named_tensors<T> muon_with_adamw<T>::export_state() const
{
    named_tensors<T> out = adamw_ ? adamw_->export_state() : named_tensors<T>{};
    if (muon_)
    {
        out.merge(muon_->export_state());  // "optim.step" is the same count in both: kept once
    }
    return out;
}

template <class T>
void muon_with_adamw<T>::import_state(const named_tensors<T>& tensors)
{
    // Each optimiser reads its own names and the shared step; a name neither exports is unknown.
    const auto own = [&](const optimiser<T>& opt) {
        named_tensors<T> picked;
        for (const auto& [name, tensor] : opt.export_state())
        {
            const auto found = tensors.find(name);
            if (found != tensors.end())
            {
                picked.emplace(name, found->second);
            }
        }
        return picked;
    };
    const named_tensors<T> expected = export_state();
    for (const auto& [name, tensor] : tensors)
    {
        if (name.compare(0, state_prefix.size(), state_prefix) == 0 && expected.count(name) == 0)
        {
            fail("muon", "import_state: unknown state tensor '" + name + "'");
        }
    }
    const named_tensors<T> for_adamw = adamw_ ? own(*adamw_) : named_tensors<T>{};
    const named_tensors<T> for_muon = muon_ ? own(*muon_) : named_tensors<T>{};
    if (!muon_)
    {
        adamw_->import_state(for_adamw);
        return;
    }
    const named_tensors<T> muon_before = muon_->export_state();
    muon_->import_state(for_muon);
    try
    {
        if (adamw_)
        {
            adamw_->import_state(for_adamw);
        }
    }
    catch (...)
    {
        muon_->import_state(muon_before);  // AdamW's refusal leaves both as they were
        throw;
    }
}

#define XGRAD_INSTANTIATE(T)                               \
    template array<T> newton_schulz(const array<T>&);      \
    template class muon<T>;                                \
    template class muon_with_adamw<T>;
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_INSTANTIATE)
#undef XGRAD_INSTANTIATE
}  // namespace xgrad::optim
