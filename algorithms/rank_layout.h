// Where the ranks of a communicator live: nodes, local ranks and the ring order
// that enters and leaves every node once. Pure arithmetic over plain data; the
// communicator builds it once, and every plan reads it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace strata::algorithms {

struct RankLayout {
  int rank = 0;
  int nranks = 1;
  std::vector<std::vector<int>> nodes;  // each node's ranks in rank order; nodes in order of their lowest rank
  std::vector<int> nodeOf;              // rank -> node
  std::vector<int> ringOrder;           // node 0's ranks in its ring order, then node 1's, ...
  std::vector<int> ringPos;             // rank -> position in ringOrder
  int localRank = 0;                    // this rank's index in its node

  int numNodes() const { return static_cast<int>(nodes.size()); }
  int node() const { return nodeOf[rank]; }
  const std::vector<int>& nodeRanks(int k) const { return nodes[k]; }
  // Ranks per node when every node has as many, else 0.
  int ranksPerNode() const;
  // This rank's neighbours on the global ring.
  int ringPrev() const { return ringOrder[(ringPos[rank] + nranks - 1) % nranks]; }
  int ringNext() const { return ringOrder[(ringPos[rank] + 1) % nranks]; }

  // `nodeIds[r]` names rank r's node (ranks with equal ids share one). `nodeRing`
  // gives node k's ranks in ring order (a permutation of `ranks`); by default, rank order.
  using NodeRing = std::function<std::vector<int>(int node, const std::vector<int>& ranks)>;
  static RankLayout make(int rank, const std::vector<uint64_t>& nodeIds, const NodeRing& nodeRing = {});
};

// A node's network rate: its ranks' distinct rails summed, each at its slowest
// user's rate (ranks sharing one interface, rail -1, count it once); 0 unknown.
double nodeNetworkGBps(const std::vector<int>& ranks, const std::vector<double>& rateOf, const std::vector<int>& railOf);

}  // namespace strata::algorithms
