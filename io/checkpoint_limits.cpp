// The checkpoint's claims against its contents: the parameters the metadata's config declares
// (models/gpt.hpp, one block's declarations times the layers), counted in saturating arithmetic without
// building the table.
#include "io/checkpoint_limits.hpp"

#include <limits>
#include <vector>

#include "models/gpt.hpp"

namespace xgrad::io
{
namespace
{
using models::saturating_add;
using models::saturating_mul;
using models::saturated_count_text;

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

// The config the metadata describes, read leniently: sizes as 64-bit decimals (false when one is missing,
// malformed or H = 0: the loader reports that itself), a variant value this reader cannot read left at its
// default (the loader names it afterwards).
bool lenient_config(const std::map<std::string, std::string>& metadata, models::gpt_config& c)
{
    bool sizes_read = true;
    models::visit_config(c, [&](const models::config_field& f, auto& member) {
        const std::string text = value_of(metadata, f.key);
        if constexpr (std::is_same_v<std::decay_t<decltype(member)>, std::size_t>)
        {
            if (f.is_size)
            {
                std::uint64_t n = 0;
                sizes_read = sizes_read && parse_decimal(text, n);
                member = n;
                return;
            }
        }
        try
        {
            if (!text.empty())
            {
                models::read_field(f.key, text, member);
            }
        }
        catch (const models::variant_error&)
        {
        }
    });
    return sizes_read && c.heads != 0;
}

struct group
{
    std::uint64_t values;
    std::string name;
};
}  // namespace

bool checkpoint_demand_of(const std::map<std::string, std::string>& metadata, checkpoint_demand& out)
{
    models::gpt_config c;
    if (!lenient_config(metadata, c))
    {
        return false;
    }
    const models::gpt_value_count count = models::gpt_values(c);
    std::vector<group> groups{{saturating_mul(c.layers, count.per_block), "the blocks (layers x block)"}};
    auto outer = [&groups](const std::string& name, auto, const models::declaration& d) {
        groups.push_back({models::declared_values(d), name + " " + d.formula});
    };
    models::gpt_parameters<float>::declare_embedding(c, outer);
    models::gpt_parameters<float>::declare_head(c, outer);

    out = checkpoint_demand{};
    out.tensors = saturating_add(saturating_mul(c.layers, count.tensors_per_block),
                                         count.tensors_outside_blocks);
    for (const group& g : groups)
    {
        out.values = saturating_add(out.values, g.values);
        if (g.values >= out.largest)
        {
            out.largest = g.values;
            out.largest_group = g.name;
        }
    }
    out.largest_fields = models::describe(c);
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
    auto far_beyond = [](std::uint64_t claim, std::uint64_t held) {
        return claim > saturating_add(saturating_mul(2, held), 64);
    };
    if (far_beyond(demand.tensors, tensors))
    {
        const char* layers = models::key_of(&models::gpt_config::layers);
        throw format_error(path + ": metadata says " + layers + " = " + value_of(metadata, layers) +
                           ", which needs " + saturated_count_text(demand.tensors) +
                           " tensors; the file holds " + std::to_string(tensors) +
                           " (besides optimiser state)");
    }
    if (far_beyond(demand.values, values))
    {
        throw format_error(path + ": metadata says " + demand.largest_fields + ": the model needs " +
                           saturated_count_text(demand.values) + " parameter values (" +
                           demand.largest_group + " alone " + saturated_count_text(demand.largest) +
                           "); the file's parameter tensors hold " + std::to_string(values));
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
            values = saturating_add(values, t.values.size());
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
            values = saturating_add(values, t.count());
        }
    }
    check_demand(file.path(), file.metadata(), tensors, values);
}
}  // namespace xgrad::io
