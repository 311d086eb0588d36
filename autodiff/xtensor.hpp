// The one place xgrad includes xtensor. xtensor 0.24 uses flat header paths; a later upgrade
// (which moved them under xtensor/containers/, ...) only has to touch this file.
#pragma once

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xio.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

namespace xgrad
{
// Every tensor xgrad hands out is a dense row-major xarray.
template <class T>
using array = xt::xarray<T, xt::layout_type::row_major>;

using shape_t = std::vector<std::size_t>;
}  // namespace xgrad
