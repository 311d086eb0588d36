// The xgrad half of the benchmark: MHA self-attention forward + backward on a fresh tape per step,
// exactly as a training loop would write it, the tiny-add chain, and the raw GEMM for the peak.
// No LibTorch header is included here.
#include <numeric>

#include "bench/bench.hpp"
#include "models/mha.hpp"
#include "kernels/gemm.hpp"
#include "kernels/parallel.hpp"

namespace bench
{
namespace
{
template <class T>
xgrad::array<T> to_array(const std::vector<T>& v, const xgrad::shape_t& shape)
{
    xgrad::array<T> a = xgrad::array<T>::from_shape(shape);
    std::copy(v.begin(), v.end(), a.begin());
    return a;
}

template <class T>
std::vector<double> to_doubles(const xgrad::array<T>& a)
{
    return std::vector<double>(a.begin(), a.end());
}

template <class T>
class xgrad_mha final : public mha_case
{
public:
    explicit xgrad_mha(const mha_problem<T>& p)
        : x_(to_array(p.X, {p.B, p.T, p.d})), g_(to_array(p.G, {p.B, p.T, p.d}))
    {
        config_.d_model = p.d;
        config_.heads = p.H;
        params_.config = config_;
        params_.W_Q = xgrad::parameter<T>(to_array(p.W_Q, {p.d, p.d}), "W_Q");
        params_.W_K = xgrad::parameter<T>(to_array(p.W_K, {p.d, p.d}), "W_K");
        params_.W_V = xgrad::parameter<T>(to_array(p.W_V, {p.d, p.d}), "W_V");
        params_.W_O = xgrad::parameter<T>(to_array(p.W_O, {p.d, p.d}), "W_O");
        options_.causal = true;
    }

    void step() override { run(nullptr, nullptr); }

    std::vector<double> output() const override { return to_doubles(y_); }
    std::vector<double> grad_w_q() const override { return to_doubles(params_.W_Q.grad()); }

    std::size_t instrumented_step() override
    {
        std::size_t bytes = 0;
        run(&y_, &bytes);
        return bytes;
    }

private:
    // What a user writes: a fresh tape, bind the parameters, forward, loss, backward.
    void run(xgrad::array<T>* keep_output, std::size_t* saved_bytes)
    {
        params_.zero_grad();
        xgrad::tape<T> t;
        auto x = t.input(x_, "X");
        auto g = t.constant(g_, "G");
        auto w = xgrad::models::bind(t, params_);
        auto y = xgrad::models::self_attention(x, w, config_, options_).output;
        auto loss = xgrad::ops::sum(xgrad::ops::mul(y, g));
        if (saved_bytes)
        {
            *saved_bytes = t.bytes_saved_for_backward(/*include_leaves=*/false);
        }
        t.backward(loss);
        if (keep_output)
        {
            *keep_output = y.value();
        }
    }

    xgrad::models::mha_config config_;
    xgrad::models::mha_parameters<T> params_;
    xgrad::models::mha_options options_;
    xgrad::array<T> x_, g_, y_;
};

template <class T>
class xgrad_chain final : public chain_case
{
public:
    xgrad_chain(std::size_t length, std::size_t width)
        : length_(length), x_(xt::ones<T>({width})), c_(xt::ones<T>({width}))
    {
    }

    void step() override
    {
        xgrad::tape<T> t;
        auto x = t.input(x_, "x");
        auto c = t.constant(c_, "c");
        auto y = x;
        for (std::size_t i = 0; i < length_; ++i)
        {
            y = xgrad::ops::add(y, c);
        }
        t.backward(xgrad::ops::sum(y));
        result_ = std::accumulate(x.grad().begin(), x.grad().end(), 0.0);
    }

    double result() const override { return result_; }

private:
    std::size_t length_;
    xgrad::array<T> x_, c_;
    double result_ = 0;
};
}  // namespace

template <class T>
std::unique_ptr<mha_case> make_xgrad_mha(const mha_problem<T>& p)
{
    return std::make_unique<xgrad_mha<T>>(p);
}

template <class T>
std::unique_ptr<chain_case> make_xgrad_chain(std::size_t length, std::size_t width)
{
    return std::make_unique<xgrad_chain<T>>(length, width);
}

std::uint64_t mha_multiply_adds(std::size_t B, std::size_t T, std::size_t d)
{
    return xgrad::models::self_attention_multiply_adds(B, T, d);
}

void xgrad_threads(int n)
{
    xgrad::set_num_threads(n);
}

template <class T>
void xgrad_gemm(std::size_t n, const T* a, const T* b, T* c)
{
    xgrad::kernels::gemm(false, false, n, n, n, a, n, b, n, T(0), c, n);
}

std::string gemm_backend()
{
    return xgrad::kernels::gemm_backend();
}

template std::unique_ptr<mha_case> make_xgrad_mha(const mha_problem<float>&);
template std::unique_ptr<mha_case> make_xgrad_mha(const mha_problem<double>&);
template std::unique_ptr<chain_case> make_xgrad_chain<float>(std::size_t, std::size_t);
template std::unique_ptr<chain_case> make_xgrad_chain<double>(std::size_t, std::size_t);
template void xgrad_gemm(std::size_t, const float*, const float*, float*);
template void xgrad_gemm(std::size_t, const double*, const double*, double*);
}  // namespace bench
