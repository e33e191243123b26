// The rank layout: nodes from host identities, and a ring that enters and leaves
// every node once, for every rank count and node arrangement up to 130 ranks.
#include <gtest/gtest.h>

#include <algorithm>

#include "algorithms/rank_layout.h"
#include "base/error.h"

namespace strata::algorithms {
namespace {

TEST(RankLayout, NodesInOrderOfTheirLowestRank) {
  RankLayout l = RankLayout::make(4, {7, 3, 7, 3, 9});
  ASSERT_EQ(l.numNodes(), 3);
  EXPECT_EQ(l.nodes[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(l.nodes[1], (std::vector<int>{1, 3}));
  EXPECT_EQ(l.nodes[2], (std::vector<int>{4}));
  EXPECT_EQ(l.ringOrder, (std::vector<int>{0, 2, 1, 3, 4}));
  EXPECT_EQ(l.localRank, 0);
  EXPECT_EQ(l.ranksPerNode(), 0);  // uneven
  EXPECT_EQ(l.ringPrev(), 3);
  EXPECT_EQ(l.ringNext(), 0);
}

TEST(RankLayout, NodeRingsComeFromThePlan) {
  auto reversed = [](int, const std::vector<int>& ranks) { return std::vector<int>(ranks.rbegin(), ranks.rend()); };
  RankLayout l = RankLayout::make(1, {1, 1, 2, 2}, reversed);
  EXPECT_EQ(l.ringOrder, (std::vector<int>{1, 0, 3, 2}));
  EXPECT_EQ(l.ringPos[1], 0);
  EXPECT_EQ(l.ranksPerNode(), 2);
  auto broken = [](int, const std::vector<int>& ranks) { return std::vector<int>{ranks[0]}; };
  EXPECT_THROW(RankLayout::make(0, {1, 1}, broken), Error);
}

// For every rank count and several ways of spreading ranks over nodes: the ring
// is a permutation, visits each node's ranks contiguously, and every rank agrees.
TEST(RankLayout, RingEntersEveryNodeOnceForAllShapes) {
  for (int n = 1; n <= 130; ++n) {
    for (int nodes : {1, 2, 3, 7}) {
      std::vector<uint64_t> ids(n);
      for (int r = 0; r < n; ++r) ids[r] = (r * 2654435761u) % static_cast<unsigned>(nodes);  // scattered
      RankLayout first = RankLayout::make(0, ids);
      std::vector<int> sorted = first.ringOrder;
      std::sort(sorted.begin(), sorted.end());
      for (int r = 0; r < n; ++r) ASSERT_EQ(sorted[r], r) << n << " ranks";
      int changes = 0;
      for (int p = 0; p < n; ++p) changes += first.nodeOf[first.ringOrder[p]] != first.nodeOf[first.ringOrder[(p + 1) % n]];
      EXPECT_EQ(changes, first.numNodes() > 1 ? first.numNodes() : 0) << n << " ranks, " << nodes << " nodes";
      for (int r = 1; r < n; ++r) ASSERT_EQ(RankLayout::make(r, ids).ringOrder, first.ringOrder);
      for (int r = 0; r < n; ++r) ASSERT_EQ(first.ringOrder[first.ringPos[r]], r);
    }
  }
}

}  // namespace
}  // namespace strata::algorithms
