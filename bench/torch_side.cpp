// The LibTorch half of the benchmark: the chapter's MHA composed from torch ops with autograd, and
// torch::nn::MultiheadAttention as a second reference; plus the tiny-add chain. No xgrad header here.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/autocast_mode.h>
#include <c10/core/CPUAllocator.h>
#include <torch/autograd.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "bench/bench.hpp"

namespace bench
{
namespace
{
// Wraps LibTorch's CPU allocator and counts the bytes currently handed out. Installed only around the
// one instrumented step, so the timed steps run on the stock allocator.
class counting_allocator final : public c10::Allocator
{
public:
    c10::DataPtr allocate(std::size_t n) const override
    {
        c10::DataPtr inner = base_->allocate(n);
        void* data = inner.get();
        const c10::Device device = inner.device();
        live_ += static_cast<std::int64_t>(n);
        auto* ctx = new context{std::move(inner), n, this};
        return {data, ctx, &release, device};
    }

    std::int64_t live() const { return live_; }

    // Routes LibTorch's CPU allocations through this counter until uninstall().
    void install()
    {
        base_ = c10::GetCPUAllocator();
        c10::SetCPUAllocator(this, /*priority=*/100);
    }
    void uninstall() { c10::SetCPUAllocator(base_, /*priority=*/100); }

private:
    struct context
    {
        c10::DataPtr inner;  // frees through the wrapped allocator when deleted
        std::size_t bytes;
        const counting_allocator* owner;
    };
    static void release(void* p)
    {
        auto* ctx = static_cast<context*>(p);
        ctx->owner->live_ -= static_cast<std::int64_t>(ctx->bytes);
        delete ctx;
    }

    c10::Allocator* base_ = nullptr;
    mutable std::atomic<std::int64_t> live_{0};
};

counting_allocator& the_counter()
{
    static counting_allocator* c = new counting_allocator;  // never destroyed: outlives every tensor
    return *c;
}

template <class T>
torch::Tensor from(const std::vector<T>& v, std::vector<std::int64_t> sizes)
{
    auto options = torch::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
    return torch::from_blob(const_cast<T*>(v.data()), sizes, options).clone();
}

std::vector<double> to_doubles(const torch::Tensor& t)
{
    torch::Tensor c = t.detach().to(torch::kDouble).contiguous();
    return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// CPU autocast to bfloat16 while it lives, as a user writes `with torch.autocast("cpu", torch.bfloat16)`
// around the forward (LibTorch 1.13's C++ API); a no-op when off.
class autocast_bf16
{
public:
    explicit autocast_bf16(bool on) : on_(on)
    {
        if (on_)
        {
            at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
            at::autocast::set_cpu_enabled(true);
        }
    }
    ~autocast_bf16()
    {
        if (on_)
        {
            at::autocast::set_cpu_enabled(false);
            at::autocast::clear_cache();
        }
    }
    autocast_bf16(const autocast_bf16&) = delete;
    autocast_bf16& operator=(const autocast_bf16&) = delete;

private:
    bool on_;
};

void reset_grad(torch::Tensor& t)
{
    t.mutable_grad().reset();  // grad = None, as optimizer.zero_grad(set_to_none=True)
}

template <class T>
class torch_mha final : public mha_case
{
public:
    torch_mha(const mha_problem<T>& p, bool composed, bool bf16)
        : composed_(composed), bf16_(bf16), B_(p.B), T_(p.T), d_(p.d), H_(p.H), mha_(nullptr)
    {
        const auto B = static_cast<std::int64_t>(p.B), Tn = static_cast<std::int64_t>(p.T),
                   d = static_cast<std::int64_t>(p.d);
        W_Q_ = from(p.W_Q, {d, d}).requires_grad_(true);
        W_K_ = from(p.W_K, {d, d}).requires_grad_(true);
        W_V_ = from(p.W_V, {d, d}).requires_grad_(true);
        W_O_ = from(p.W_O, {d, d}).requires_grad_(true);
        // keep[i][j] = key j visible from query i (the chapter's convention); built once, outside timing.
        const torch::Tensor keep = torch::ones({Tn, Tn}, torch::kBool).tril();
        if (composed_)
        {
            X_ = from(p.X, {B, Tn, d}).requires_grad_(true);
            G_ = from(p.G, {B, Tn, d});
            masked_ = keep.logical_not();  // masked_fill wants true where the score is removed
        }
        else
        {
            // nn.MultiheadAttention in 1.13's C++ API has no batch_first: (T, B, d), prepared untimed.
            X_ = from(p.X, {B, Tn, d}).transpose(0, 1).contiguous().requires_grad_(true);
            G_ = from(p.G, {B, Tn, d}).transpose(0, 1).contiguous();
            // 1.13's C++ multi_head_attention_forward *adds* attn_mask to the scores (a bool mask would
            // add 0/1, not mask), so pass the additive form: -inf where the key is NOT allowed.
            auto dtype = c10::CppTypeToScalarType<T>::value;
            additive_mask_ = torch::zeros({Tn, Tn}, dtype).masked_fill(keep.logical_not(),
                                                                        -std::numeric_limits<T>::infinity());
            mha_ = torch::nn::MultiheadAttention(torch::nn::MultiheadAttentionOptions(d, p.H).bias(false));
            mha_->to(dtype);
            torch::NoGradGuard no_grad;
            // torch's Linear computes x W^T: in_proj_weight = [W_Q^T; W_K^T; W_V^T], out_proj.weight = W_O^T.
            mha_->in_proj_weight.copy_(torch::cat({W_Q_.t(), W_K_.t(), W_V_.t()}, 0));
            mha_->out_proj->weight.copy_(W_O_.t());
        }
    }

    void step() override
    {
        torch::Tensor y = forward();
        (y.to(G_.scalar_type()) * G_).sum().backward();
    }

    std::size_t instrumented_step() override
    {
        // Not counted under autocast: LibTorch's bf16 matmul asks the allocator for raw buffers, which the
        // counting wrapper cannot serve (its data and context pointers differ).
        counting_allocator& counter = the_counter();
        if (!bf16_)
        {
            counter.install();
        }
        const std::int64_t before = counter.live();
        torch::Tensor y = forward().to(G_.scalar_type());
        torch::Tensor loss = (y * G_).sum();
        const std::int64_t held = counter.live() - before;
        loss.backward();
        if (!bf16_)
        {
            counter.uninstall();
        }
        y_ = composed_ ? y.detach().clone() : y.detach().transpose(0, 1).contiguous();
        return held > 0 ? static_cast<std::size_t>(held) : 0;
    }

    std::vector<double> output() const override { return to_doubles(y_); }

    std::vector<double> grad_w_q() const override
    {
        if (composed_)
        {
            return to_doubles(W_Q_.grad());
        }
        const auto d = static_cast<std::int64_t>(d_);
        return to_doubles(mha_->in_proj_weight.grad().slice(0, 0, d).t());
    }

private:
    // Clears the previous step's gradients, then records the forward. Returns Y.
    torch::Tensor forward()
    {
        const autocast_bf16 autocast(bf16_);
        reset_grad(X_);
        const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_),
                   d = static_cast<std::int64_t>(d_), H = static_cast<std::int64_t>(H_), dh = d / H;
        if (!composed_)
        {
            for (auto& p : mha_->parameters())
            {
                reset_grad(p);
            }
            // need_weights = false: the averaged weights are not part of the chapter's computation.
            return std::get<0>(mha_->forward(X_, X_, X_, {}, /*need_weights=*/false, additive_mask_));
        }
        for (auto* w : {&W_Q_, &W_K_, &W_V_, &W_O_})
        {
            reset_grad(*w);
        }
        // The chapter, op for op: projections, split heads, scaled masked scores, softmax, combine, W_O.
        auto q = X_.matmul(W_Q_).view({B, Tn, H, dh}).transpose(1, 2);
        auto k = X_.matmul(W_K_).view({B, Tn, H, dh}).transpose(1, 2);
        auto v = X_.matmul(W_V_).view({B, Tn, H, dh}).transpose(1, 2);
        auto scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
        scores = scores.masked_fill(masked_, -std::numeric_limits<double>::infinity());
        auto attention = torch::softmax(scores, -1);
        auto heads = attention.matmul(v).transpose(1, 2).reshape({B, Tn, d});
        return heads.matmul(W_O_);
    }

    bool composed_, bf16_;
    std::size_t B_, T_, d_, H_;
    torch::Tensor X_, G_, W_Q_, W_K_, W_V_, W_O_, masked_, additive_mask_, y_;
    torch::nn::MultiheadAttention mha_;
};

template <class T>
class torch_chain final : public chain_case
{
public:
    torch_chain(std::size_t length, std::size_t width) : length_(length)
    {
        auto options = torch::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
        const auto w = static_cast<std::int64_t>(width);
        x_ = torch::ones({w}, options).requires_grad_(true);
        c_ = torch::ones({w}, options);
    }

    void step() override
    {
        reset_grad(x_);
        torch::Tensor y = x_;
        for (std::size_t i = 0; i < length_; ++i)
        {
            y = y + c_;
        }
        y.sum().backward();
        result_ = x_.grad().sum().item<double>();
    }

    double result() const override { return result_; }

private:
    std::size_t length_;
    torch::Tensor x_, c_;
    double result_ = 0;
};
// The same GPT as models::gpt_forward (docs/spec.md, "The small GPT": pre-LN, learned positions, head tied to
// wte, causal attention composed as in the MHA case, tanh GELU) and torch.optim.AdamW with nanoGPT's two
// parameter groups (weight decay on tensors of rank >= 2 only, as xgrad's optimiser).
class torch_gpt final : public gpt_case
{
public:
    torch_gpt(const gpt_problem& p, bool bf16) : s_(p.spec), bf16_(bf16)
    {
        std::vector<torch::Tensor> decay, no_decay;
        for (const auto& t : p.params)
        {
            torch::Tensor tensor = torch::from_blob(const_cast<float*>(t.values.data()), t.shape, torch::kFloat)
                                       .clone()
                                       .requires_grad_(true);
            params_[t.name] = tensor;
            (t.shape.size() >= 2 ? decay : no_decay).push_back(tensor);
        }
        const auto B = static_cast<std::int64_t>(s_.B), T = static_cast<std::int64_t>(s_.T);
        tokens_ = torch::from_blob(const_cast<std::int64_t*>(p.tokens.data()), {B, T}, torch::kLong).clone();
        targets_ = torch::from_blob(const_cast<std::int64_t*>(p.targets.data()), {B * T}, torch::kLong).clone();
        masked_ = torch::ones({T, T}, torch::kBool).tril().logical_not();
        std::vector<torch::optim::OptimizerParamGroup> groups;
        groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                       torch::optim::AdamWOptions(p.lr).weight_decay(p.weight_decay)));
        groups.emplace_back(no_decay,
                            std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(p.lr).weight_decay(0)));
        optimiser_ = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(p.lr));
    }

    double step() override
    {
        optimiser_->zero_grad();
        torch::Tensor loss;
        {
            const autocast_bf16 autocast(bf16_);
            loss = forward();
        }
        loss.backward();
        optimiser_->step();
        return loss.item<double>();
    }

private:
    const torch::Tensor& w(const std::string& name) { return params_.at(name); }

    torch::Tensor forward()
    {
        const auto B = static_cast<std::int64_t>(s_.B), T = static_cast<std::int64_t>(s_.T),
                   d = static_cast<std::int64_t>(s_.d), H = static_cast<std::int64_t>(s_.H), dh = d / H,
                   V = static_cast<std::int64_t>(s_.V);
        torch::Tensor x = w("wte").index_select(0, tokens_.view({-1})).view({B, T, d}) + w("wpe").slice(0, 0, T);
        for (std::size_t i = 0; i < s_.L; ++i)
        {
            const std::string b = "blocks." + std::to_string(i) + ".";
            auto h = torch::layer_norm(x, {d}, w(b + "ln_1.weight"), w(b + "ln_1.bias"), 1e-5);
            auto q = h.matmul(w(b + "attn.W_Q")).view({B, T, H, dh}).transpose(1, 2);
            auto k = h.matmul(w(b + "attn.W_K")).view({B, T, H, dh}).transpose(1, 2);
            auto v = h.matmul(w(b + "attn.W_V")).view({B, T, H, dh}).transpose(1, 2);
            auto scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
            scores = scores.masked_fill(masked_, -std::numeric_limits<double>::infinity());
            auto heads = torch::softmax(scores, -1).matmul(v).transpose(1, 2).reshape({B, T, d});
            x = x + heads.matmul(w(b + "attn.W_O"));
            auto h2 = torch::layer_norm(x, {d}, w(b + "ln_2.weight"), w(b + "ln_2.bias"), 1e-5);
            auto hidden = torch::gelu(h2.matmul(w(b + "mlp.W_fc")) + w(b + "mlp.b_fc"), "tanh");
            x = x + hidden.matmul(w(b + "mlp.W_proj")) + w(b + "mlp.b_proj");
        }
        x = torch::layer_norm(x, {d}, w("ln_f.weight"), w("ln_f.bias"), 1e-5);
        auto logits = x.matmul(w("wte").t()).view({B * T, V});
        return torch::nn::functional::cross_entropy(
            logits, targets_, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1));
    }

    gpt_spec s_;
    bool bf16_;
    std::map<std::string, torch::Tensor> params_;
    torch::Tensor tokens_, targets_, masked_;
    std::unique_ptr<torch::optim::AdamW> optimiser_;
};

// The parameter names of a decode_spec's model in docs/spec.md's order (the default GPT, or llama2.c's
// shape: rmsnorm, rope, swiglu, no biases, head tied).
std::vector<std::string> decode_names(const decode_spec& s)
{
    std::vector<std::string> names{"wte"};
    if (!s.llama)
    {
        names.push_back("wpe");
    }
    for (std::size_t i = 0; i < s.L; ++i)
    {
        const std::string b = "blocks." + std::to_string(i) + ".";
        const std::vector<std::string> block =
            s.llama ? std::vector<std::string>{"ln_1.weight", "attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O",
                                               "ln_2.weight", "mlp.W_gate", "mlp.W_up", "mlp.W_down"}
                    : std::vector<std::string>{"ln_1.weight", "ln_1.bias",   "attn.W_Q",  "attn.W_K",
                                               "attn.W_V",    "attn.W_O",    "ln_2.weight", "ln_2.bias",
                                               "mlp.W_fc",    "mlp.b_fc",    "mlp.W_proj", "mlp.b_proj"};
        for (const auto& n : block)
        {
            names.push_back(b + n);
        }
    }
    names.push_back("ln_f.weight");
    if (!s.llama)
    {
        names.push_back("ln_f.bias");
    }
    return names;
}

// models::decoder's loop in LibTorch ops, under torch::NoGradGuard: one token's row through every layer,
// its key and value written into preallocated caches (block, d), attention over the filled rows.
class torch_decode final : public decode_case
{
public:
    torch_decode(const decode_spec& s, std::map<std::string, torch::Tensor> w) : s_(s), w_(std::move(w))
    {
        const auto d = static_cast<std::int64_t>(s.d), block = static_cast<std::int64_t>(s.block);
        for (std::size_t l = 0; l < s.L; ++l)
        {
            keys_.push_back(torch::zeros({block, d}));
            values_.push_back(torch::zeros({block, d}));
        }
        if (s.llama)  // angle[t][i] = t 10000^(-2i/dh)
        {
            const auto dh = d / static_cast<std::int64_t>(s.H);
            auto i = torch::arange(0, dh / 2, torch::kDouble);
            auto t = torch::arange(0, block, torch::kDouble);
            auto angle = t.unsqueeze(1) * torch::pow(10000.0, -2.0 * i / static_cast<double>(dh)).unsqueeze(0);
            cos_ = torch::cos(angle).to(torch::kFloat);
            sin_ = torch::sin(angle).to(torch::kFloat);
        }
    }

    void clear() override { pos_ = 0; }

    std::int32_t step(std::int32_t token) override
    {
        torch::NoGradGuard no_grad;
        const auto d = static_cast<std::int64_t>(s_.d), H = static_cast<std::int64_t>(s_.H), dh = d / H,
                   t = pos_ + 1;
        torch::Tensor x = w("wte")[token].clone();
        if (!s_.llama)
        {
            x = x + w("wpe")[pos_];
        }
        for (std::size_t l = 0; l < s_.L; ++l)
        {
            const std::string b = "blocks." + std::to_string(l) + ".";
            auto h = norm(x, b + "ln_1");
            auto q = h.matmul(w(b + "attn.W_Q")), k = h.matmul(w(b + "attn.W_K"));
            if (s_.llama)
            {
                q = rope(q);
                k = rope(k);
            }
            keys_[l][pos_].copy_(k);
            values_[l][pos_].copy_(h.matmul(w(b + "attn.W_V")));
            auto K = keys_[l].slice(0, 0, t).view({t, H, dh}).transpose(0, 1);    // (H, t, dh)
            auto V = values_[l].slice(0, 0, t).view({t, H, dh}).transpose(0, 1);  // (H, t, dh)
            auto scores = K.matmul(q.view({H, dh, 1})).squeeze(-1) / std::sqrt(static_cast<double>(dh));
            auto heads = torch::softmax(scores, -1).unsqueeze(1).matmul(V).reshape({d});
            x = x + heads.matmul(w(b + "attn.W_O"));
            auto h2 = norm(x, b + "ln_2");
            if (s_.llama)
            {
                x = x + (torch::silu(h2.matmul(w(b + "mlp.W_gate"))) * h2.matmul(w(b + "mlp.W_up")))
                            .matmul(w(b + "mlp.W_down"));
            }
            else
            {
                auto hidden = torch::gelu(h2.matmul(w(b + "mlp.W_fc")) + w(b + "mlp.b_fc"), "tanh");
                x = x + hidden.matmul(w(b + "mlp.W_proj")) + w(b + "mlp.b_proj");
            }
        }
        x = norm(x, "ln_f");
        ++pos_;
        return static_cast<std::int32_t>(w("wte").matmul(x).argmax().item<std::int64_t>());
    }

private:
    const torch::Tensor& w(const std::string& name) const { return w_.at(name); }

    torch::Tensor norm(const torch::Tensor& x, const std::string& prefix) const
    {
        if (s_.llama)
        {
            return x * torch::rsqrt(x.pow(2).mean() + 1e-5) * w(prefix + ".weight");
        }
        return torch::layer_norm(x, {static_cast<std::int64_t>(s_.d)}, w(prefix + ".weight"), w(prefix + ".bias"),
                                 1e-5);
    }

    // Each pair (2i, 2i+1) of each head turned by the position's angles.
    torch::Tensor rope(const torch::Tensor& v) const
    {
        const auto H = static_cast<std::int64_t>(s_.H), pairs = static_cast<std::int64_t>(s_.d / s_.H / 2);
        auto p = v.view({H, pairs, 2});
        auto a = p.select(2, 0), b = p.select(2, 1), c = cos_[pos_], s = sin_[pos_];
        return torch::stack({a * c - b * s, a * s + b * c}, 2).reshape({-1});
    }

    decode_spec s_;
    std::map<std::string, torch::Tensor> w_;
    std::vector<torch::Tensor> keys_, values_;
    torch::Tensor cos_, sin_;
    std::int64_t pos_ = 0;
};
}  // namespace

std::unique_ptr<gpt_case> make_torch_gpt(const gpt_problem& p, bool bf16)
{
    return std::make_unique<torch_gpt>(p, bf16);
}

void torch_save_decode(const decode_weights& w, const std::string& path)
{
    std::vector<torch::Tensor> tensors;
    for (const auto& name : decode_names(w.spec))
    {
        const auto t = std::find_if(w.params.begin(), w.params.end(), [&](const gpt_tensor& g) { return g.name == name; });
        tensors.push_back(torch::from_blob(const_cast<float*>(t->values.data()), t->shape, torch::kFloat).clone());
    }
    torch::save(tensors, path);
}

std::unique_ptr<decode_case> torch_load_decode(const decode_spec& spec, const std::string& path)
{
    std::vector<torch::Tensor> tensors;
    torch::load(tensors, path);
    std::map<std::string, torch::Tensor> w;
    const std::vector<std::string> names = decode_names(spec);
    for (std::size_t k = 0; k < names.size(); ++k)
    {
        w[names[k]] = tensors.at(k);
    }
    return std::make_unique<torch_decode>(spec, std::move(w));
}

template <class T>
std::unique_ptr<mha_case> make_torch_mha(const mha_problem<T>& p, bool composed, bool bf16)
{
    return std::make_unique<torch_mha<T>>(p, composed, bf16);
}

template <class T>
std::unique_ptr<chain_case> make_torch_chain(std::size_t length, std::size_t width)
{
    return std::make_unique<torch_chain<T>>(length, width);
}

void torch_threads(int n)
{
    at::set_num_threads(n);
}

std::string torch_version()
{
    return TORCH_VERSION;
}

// The few items of at::show_config() that matter here (which BLAS, oneDNN, OpenMP, SIMD level).
std::string torch_blas_info()
{
    std::string config = at::show_config(), out;
    std::replace(config.begin(), config.end(), '\n', ',');
    std::istringstream items(config);
    std::string item;
    while (std::getline(items, item, ','))
    {
        const auto first = item.find_first_not_of(" -");
        item = first == std::string::npos ? "" : item.substr(first);
        for (const char* key : {"CPU capability usage", "BLAS_INFO", "USE_MKLDNN", "USE_OPENMP"})
        {
            if (item.rfind(key, 0) == 0 && out.find(item) == std::string::npos)
            {
                out += (out.empty() ? "" : ", ") + item;
            }
        }
    }
    return out;
}

template std::unique_ptr<mha_case> make_torch_mha(const mha_problem<float>&, bool, bool);
template std::unique_ptr<mha_case> make_torch_mha(const mha_problem<double>&, bool, bool);
template std::unique_ptr<chain_case> make_torch_chain<float>(std::size_t, std::size_t);
template std::unique_ptr<chain_case> make_torch_chain<double>(std::size_t, std::size_t);
}  // namespace bench
