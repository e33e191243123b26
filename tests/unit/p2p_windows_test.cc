// A group of sends and receives split into point-to-point kernels
// (algorithms/device_p2p/p2p_windows.h): each kernel within its limits, every
// lane's transfers in call order, and (in a model of ranks running their kernels
// in turn, each lane moving its transfers in order) every transfer completes, for
// random groups where ranks have very different counts. The same model shows that
// cutting by call order deadlocks.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <utility>
#include <vector>

#include "algorithms/device_p2p/p2p_windows.h"

namespace strata::algorithms::device_p2p {
namespace {

using device::KernelP2p;
using Op = KernelP2p::Op;
using Lane = std::pair<int, bool>;  // peer, send

// The transfers of kernel `k` on one lane: how many.
int onLane(const KernelP2p& k, Lane lane) {
  int c = 0;
  for (int i = 0; i < k.ops; ++i) c += k.op[i].peer == lane.first && k.op[i].send == lane.second;
  return c;
}

// Runs every rank's kernels in turn in the model; true when every transfer completed.
bool completes(const std::vector<std::vector<KernelP2p>>& kernels) {
  const int n = static_cast<int>(kernels.size());
  std::vector<size_t> at(n, 0);                // each rank's running kernel
  std::vector<std::map<Lane, int>> done(n);    // transfers completed per lane
  std::vector<std::map<Lane, int>> start(n);   // the running kernel's first index per lane
  auto ready = [&](int r, Lane lane, int i) {  // rank r's running kernel moves transfer i of `lane` now
    if (at[r] == kernels[r].size() || done[r][lane] != i) return false;
    return i < start[r][lane] + onLane(kernels[r][at[r]], lane);
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < n; ++r) {
      if (at[r] == kernels[r].size()) continue;
      const KernelP2p& k = kernels[r][at[r]];
      for (int l = 0; l < k.lanes; ++l) {
        int p = k.lanePeer[l];
        if (!k.laneSend[l]) continue;  // moved from the sending end
        int i = done[r][{p, true}];
        if (ready(r, {p, true}, i) && ready(p, {r, false}, i)) {
          ++done[r][{p, true}];
          ++done[p][{r, false}];
          moved = true;
        }
      }
    }
    for (int r = 0; r < n; ++r) {
      if (at[r] == kernels[r].size()) continue;
      const KernelP2p& k = kernels[r][at[r]];
      bool finished = true;
      for (int l = 0; l < k.lanes; ++l) {
        Lane lane{k.lanePeer[l], k.laneSend[l]};
        finished = finished && done[r][lane] == start[r][lane] + onLane(k, lane);
      }
      if (!finished) continue;
      for (int l = 0; l < k.lanes; ++l) start[r][{k.lanePeer[l], k.laneSend[l]}] += onLane(k, {k.lanePeer[l], k.laneSend[l]});
      ++at[r];
      moved = true;
    }
  }
  for (int r = 0; r < n; ++r)
    if (at[r] != kernels[r].size()) return false;
  return true;
}

KernelP2p baseFor(int rank, int n) {
  KernelP2p k;
  k.rank = rank;
  k.n = n;
  return k;
}

// Kernels of up to kMaxOps transfers in call order: what must not be done.
std::vector<KernelP2p> callOrderCuts(int rank, int n, const std::vector<Op>& ops) {
  std::vector<KernelP2p> out;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (i % KernelP2p::kMaxOps == 0) out.push_back(baseFor(rank, n));
    out.back().add(ops[i].peer, ops[i].send, ops[i].buf, ops[i].bytes);
  }
  return out;
}

// Rank 0 sends 32 messages to rank 1, then receives one; rank 1 sends first.
std::vector<std::vector<Op>> thirtyTwoThenOne() {
  std::vector<std::vector<Op>> g(2);
  for (int i = 0; i < 32; ++i) g[0].push_back({1, true, nullptr, 8});
  g[0].push_back({1, false, nullptr, 8});
  g[1].push_back({0, true, nullptr, 8});
  for (int i = 0; i < 32; ++i) g[1].push_back({0, false, nullptr, 8});
  return g;
}

TEST(P2pWindows, CutsByCallOrderDeadlockInTheModel) {
  auto g = thirtyTwoThenOne();
  EXPECT_FALSE(completes({callOrderCuts(0, 2, g[0]), callOrderCuts(1, 2, g[1])}));
}

TEST(P2pWindows, CutsByTransferIndexComplete) {
  auto g = thirtyTwoThenOne();
  auto a = windowsOf(baseFor(0, 2), g[0], 64), b = windowsOf(baseFor(1, 2), g[1], 64);
  ASSERT_EQ(a.size(), 2u);  // two lanes: 16 transfers of each per kernel
  EXPECT_EQ(a[0].ops, 17);
  EXPECT_EQ(a[1].ops, 16);
  EXPECT_TRUE(completes({a, b}));
}

TEST(P2pWindows, NoTransfersNoKernel) { EXPECT_TRUE(windowsOf(baseFor(0, 2), {}, 64).empty()); }

TEST(P2pWindows, BlocksPerLaneFitTheRoom) {
  std::vector<Op> ops{{1, true, nullptr, 8}, {1, false, nullptr, 8}, {2, true, nullptr, 8}};
  EXPECT_EQ(windowsOf(baseFor(0, 3), ops, 100)[0].blocksPerLane, KernelP2p::kParts);
  EXPECT_EQ(windowsOf(baseFor(0, 3), ops, 8)[0].blocksPerLane, 2);
  EXPECT_EQ(windowsOf(baseFor(0, 3), ops, 3)[0].blocksPerLane, 1);
}

// Random groups on 2-8 ranks: 0-40 transfers per ordered pair, each rank's calls
// in a random order; tagged buffers show each lane's order kept.
TEST(P2pWindows, RandomGroupsStayWithinAKernelKeepLaneOrderAndComplete) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 7);
    std::vector<std::vector<Op>> g(n);
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) {
        int count = a == b || rng() % 3 == 0 ? 0 : static_cast<int>(rng() % 41);
        for (int i = 0; i < count; ++i) {
          g[a].push_back({b, true, reinterpret_cast<char*>(static_cast<uintptr_t>(i + 1)), 8});
          g[b].push_back({a, false, reinterpret_cast<char*>(static_cast<uintptr_t>(i + 1)), 8});
        }
      }
    std::vector<std::vector<KernelP2p>> kernels(n);
    for (int r = 0; r < n; ++r) {
      // Shuffle the calls, then renumber each lane's tags in the new call order.
      std::shuffle(g[r].begin(), g[r].end(), rng);
      std::map<Lane, int> seen;
      for (Op& o : g[r]) o.buf = reinterpret_cast<char*>(static_cast<uintptr_t>(++seen[{o.peer, o.send}]));
      kernels[r] = windowsOf(baseFor(r, n), g[r], 64);
      std::map<Lane, int> next;
      for (const KernelP2p& k : kernels[r]) {
        ASSERT_LE(k.ops, KernelP2p::kMaxOps);
        ASSERT_GE(k.ops, 1);
        for (int i = 0; i < k.ops; ++i)
          ASSERT_EQ(reinterpret_cast<uintptr_t>(k.op[i].buf), static_cast<uintptr_t>(++next[{k.op[i].peer, k.op[i].send}]))
              << "trial " << trial << " rank " << r;
      }
      ASSERT_EQ(next, seen) << "trial " << trial << " rank " << r;
    }
    ASSERT_TRUE(completes(kernels)) << "trial " << trial << ", " << n << " ranks";
  }
}

}  // namespace
}  // namespace strata::algorithms::device_p2p
