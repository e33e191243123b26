// Every algorithm of this build: one line each in kAlgorithms, in the order
// the tuner breaks ties.
#include <cstring>

#include "algorithms/algorithm.h"

#define STRATA_ALGORITHMS(X) \
  X(ring) X(tree) X(hierarchical) X(leaders) X(one_shot) X(direct_read) X(pairwise) X(device_direct) \
  X(device_ring) X(device_mesh) X(device_p2p) X(device_self) X(device_shared)

namespace strata::algorithms {

#define STRATA_DECLARE(ns) \
  namespace ns {           \
  const Algorithm& algorithm(); \
  }
STRATA_ALGORITHMS(STRATA_DECLARE)
#undef STRATA_DECLARE

const std::vector<const Algorithm*>& registry() {
#define STRATA_ENTRY(ns) &ns::algorithm(),
  static const std::vector<const Algorithm*> all = {STRATA_ALGORITHMS(STRATA_ENTRY)};
#undef STRATA_ENTRY
  return all;
}

const Algorithm* findAlgorithm(const char* name) {
  for (const Algorithm* a : registry())
    if (strcmp(a->name(), name) == 0) return a;
  return nullptr;
}

}  // namespace strata::algorithms
