// The ring inside one node, as the hierarchical and Leaders all-reduces use it:
// two links per neighbour (one for the reduce-scatter or reduce half, one for
// the all-gather or broadcast half), on one lane the two algorithms share.
#pragma once

#include "algorithms/algorithm.h"

namespace strata::algorithms {

struct NodeRing {
  int prev = -1, next = -1;  // ranks
  int size = 1;              // ranks in the node
  LinkKey rsFrom, rsTo, agFrom, agTo;
};

// Registers the node ring's links (when the node has more than this rank).
NodeRing useNodeRing(PlanContext& ctx);
// The lane of every task on the node ring's links.
inline LaneKey nodeLane() { return {linkId("node"), 0}; }

}  // namespace strata::algorithms
