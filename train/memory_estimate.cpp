// Memory estimates in closed form, and the memory available from /proc and the cgroup. The coefficients
// were fitted to the peak resident memory (VmHWM) of xgrad-train runs on this code (L = 1..8,
// d = 16..512, B x T = 256..4096 tokens) and rounded up, so that each estimate is an upper bound: the
// fixed part grows with the weights (about 22 float copies of them: weights, gradients, Adam's two
// moments and the tape's and the matrix products' working copies), the rest with the tokens of a batch
// (about 42 d values a token in each layer, and the logits).
#include "train/memory_estimate.hpp"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <vector>

namespace xgrad::train
{
namespace
{
constexpr std::uint64_t saturated = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t mib = 1024 * 1024;
constexpr std::uint64_t process_bytes = 48 * mib;  // the program, its libraries, the data, stdio
constexpr std::uint64_t thread_bytes = 8 * mib;    // a thread's stack and its BLAS buffers
constexpr std::uint64_t weight_copies = 18;        // working copies of the weights during a step
constexpr std::uint64_t logit_copies = 8;          // logits, softmax, log-softmax and their gradients

std::uint64_t mul(std::uint64_t a, std::uint64_t b)
{
    std::uint64_t r = 0;
    return __builtin_mul_overflow(a, b, &r) ? saturated : r;
}

std::uint64_t mul(std::uint64_t a, std::uint64_t b, std::uint64_t c)
{
    return mul(mul(a, b), c);
}

std::uint64_t add(std::uint64_t a, std::uint64_t b)
{
    std::uint64_t r = 0;
    return __builtin_add_overflow(a, b, &r) ? saturated : r;
}

std::uint64_t kv_width(const gpt_sizes& s)
{
    return s.heads == 0 ? 0 : mul(s.kv_heads, s.d_model / s.heads);
}

// Values a batch keeps per token: in each layer about 32 d for the norms, projections and residuals,
// 2 h for the MLP, 2 G dh for keys and values and H T for the attention weights; then the logits.
std::uint64_t activation_values(const gpt_sizes& s,
                                std::uint64_t batch,
                                std::uint64_t tokens,
                                std::uint64_t logit_copies_kept)
{
    const std::uint64_t d = s.d_model;
    const std::uint64_t per_layer = add(add(add(mul(32, d), mul(2, s.mlp_hidden)),
                                            add(mul(2, kv_width(s)), mul(s.heads, tokens))),
                                        s.layer_extra);
    const std::uint64_t per_token =
      add(add(mul(s.layers, per_layer), add(mul(logit_copies_kept, s.vocab), mul(8, d))), s.head_extra);
    return mul(mul(batch, tokens), per_token);
}

// A number with an optional K, M, G or T suffix (powers of 1024); false for anything else.
bool parse_bytes(const std::string& text, std::uint64_t& out)
{
    std::size_t i = 0;
    std::uint64_t n = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))
    {
        if (__builtin_mul_overflow(n, 10u, &n) ||
            __builtin_add_overflow(n, static_cast<unsigned>(text[i] - '0'), &n))
        {
            return false;
        }
        ++i;
    }
    if (i == 0)
    {
        return false;
    }
    const std::string suffix = text.substr(i);
    const std::string suffixes = "KMGT";
    std::uint64_t scale = 1;
    if (!suffix.empty())
    {
        const std::size_t at =
          suffixes.find(static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0]))));
        const bool tail_ok = suffix.size() == 1 || suffix.substr(1) == "iB" || suffix.substr(1) == "B";
        if (at == std::string::npos || !tail_ok)
        {
            return false;
        }
        scale = std::uint64_t(1) << (10 * (at + 1));
    }
    if (__builtin_mul_overflow(n, scale, &out))
    {
        return false;
    }
    return true;
}

// The first number on the line of /proc/meminfo that starts with `key`, in bytes; saturated if none.
std::uint64_t meminfo_bytes(const char* key)
{
    std::ifstream in("/proc/meminfo");
    std::string name;
    std::uint64_t kib = 0;
    std::string unit;
    while (in >> name >> kib)
    {
        std::getline(in, unit);
        if (name == key)
        {
            return mul(kib, 1024);
        }
    }
    return saturated;
}

// A cgroup file holding one number (or "max"); saturated when absent or unlimited.
std::uint64_t cgroup_number(const std::string& path)
{
    std::ifstream in(path);
    std::string text;
    std::uint64_t n = 0;
    if (!(in >> text) || !parse_bytes(text, n))
    {
        return saturated;
    }
    return n;
}

// The memory the cgroup of this process can still give it (v2, else v1); saturated without a limit.
std::uint64_t cgroup_headroom()
{
    const std::pair<const char*, const char*> files[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
    for (const auto& [limit_file, usage_file] : files)
    {
        const std::uint64_t limit = cgroup_number(limit_file);
        if (limit != saturated && limit < (std::uint64_t(1) << 60))
        {
            const std::uint64_t usage = cgroup_number(usage_file);
            return usage == saturated ? limit : (usage >= limit ? 0 : limit - usage);
        }
    }
    return saturated;
}
}  // namespace

std::string bytes_text(std::uint64_t bytes)
{
    if (bytes == saturated)
    {
        return "more than 16 EiB";
    }
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = static_cast<double>(bytes);
    std::size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof units / sizeof *units)
    {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
    return buf;
}

std::uint64_t memory_estimate::total() const
{
    return add(add(add(parameters, gradients), add(optimiser, weight_work)), add(activations, workspace));
}

std::string memory_estimate::describe() const
{
    std::string s = bytes_text(total()) + " (parameters " + bytes_text(parameters);
    const std::pair<const char*, std::uint64_t> parts[] = {{"gradients", gradients},
                                                           {"Adam state", optimiser},
                                                           {"working copies of the weights", weight_work},
                                                           {"activations", activations},
                                                           {"process and threads", workspace}};
    for (const auto& [name, bytes] : parts)
    {
        if (bytes > 0)
        {
            s += ", " + std::string(name) + " " + bytes_text(bytes);
        }
    }
    return s + (shape.empty() ? "" : "; " + shape) + ")";
}

gpt_sizes sizes_of(const models::gpt_config& c)
{
    gpt_sizes s;
    s.vocab = c.vocab_size;
    s.block = c.block_size;
    s.layers = c.layers;
    s.d_model = c.d_model;
    s.heads = c.heads;
    s.kv_heads = c.kv_head_count();
    // SwiGLU has three (d, h) matrices where the GELU MLP has two: count it as 1.5 h wide, rounded up;
    // relu^2 keeps relu(x) besides its square: 2 h.
    const std::uint64_t h = c.hidden_width();
    switch (c.mlp)
    {
    case models::mlp_kind::gelu_tanh:
    case models::mlp_kind::gelu: s.mlp_hidden = h; break;
    case models::mlp_kind::swiglu: s.mlp_hidden = add(h, (h + 1) / 2); break;
    case models::mlp_kind::relu2: s.mlp_hidden = add(h, h); break;
    }
    // QK-norm keeps the normalised Q (d) and K (G dh), and their gradients; the soft cap the uncapped
    // logits and their gradient.
    s.layer_extra = c.qk_norm == models::qk_norm_kind::rms ? mul(2, add(s.d_model, kv_width(s))) : 0;
    s.head_extra = c.logit_softcap.on() ? mul(2, s.vocab) : 0;
    const models::gpt_value_count count = models::gpt_values(c);
    s.parameters = add(count.outside_blocks, mul(c.layers, count.per_block));
    return s;
}

memory_estimate estimate_training(const gpt_sizes& s, std::uint64_t batch, std::uint64_t threads)
{
    const std::uint64_t p = mul(s.parameters, sizeof(float));
    memory_estimate e;
    e.parameters = p;
    e.gradients = p;
    e.optimiser = mul(2, p);
    e.weight_work = mul(weight_copies, p);
    e.activations = mul(activation_values(s, batch, s.block, logit_copies), sizeof(float));
    e.workspace = add(process_bytes, mul(threads, thread_bytes));
    e.shape = "B = " + std::to_string(batch) + " windows of T = " + std::to_string(s.block) + " tokens, " +
              std::to_string(threads) + (threads == 1 ? " thread" : " threads");
    return e;
}

memory_estimate estimate_gpt_run(const gpt_sizes& s,
                                 std::uint64_t batch,
                                 std::uint64_t tokens,
                                 std::uint64_t value_bytes,
                                 bool backward)
{
    const std::uint64_t p = mul(s.parameters, value_bytes);
    memory_estimate e;
    e.parameters = p;
    e.gradients = backward ? mul(2, p) : 0;  // the gradients and their copy for grads.safetensors
    e.weight_work = mul(weight_copies / 2, p);
    e.activations =
      mul(activation_values(s, batch, tokens, backward ? logit_copies : logit_copies / 2), value_bytes);
    e.workspace = add(process_bytes, thread_bytes);
    e.shape = "B = " + std::to_string(batch) + " rows of T = " + std::to_string(tokens) + " tokens";
    return e;
}

memory_estimate estimate_attention_run(std::uint64_t batch,
                                       std::uint64_t tq,
                                       std::uint64_t tk,
                                       std::uint64_t d,
                                       std::uint64_t heads,
                                       std::uint64_t value_bytes)
{
    memory_estimate e;
    e.parameters = mul(4, d, mul(d, value_bytes));
    e.gradients = e.parameters;
    e.weight_work = mul(4, e.parameters);
    // The scores, the weights, attn.npy and their gradients: six (B, H, Tq, Tk) arrays; then about 24 d
    // values per query or key row for the projections, heads, outputs and their gradients.
    const std::uint64_t weights = mul(mul(batch, heads), mul(tq, tk));
    const std::uint64_t rows = mul(batch, add(tq, mul(2, tk)));
    e.activations = mul(add(mul(6, weights), mul(24, rows, d)), value_bytes);
    e.workspace = add(process_bytes, thread_bytes);
    e.shape = "B = " + std::to_string(batch) + ", H = " + std::to_string(heads) +
              ", Tq = " + std::to_string(tq) + ", Tk = " + std::to_string(tk) + ", d = " + std::to_string(d);
    return e;
}

memory_budget available_memory()
{
    if (const char* env = std::getenv("XGRAD_MAX_MEMORY"))
    {
        return parse_memory_budget(env, "XGRAD_MAX_MEMORY");
    }
    memory_budget b{meminfo_bytes("MemAvailable:"), "MemAvailable in /proc/meminfo"};
    const std::uint64_t cgroup = cgroup_headroom();
    if (cgroup < b.bytes)
    {
        b = {cgroup, "the cgroup's memory limit less its usage"};
    }
    return b;
}

memory_budget parse_memory_budget(const std::string& text, const std::string& source)
{
    if (text == "auto")
    {
        return available_memory();
    }
    memory_budget b{0, source};
    if (!parse_bytes(text, b.bytes))
    {
        throw std::invalid_argument(source +
                                    " must be 'auto' or a number of bytes with an optional K, M, G or T "
                                    "suffix (powers of 1024), got '" +
                                    text + "'");
    }
    return b;
}

std::string memory_shortfall(const memory_estimate& need,
                             const memory_budget& budget,
                             const std::string& what,
                             const std::string& remedy)
{
    if (need.total() <= budget.bytes)
    {
        return "";
    }
    return what + " needs about " + need.describe() + " by an estimate from the sizes, more than the " +
           bytes_text(budget.bytes) + " available (" + budget.source + "); " + remedy;
}

void require_memory(const memory_estimate& need,
                    const memory_budget& budget,
                    const std::string& what,
                    const std::string& remedy)
{
    const std::string refusal = memory_shortfall(need, budget, what, remedy);
    if (!refusal.empty())
    {
        throw std::invalid_argument(refusal);
    }
}
}  // namespace xgrad::train
