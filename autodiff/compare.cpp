// The project's one measure of how far apart two arrays are (autodiff/compare.hpp).
#include "autodiff/compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autodiff/instantiate.hpp"
#include "autodiff/shape.hpp"

namespace xgrad
{
template <class T>
difference compare(const array<T>& a, const array<T>& b)
{
    if (a.shape() != b.shape())
    {
        fail("compare", "the arrays have shapes " + shape_str(to_shape(a.shape())) + " and " +
                            shape_str(to_shape(b.shape())));
    }
    constexpr double infinity = std::numeric_limits<double>::infinity();
    difference d;
    for (std::size_t i = 0; i < a.size(); ++i)
    {
        const double x = static_cast<double>(a.data()[i]), y = static_cast<double>(b.data()[i]);
        if (std::isnan(x) && std::isnan(y))
        {
            continue;  // NaN on both sides agrees
        }
        const double gap = std::abs(x - y);
        d.max_abs = std::isnan(gap) ? infinity : std::max(d.max_abs, gap);
        d.scale = std::max({d.scale, std::isnan(x) ? 0.0 : std::abs(x), std::isnan(y) ? 0.0 : std::abs(y)});
    }
    d.max_rel = d.max_abs == 0 ? 0 : d.scale > 0 ? d.max_abs / d.scale : infinity;
    return d;
}

#define XGRAD_COMPARE(T) template difference compare(const array<T>&, const array<T>&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_COMPARE)
}  // namespace xgrad
