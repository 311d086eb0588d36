#include "autodiff/shape.hpp"

#include <algorithm>

namespace xgrad
{
std::string shape_str(const shape_t& shape)
{
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i)
    {
        s += (i ? ", " : "") + std::to_string(shape[i]);
    }
    return s + ")";
}

std::string position_str(std::size_t flat, const shape_t& shape)
{
    shape_t index(shape.size());
    for (std::size_t ax = shape.size(); ax-- > 0;)
    {
        index[ax] = flat % shape[ax];
        flat /= shape[ax];
    }
    return shape_str(index);
}

std::size_t element_count(const shape_t& shape, const char* op)
{
    if (std::find(shape.begin(), shape.end(), 0) != shape.end())
    {
        return 0;  // sizes past 2^64 with a 0 among them are still empty
    }
    std::size_t n = 1;
    for (auto s : shape)
    {
        if (__builtin_mul_overflow(n, s, &n))
        {
            fail(op, "shape " + shape_str(shape) + " has more elements than 2^64");
        }
    }
    return n;
}

void fail(const char* op, const std::string& what)
{
    throw std::invalid_argument(std::string(op) + ": " + what);
}

shape_t broadcast_shapes(const char* op, const shape_t& a, const shape_t& b)
{
    const std::size_t rank = std::max(a.size(), b.size());
    shape_t out(rank);
    for (std::size_t i = 0; i < rank; ++i)
    {
        const std::size_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const std::size_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        if (da != db && da != 1 && db != 1)
        {
            fail(op, "shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
        }
        out[i] = da == 1 ? db : da;
    }
    return out;
}

bool broadcasts_to(const shape_t& from, const shape_t& to)
{
    if (from.size() > to.size())
    {
        return false;
    }
    const std::size_t lead = to.size() - from.size();
    for (std::size_t i = 0; i < from.size(); ++i)
    {
        if (from[i] != 1 && from[i] != to[lead + i])
        {
            return false;
        }
    }
    return true;
}

std::vector<std::size_t> broadcast_strides(const shape_t& shape, std::size_t rank)
{
    std::vector<std::size_t> strides(rank, 0);
    std::size_t stride = 1;
    for (std::size_t i = shape.size(); i-- > 0;)
    {
        strides[rank - shape.size() + i] = shape[i] == 1 ? 0 : stride;
        stride *= shape[i];
    }
    return strides;
}

axis_split split_at(const shape_t& shape, std::size_t axis)
{
    axis_split s;
    for (std::size_t i = 0; i < shape.size(); ++i)
    {
        (i < axis ? s.outer : i == axis ? s.length : s.inner) *= shape[i];
    }
    return s;
}
}  // namespace xgrad
