// Where xgrad includes xtensor's arrays, builders, views and maths. xtensor 0.24 uses flat header paths;
// a later version moved them (under xtensor/containers/, ...): an upgrade touches this file and the few
// that take one more facility of their own (shape.hpp's small vector, a reducer, noalias, adapt).
#pragma once

#include <cstdint>

#include "autodiff/memory.hpp"
#include "autodiff/shape.hpp"

// GCC 12's -Wmaybe-uninitialized has false positives inside xtensor's headers (see shape.hpp); off there.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xio.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace xgrad
{
// Every tensor xgrad hands out is a dense row-major xarray whose memory comes from xgrad's buffer pool
// (autodiff/memory.hpp). Any xtensor expression, a plain xt::xarray included, converts to it.
template <class T>
using array = xt::xarray<T, xt::layout_type::row_major, pool_allocator<T>>;

// A boolean mask: true = keep (this query may attend to this key).
using mask_t = xt::xarray<bool, xt::layout_type::row_major>;

// Integer indices: token ids, embedding rows, class targets (-1 = ignored where an op says so).
using ids_t = xt::xarray<std::int64_t, xt::layout_type::row_major>;

}  // namespace xgrad
