#include "models/masks.hpp"

#include "kernels/attention.hpp"

namespace xgrad::models
{
mask_t causal_mask(std::size_t tq, std::size_t tk, std::size_t window)
{
    mask_t m = mask_t::from_shape({tq, tk});
    for (std::size_t i = 0; i < tq; ++i)
    {
        const kernels::key_range band = kernels::visible_keys(i, tq, tk, /*causal=*/true, window);
        for (std::size_t j = 0; j < tk; ++j)
        {
            m(i, j) = band.contains(j);
        }
    }
    return m;
}

mask_t padding_mask(const std::vector<std::size_t>& lengths, std::size_t tk)
{
    mask_t m = mask_t::from_shape({lengths.size(), 1, 1, tk});
    for (std::size_t b = 0; b < lengths.size(); ++b)
    {
        for (std::size_t j = 0; j < tk; ++j)
        {
            m(b, 0, 0, j) = j < lengths[b];
        }
    }
    return m;
}

void check_mask(const char* op, const mask_t* user_mask, std::size_t batch, std::size_t heads, std::size_t tq,
                std::size_t tk)
{
    const shape_t scores{batch, heads, tq, tk};
    if (user_mask && !broadcasts_to(to_shape(user_mask->shape()), scores))
    {
        fail(op, "mask of shape " + shape_str(to_shape(user_mask->shape())) +
                     " does not broadcast to the attention scores (B, H, Tq, Tk) = " + shape_str(scores));
    }
}

std::optional<mask_t> combined_mask(const char* op, const mask_t* user_mask, bool causal, std::size_t batch,
                                    std::size_t heads, std::size_t tq, std::size_t tk)
{
    check_mask(op, user_mask, batch, heads, tq, tk);
    if (!causal)
    {
        return user_mask ? std::optional<mask_t>(*user_mask) : std::nullopt;
    }
    mask_t c = causal_mask(tq, tk);
    if (!user_mask)
    {
        return c;
    }
    return mask_t(*user_mask && c);  // logical AND, broadcast
}
}  // namespace xgrad::models
