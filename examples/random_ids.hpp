// Seeded token ids for the examples' batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

#include "autodiff/xtensor.hpp"

namespace xgrad::examples
{
// (batch, length) ids drawn uniformly from [0, vocab) with `rng`, a standard random engine.
template <class Engine>
ids_t random_ids(std::size_t batch, std::size_t length, std::size_t vocab, Engine& rng)
{
    std::uniform_int_distribution<std::int64_t> id(0, static_cast<std::int64_t>(vocab) - 1);
    ids_t ids = ids_t::from_shape({batch, length});
    for (auto& v : ids)
    {
        v = id(rng);
    }
    return ids;
}
}  // namespace xgrad::examples
