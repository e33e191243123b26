#include "algorithms/device_p2p/p2p_windows.h"

#include <algorithm>
#include <map>
#include <utility>

namespace strata::algorithms::device_p2p {

using device::KernelP2p;

std::vector<KernelP2p> windowsOf(const KernelP2p& base, const std::vector<KernelP2p::Op>& ops, int room) {
  std::map<std::pair<int, bool>, int> seen;  // per lane: its transfers so far
  for (const KernelP2p::Op& o : ops) ++seen[{o.peer, o.send}];
  const int lanes = static_cast<int>(seen.size());
  if (lanes == 0) return {};
  const int per = std::max(1, KernelP2p::kMaxOps / lanes);
  int most = 0;
  for (auto& [lane, count] : seen) most = std::max(most, count);
  KernelP2p empty = base;
  empty.ops = empty.lanes = 0;
  std::vector<KernelP2p> windows((most + per - 1) / per, empty);
  for (auto& [lane, count] : seen) count = 0;
  for (const KernelP2p::Op& o : ops) {
    int index = seen[{o.peer, o.send}]++;
    windows[index / per].add(o.peer, o.send, o.buf, o.bytes);  // fits: at most `per` per lane
  }
  // Every block of a kernel must run at once (a lane's blocks wait for peers whose
  // lanes wait in turn): up to kParts blocks per lane, fewer where the GPUs hold
  // fewer (warm-up made sure of one per lane, on every rank alike).
  for (KernelP2p& k : windows) k.blocksPerLane = std::max(1, std::min(KernelP2p::kParts, room / std::max(1, k.lanes)));
  return windows;
}

}  // namespace strata::algorithms::device_p2p
