// The checkpoint's claims against its contents: the tensor table of docs/spec.md ("Parameter names and
// shapes", "Architecture variants") counted in closed form from the metadata, in saturating arithmetic,
// without building the table.
#include "io/checkpoint_limits.hpp"

#include <limits>
#include <vector>

namespace xgrad::io
{
namespace
{
constexpr std::uint64_t saturated = std::numeric_limits<std::uint64_t>::max();

std::uint64_t mul(std::uint64_t a, std::uint64_t b)
{
    std::uint64_t r = 0;
    return __builtin_mul_overflow(a, b, &r) ? saturated : r;
}

std::uint64_t add(std::uint64_t a, std::uint64_t b)
{
    std::uint64_t r = 0;
    return __builtin_add_overflow(a, b, &r) ? saturated : r;
}

// A decimal integer of digits only; false for anything else (or one past UINT64_MAX).
bool parse_decimal(const std::string& text, std::uint64_t& out)
{
    if (text.empty() || text.size() > 20)
    {
        return false;
    }
    std::uint64_t n = 0;
    for (const char c : text)
    {
        if (c < '0' || c > '9' || __builtin_mul_overflow(n, 10u, &n) ||
            __builtin_add_overflow(n, static_cast<unsigned>(c - '0'), &n))
        {
            return false;
        }
    }
    out = n;
    return true;
}

std::string value_of(const std::map<std::string, std::string>& metadata, const char* key)
{
    const auto found = metadata.find(key);
    return found == metadata.end() ? std::string() : found->second;
}

// The variant keys, each unknown value read as the choice with the fewest tensors.
struct variant
{
    bool layer_norm_bias = true;  // norm = layernorm and bias != none
    bool learned_position = true;
    bool swiglu = false;
    bool mlp_bias = true;         // bias != none
    bool attention_bias = false;  // bias = all
    bool untied_head = false;
};

variant variant_of(const std::map<std::string, std::string>& metadata)
{
    const std::string norm = value_of(metadata, "norm"), position = value_of(metadata, "position"),
                      mlp = value_of(metadata, "mlp"), bias = value_of(metadata, "bias"),
                      tied = value_of(metadata, "tied_head");
    const bool layer_norm = norm.empty() || norm == "layernorm";
    variant v;
    v.mlp_bias = bias.empty() || bias == "mlp" || bias == "all";
    v.attention_bias = bias == "all";
    v.layer_norm_bias = layer_norm && v.mlp_bias;
    v.learned_position = position.empty() || position == "learned";
    v.swiglu = mlp == "swiglu";
    v.untied_head = tied == "false";
    return v;
}

// One block's tensors: two norm weights (and biases), W_Q W_K W_V W_O (and b_Q b_K b_V b_O), the MLP's
// matrices (two, or three for swiglu) and its biases.
std::uint64_t block_tensor_count(const variant& v)
{
    const std::uint64_t mlp_matrices = v.swiglu ? 3 : 2;
    return 2 + (v.layer_norm_bias ? 2 : 0) + 4 + (v.attention_bias ? 4 : 0) + mlp_matrices +
           (v.mlp_bias ? mlp_matrices : 0);
}

// One block's values: norms 2 d (4 d with biases), attention 2 d^2 + 2 d G dh (+ 2 d + 2 G dh of
// biases), the MLP's matrices 2 d h or 3 d h (+ h + d or 2 h + d of biases).
std::uint64_t block_value_count(const variant& v, std::uint64_t d, std::uint64_t kv, std::uint64_t hidden)
{
    const std::uint64_t mlp_matrices = v.swiglu ? 3 : 2;
    std::uint64_t n = add(mul(v.layer_norm_bias ? 4 : 2, d), add(mul(2, mul(d, d)), mul(2, mul(d, kv))));
    n = add(n, v.attention_bias ? add(mul(2, d), mul(2, kv)) : 0);
    n = add(n, mul(mlp_matrices, mul(d, hidden)));
    return add(n, v.mlp_bias ? add(mul(mlp_matrices - 1, hidden), d) : 0);
}

struct group
{
    std::uint64_t values;
    std::string name, fields;
};

std::string field(const char* key, std::uint64_t value)
{
    return std::string(key) + " = " + std::to_string(value);
}
}  // namespace

bool checkpoint_demand_of(const std::map<std::string, std::string>& metadata, checkpoint_demand& out)
{
    std::uint64_t V = 0, block = 0, L = 0, d = 0, H = 0, G = 0;
    const std::pair<const char*, std::uint64_t*> sizes[] = {{"vocab_size", &V},
                                                            {"block_size", &block},
                                                            {"layers", &L},
                                                            {"d_model", &d},
                                                            {"heads", &H},
                                                            {"kv_heads", &G}};
    for (const auto& [key, target] : sizes)
    {
        if (!parse_decimal(value_of(metadata, key), *target))
        {
            return false;
        }
    }
    const variant v = variant_of(metadata);
    const std::uint64_t kv = H == 0 ? 0 : mul(G, d / H);  // G dh; d % H is the loader's to report
    std::uint64_t hidden = mul(4, d);
    const std::string hidden_text = value_of(metadata, "mlp_hidden");
    if (!hidden_text.empty() && !parse_decimal(hidden_text, hidden))
    {
        hidden = 0;
    }

    const std::uint64_t block_tensors = block_tensor_count(v);
    const std::uint64_t block_values = block_value_count(v, d, kv, hidden);

    const std::string d_field = field("d_model", d);
    std::vector<group> groups{
      {mul(V, d), "wte (vocab_size x d_model)", field("vocab_size", V) + ", " + d_field},
      {mul(L, block_values),
       "the blocks (layers x block)",
       field("layers", L) + ", " + d_field + (hidden_text.empty() ? "" : ", " + field("mlp_hidden", hidden))},
      {mul(v.layer_norm_bias ? 2 : 1, d), "ln_f", d_field}};
    if (v.learned_position)
    {
        groups.push_back(
          {mul(block, d), "wpe (block_size x d_model)", field("block_size", block) + ", " + d_field});
    }
    if (v.untied_head)
    {
        groups.push_back(
          {mul(d, V), "lm_head (d_model x vocab_size)", d_field + ", " + field("vocab_size", V)});
    }

    out = checkpoint_demand{};
    out.tensors = add(add(mul(L, block_tensors), 1 + (v.layer_norm_bias ? 2 : 1)),
                      (v.learned_position ? 1 : 0) + (v.untied_head ? 1 : 0));
    for (const group& g : groups)
    {
        out.values = add(out.values, g.values);
        if (g.values >= out.largest)
        {
            out.largest = g.values;
            out.largest_group = g.name;
            out.largest_fields = g.fields;
        }
    }
    return true;
}

namespace
{
// The demand of `metadata` against `tensors` parameter tensors of `values` values in all.
void check_demand(const std::string& path, const std::map<std::string, std::string>& metadata,
                  std::uint64_t tensors, std::uint64_t values)
{
    checkpoint_demand demand;
    if (!checkpoint_demand_of(metadata, demand))
    {
        return;
    }
    // A claim within twice what the file holds costs at most twice the file: the loader then names the
    // missing or misshapen tensor itself. Beyond that, the claim is refused here.
    auto far_beyond = [](std::uint64_t claim, std::uint64_t held) { return claim > add(mul(2, held), 64); };
    const std::string many = std::to_string(demand.tensors);
    if (far_beyond(demand.tensors, tensors))
    {
        throw format_error(path + ": metadata says layers = " + value_of(metadata, "layers") +
                           ", which needs " + (demand.tensors == saturated ? "over " + many : many) +
                           " tensors; the file holds " + std::to_string(tensors) +
                           " (besides optimiser state)");
    }
    if (far_beyond(demand.values, values))
    {
        auto count = [](std::uint64_t n) { return (n == saturated ? "over " : "") + std::to_string(n); };
        throw format_error(path + ": metadata says " + demand.largest_fields + ": the model needs " +
                           count(demand.values) + " parameter values (" + demand.largest_group + " alone " +
                           count(demand.largest) + "); the file's parameter tensors hold " +
                           std::to_string(values));
    }
}
}  // namespace

void check_checkpoint_limits(const std::string& path, const safetensors_file& file)
{
    std::uint64_t tensors = 0, values = 0;
    for (const auto& [name, t] : file.tensors)
    {
        if (name.rfind("optim.", 0) != 0)
        {
            ++tensors;
            values = add(values, t.values.size());
        }
    }
    check_demand(path, file.metadata, tensors, values);
}

void check_checkpoint_limits(const safetensors_reader& file)
{
    std::uint64_t tensors = 0, values = 0;
    for (const auto& [name, t] : file.tensors())
    {
        if (name.rfind("optim.", 0) != 0)
        {
            ++tensors;
            values = add(values, t.count());
        }
    }
    check_demand(file.path(), file.metadata(), tensors, values);
}
}  // namespace xgrad::io
