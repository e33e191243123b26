// Pieces of the alpha-beta cost model that several algorithms share. The
// constants were fitted on the 4 nodes x 2 ranks test bed (docs/design.md).
#pragma once

#include <algorithm>

#include "algorithms/tuner.h"

namespace strata::algorithms {

inline double transferUs(double bytes, const LinkModel& l) { return bytes / (l.bandwidthGBps * 1e3); }

// The link a step of a ring or tree waits for: across nodes the network's
// latency, and the lower of the two rates (a fast network can outrun NVLink).
inline LinkModel slowestLink(const TuneRequest& r) {
  if (r.nodes <= 1) return r.intra;
  return LinkModel{r.net.latencyUs, std::min(r.net.bandwidthGBps, r.intra.bandwidthGBps)};
}

// A ring step across nodes both sends and receives through the kernel before the
// next can start: 1.5 network hops.
constexpr double kRingStepHops = 1.5;
// A tree hop across nodes: 1.25 network hops.
constexpr double kTreeStepHops = 1.25;
// Each further message a rank sends across nodes in one step costs its system
// calls: 4/3 of a network hop.
constexpr double kNetMessageHops = 4.0 / 3;

// Ranks per node, or the average when nodes differ.
inline double averageRanksPerNode(const TuneRequest& r) {
  return r.ranksPerNode ? r.ranksPerNode : static_cast<double>(r.nranks) / r.nodes;
}

}  // namespace strata::algorithms
