#include "algorithms/rank_layout.h"

#include <algorithm>
#include <map>

#include "base/error.h"

namespace strata::algorithms {

int RankLayout::ranksPerNode() const {
  for (const std::vector<int>& n : nodes)
    if (n.size() != nodes[0].size()) return 0;
  return static_cast<int>(nodes[0].size());
}

RankLayout RankLayout::make(int rank, const std::vector<uint64_t>& nodeIds, const NodeRing& nodeRing) {
  RankLayout l;
  l.rank = rank;
  l.nranks = static_cast<int>(nodeIds.size());
  l.nodeOf.assign(l.nranks, -1);
  for (int r = 0; r < l.nranks; ++r) {
    if (l.nodeOf[r] >= 0) continue;
    l.nodes.emplace_back();
    for (int s = r; s < l.nranks; ++s)
      if (nodeIds[s] == nodeIds[r]) {
        l.nodeOf[s] = l.numNodes() - 1;
        l.nodes.back().push_back(s);
      }
  }
  l.ringPos.assign(l.nranks, 0);
  for (int k = 0; k < l.numNodes(); ++k) {
    std::vector<int> order = nodeRing ? nodeRing(k, l.nodes[k]) : l.nodes[k];
    std::vector<int> check = order;
    std::sort(check.begin(), check.end());
    STRATA_REQUIRE(check == l.nodes[k], ncclInternalError, "rank layout: node %d's ring is not a permutation of its ranks",
                   k);
    for (int r : order) {
      l.ringPos[r] = static_cast<int>(l.ringOrder.size());
      l.ringOrder.push_back(r);
    }
  }
  const std::vector<int>& mine = l.nodes[l.nodeOf[rank]];
  l.localRank = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  return l;
}

double nodeNetworkGBps(const std::vector<int>& ranks, const std::vector<double>& rateOf, const std::vector<int>& railOf) {
  std::map<int, double> rails;  // rail -> its slowest user's rate
  for (int r : ranks) {
    double v = rateOf[r];
    if (v <= 0) continue;
    auto [it, fresh] = rails.emplace(railOf[r], v);
    if (!fresh) it->second = std::min(it->second, v);
  }
  double sum = 0;
  for (const auto& [rail, rate] : rails) sum += rate;
  return sum;
}

}  // namespace strata::algorithms
