// A rank's copy of its own piece (all-to-all, gather, scatter, a broadcast root's
// output) as a task on its own lane, so that it runs while the peers' transfers
// are under way instead of before the first offer or exposure is made.
#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"

namespace strata::algorithms {

// Queues the copy of `bytes` from `src` to `dst` (nothing when they are the same).
// Overlapping ranges are moved at once, as memmove does; disjoint ones in chunks,
// one per sweep, so the executor keeps the other lanes going between them.
void addLocalCopy(PlanContext& ctx, const char* fn, void* dst, const void* src, size_t bytes);

}  // namespace strata::algorithms
