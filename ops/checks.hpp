// Argument-check helpers shared by the fused ops' files (ops/*.cpp). Internal.
#pragma once

#include <sstream>
#include <string>

#include "autodiff/shape.hpp"

namespace xgrad::ops::checks
{
// A number as the error messages print it (an eps, a probability, a base).
template <class T>
std::string number_str(T value)
{
    std::ostringstream out;
    out << value;
    return out.str();
}

// An op over the last axis needs one.
inline void check_has_last_axis(const char* op, const shape_t& shape)
{
    if (shape.empty())
    {
        fail(op, "input must have at least one axis, got shape ()");
    }
}
}  // namespace xgrad::ops::checks
