// The xgrad half of the benchmark: MHA self-attention forward + backward on a fresh tape per step,
// exactly as a training loop would write it, the tiny-add chain, and the raw GEMM for the peak.
// No LibTorch header is included here.
#include <time.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "bench/bench.hpp"
#include "io/checkpoint.hpp"
#include "models/gpt.hpp"
#include "models/gpt_decode.hpp"
#include "models/mha.hpp"
#include "optim/optim.hpp"
#include "kernels/gemm.hpp"
#include "kernels/parallel.hpp"
#include "kernels/precision.hpp"

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
    xgrad_mha(const mha_problem<T>& p, bool fused, bool bf16)
        : x_(to_array(p.X, {p.B, p.T, p.d})), g_(to_array(p.G, {p.B, p.T, p.d})),
          precision_(bf16 ? xgrad::matmul_precision::bf16 : xgrad::matmul_precision::fp32)
    {
        config_.d_model = p.d;
        config_.heads = p.H;
        params_.config = config_;
        params_.W_Q = xgrad::parameter<T>(to_array(p.W_Q, {p.d, p.d}), "W_Q");
        params_.W_K = xgrad::parameter<T>(to_array(p.W_K, {p.d, p.d}), "W_K");
        params_.W_V = xgrad::parameter<T>(to_array(p.W_V, {p.d, p.d}), "W_V");
        params_.W_O = xgrad::parameter<T>(to_array(p.W_O, {p.d, p.d}), "W_O");
        options_.causal = true;
        options_.fused = fused;
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
        const xgrad::precision_scope precision(precision_);
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
    xgrad::matmul_precision precision_;
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
class xgrad_attention final : public attention_case
{
public:
    xgrad_attention(std::size_t B, std::size_t H, std::size_t T, std::size_t dh, std::size_t window)
        : window_(window)
    {
        std::mt19937 rng(77);
        std::normal_distribution<float> unit(0.0f, 1.0f);
        for (auto* x : {&q_, &k_, &v_, &grad_})
        {
            *x = xgrad::array<float>::from_shape({B, H, T, dh});
            std::generate(x->begin(), x->end(), [&] { return unit(rng); });
        }
    }

    void step() override
    {
        xgrad::tape<float> t;
        auto q = t.input(q_), k = t.input(k_), v = t.input(v_);
        auto out = xgrad::ops::attention(q, k, v, nullptr, /*causal=*/true, window_);
        multiply_adds_ = out.node().multiply_adds;
        t.backward(out, grad_);
    }

    std::uint64_t multiply_adds() const override { return multiply_adds_; }

private:
    std::size_t window_;
    xgrad::array<float> q_, k_, v_, grad_;
    std::uint64_t multiply_adds_ = 0;
};

xgrad::models::gpt_config gpt_config_of(const gpt_spec& s)
{
    xgrad::models::gpt_config c;
    c.vocab_size = s.V;
    c.block_size = s.T;
    c.layers = s.L;
    c.d_model = s.d;
    c.heads = s.H;
    return c;
}

xgrad::ids_t ids_of(const std::vector<std::int64_t>& v, std::size_t B, std::size_t T)
{
    xgrad::ids_t ids = xgrad::ids_t::from_shape({B, T});
    std::copy(v.begin(), v.end(), ids.begin());
    return ids;
}

// What a training loop writes: fresh tape, forward with the loss, backward, AdamW, gradients reset.
class xgrad_gpt final : public gpt_case
{
public:
    xgrad_gpt(const gpt_problem& p, bool bf16)
        : precision_(bf16 ? xgrad::matmul_precision::bf16 : xgrad::matmul_precision::fp32),
          params_(xgrad::models::gpt_parameters<float>::init(gpt_config_of(p.spec), 1)),
          tokens_(ids_of(p.tokens, p.spec.B, p.spec.T)), targets_(ids_of(p.targets, p.spec.B, p.spec.T)),
          named_(params_.named_parameters()),
          optimiser_(named_, xgrad::optim::adamw_options(p.lr, p.weight_decay))
    {
        for (std::size_t i = 0; i < named_.size(); ++i)
        {
            auto& value = named_[i].value();
            std::copy(p.params[i].values.begin(), p.params[i].values.end(), value.begin());
        }
    }

    double step() override
    {
        const xgrad::precision_scope precision(precision_);
        params_.zero_grad();
        xgrad::tape<float> t;
        xgrad::models::gpt_options options;
        options.every_activation = false;  // as the training loop runs it
        const auto r = xgrad::models::gpt_forward(t, params_, tokens_, &targets_, options);
        t.backward(r.loss);
        optimiser_.step();
        return r.loss.value()();
    }

private:
    xgrad::matmul_precision precision_;
    xgrad::models::gpt_parameters<float> params_;
    xgrad::ids_t tokens_, targets_;
    std::vector<xgrad::parameter<float>> named_;
    xgrad::optim::adam<float> optimiser_;
};
}  // namespace

namespace
{
// The model's initial parameters of `seed`, named and shaped as the checkpoint has them, for both sides.
std::vector<gpt_tensor> initial_tensors(const xgrad::models::gpt_config& c, unsigned seed)
{
    std::vector<gpt_tensor> tensors;
    const auto params = xgrad::models::gpt_parameters<float>::init(c, seed);
    for (const auto& param : params.named_parameters())
    {
        gpt_tensor t;
        t.name = param.name();
        for (auto n : param.value().shape())
        {
            t.shape.push_back(static_cast<std::int64_t>(n));
        }
        t.values.assign(param.value().begin(), param.value().end());
        tensors.push_back(std::move(t));
    }
    return tensors;
}
}  // namespace

gpt_problem make_gpt_problem(const gpt_spec& spec, unsigned seed)
{
    gpt_problem p;
    p.spec = spec;
    p.params = initial_tensors(gpt_config_of(spec), seed);
    std::mt19937 rng(seed + 1);
    std::uniform_int_distribution<std::int64_t> id(0, static_cast<std::int64_t>(spec.V) - 1);
    for (std::size_t i = 0; i < spec.B * spec.T; ++i)
    {
        p.tokens.push_back(id(rng));
        p.targets.push_back(id(rng));
    }
    return p;
}

namespace
{
xgrad::models::gpt_config decode_config_of(const decode_spec& s)
{
    xgrad::models::gpt_config c;
    c.vocab_size = s.V;
    c.block_size = s.block;
    c.layers = s.L;
    c.d_model = s.d;
    c.heads = s.H;
    if (s.llama)
    {
        c.norm = xgrad::models::norm_kind::rmsnorm;
        c.position = xgrad::models::position_kind::rope;
        c.mlp = xgrad::models::mlp_kind::swiglu;
        c.mlp_hidden = s.hidden;
        c.bias = xgrad::models::bias_kind::none;
    }
    return c;
}

class xgrad_decode final : public decode_case
{
public:
    // The checkpoint's parameters read straight into the decoder, as xgrad-sample reads them.
    explicit xgrad_decode(const xgrad::io::checkpoint_reader& file)
        : decoder_(file.config(), file.source<float>())
    {
    }
    void clear() override { decoder_.clear(); }
    std::int32_t step(std::int32_t token) override
    {
        const float* logits = decoder_.step(token);
        const auto V = static_cast<std::ptrdiff_t>(decoder_.config().vocab_size);
        return static_cast<std::int32_t>(std::max_element(logits, logits + V) - logits);
    }

private:
    xgrad::models::decoder<float> decoder_;
};
}  // namespace

decode_weights make_decode_weights(const decode_spec& spec, unsigned seed)
{
    decode_weights w{spec, {}};
    w.params = initial_tensors(decode_config_of(spec), seed);
    return w;
}

void xgrad_save_decode(const decode_weights& w, const std::string& path)
{
    auto params = xgrad::models::gpt_parameters<float>::declare(decode_config_of(w.spec));
    std::size_t k = 0;
    params.visit([&](const std::string&, xgrad::parameter<float>& p, const xgrad::models::declaration& d) {
        xgrad::array<float> values = xgrad::array<float>::from_shape(d.shape);
        std::copy(w.params[k].values.begin(), w.params[k].values.end(), values.begin());
        p = xgrad::parameter<float>(std::move(values), w.params[k].name);
        ++k;
    });
    xgrad::io::save_checkpoint(path, params);
}

std::unique_ptr<decode_case> xgrad_load_decode(const std::string& path)
{
    return std::make_unique<xgrad_decode>(xgrad::io::checkpoint_reader(path));
}

std::unique_ptr<gpt_case> make_xgrad_gpt(const gpt_problem& p, bool bf16)
{
    return std::make_unique<xgrad_gpt>(p, bf16);
}

bool xgrad_bf16_supported()
{
    return xgrad::bf16_supported();
}

std::uint64_t gpt_forward_multiply_adds(const gpt_spec& spec)
{
    return xgrad::models::gpt_forward_multiply_adds(gpt_config_of(spec), spec.B, spec.T).total();
}

template <class T>
std::unique_ptr<mha_case> make_xgrad_mha(const mha_problem<T>& p, bool fused, bool bf16)
{
    return std::make_unique<xgrad_mha<T>>(p, fused, bf16);
}

template <class T>
std::unique_ptr<chain_case> make_xgrad_chain(std::size_t length, std::size_t width)
{
    return std::make_unique<xgrad_chain<T>>(length, width);
}

std::unique_ptr<attention_case> make_xgrad_attention(std::size_t B, std::size_t H, std::size_t T,
                                                     std::size_t dh, std::size_t window)
{
    return std::make_unique<xgrad_attention>(B, H, T, dh, window);
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

std::string openblas_core()
{
    return xgrad::kernels::openblas_core();
}

std::string xgrad_gemm_backends()
{
    return xgrad::kernels::gemm_backends_built();
}

std::string xgrad_gemm_rule()
{
    return xgrad::kernels::gemm_rule_in_use();
}

namespace
{
double thread_seconds()
{
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// GFLOP/s of `product`, the median of `reps` timed runs after one untimed run; a run repeats the
// product until it has taken ~2 ms.
template <class F>
double gflops_of(double flop, int reps, F&& product)
{
    double start = thread_seconds();
    product();
    const double once = std::max(thread_seconds() - start, 1e-9);
    if (once > 0.1)
    {
        return flop / once * 1e-9;  // a backend this slow here is not worth more runs
    }
    const int repeats = static_cast<int>(std::clamp(2e-3 / once, 1.0, 1000.0));
    std::vector<double> rates;
    for (int r = 0; r < reps; ++r)
    {
        start = thread_seconds();
        for (int i = 0; i < repeats; ++i)
        {
            product();
        }
        rates.push_back(flop * repeats / (thread_seconds() - start) * 1e-9);
    }
    std::sort(rates.begin(), rates.end());
    return rates[rates.size() / 2];
}
}  // namespace

template <class T>
gemm_row xgrad_gemm_row(const gemm_shape& s, int reps)
{
    namespace k = xgrad::kernels;
    const std::size_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<T> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
    for (auto* v : {&a, &b})
    {
        for (auto& x : *v)
        {
            x = static_cast<T>(u(rng));
        }
    }
    const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    gemm_row row;
    row.shape = s;
    row.dtype = sizeof(T) == 4 ? "float32" : "float64";
    row.door_gflops = gflops_of(flop, reps, [&] {
        k::gemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, T(0), c.data(), s.n);
    });
    row.chosen = k::name(k::gemm_choice(sizeof(T) == 8, s.ta, s.tb, s.m, s.n, s.k));
    if (sizeof(T) == 4 && xgrad::bf16_supported())
    {
        const xgrad::precision_scope bf16(xgrad::matmul_precision::bf16);
        row.door_bf16_gflops = gflops_of(flop, reps, [&] {
            k::gemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, T(0), c.data(), s.n);
        });
    }
    for (k::gemm_backend backend : k::all_gemm_backends)
    {
        if (!k::gemm_backend_supports(backend, sizeof(T) == 8, s.m, s.n, s.k))
        {
            continue;
        }
        row.backends.emplace_back(k::name(backend), gflops_of(flop, reps, [&] {
            k::gemm_with(backend, s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, T(0), c.data(), s.n);
        }));
    }
    return row;
}

template std::unique_ptr<mha_case> make_xgrad_mha(const mha_problem<float>&, bool, bool);
template std::unique_ptr<mha_case> make_xgrad_mha(const mha_problem<double>&, bool, bool);
template std::unique_ptr<chain_case> make_xgrad_chain<float>(std::size_t, std::size_t);
template std::unique_ptr<chain_case> make_xgrad_chain<double>(std::size_t, std::size_t);
template void xgrad_gemm(std::size_t, const float*, const float*, float*);
template void xgrad_gemm(std::size_t, const double*, const double*, double*);
template gemm_row xgrad_gemm_row<float>(const gemm_shape&, int);
template gemm_row xgrad_gemm_row<double>(const gemm_shape&, int);
}  // namespace bench
