// A model's or an array's size against the address space, in 64-bit arithmetic that saturates.
#include "io/size_limits.hpp"

#include <limits>
#include <stdexcept>

#include "io/checkpoint_limits.hpp"

namespace xgrad::io
{
namespace
{
using models::saturated_count_text;

bool fits(std::uint64_t values, std::size_t value_bytes)
{
    std::uint64_t bytes = 0;
    return !__builtin_mul_overflow(values, value_bytes, &bytes) && bytes <= max_size_bytes;
}

} // namespace

void check_gpt_size(const models::gpt_config& config, std::size_t value_bytes, const std::string& who)
{
    checkpoint_demand demand;
    if (!checkpoint_demand_of(models::config_metadata(config), demand))
    {
        throw std::invalid_argument(who + ": the model's sizes cannot be counted");
    }
    if (!fits(demand.values, value_bytes))
    {
        throw std::invalid_argument(who + ": the model needs " + saturated_count_text(demand.values) +
                                    " parameter values (the largest group, " + demand.largest_group + ", " +
                                    saturated_count_text(demand.largest) + ": " + demand.largest_fields +
                                    "); at most 2^47 bytes, " + std::to_string(max_size_bytes / value_bytes) +
                                    " values of " + std::to_string(value_bytes) + " bytes");
    }
}

void check_array_size(const std::string& who,
                      const std::string& what,
                      std::initializer_list<std::uint64_t> sizes,
                      std::size_t value_bytes)
{
    std::uint64_t count = 1;
    std::string shape;
    bool overflow = false;
    for (const std::uint64_t n : sizes)
    {
        overflow = overflow || __builtin_mul_overflow(count, n, &count);
        shape += (shape.empty() ? "" : ", ") + std::to_string(n);
    }
    if (overflow || !fits(count, value_bytes))
    {
        throw std::invalid_argument(who + ": " + what + " of shape (" + shape + ") needs " +
                                    saturated_count_text(overflow ? UINT64_MAX : count) +
                                    " values; at most 2^47 bytes");
    }
}
} // namespace xgrad::io
