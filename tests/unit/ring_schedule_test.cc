// Simulates every rank's ring schedule symbolically for 1..64 ranks and
// checks that sends meet receives and every output holds exactly the right
// contributions. Pure: no transport, no threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include "algorithms/ring/ring_schedule.h"

namespace strata::algorithms {
namespace {

// A value is the set of ranks whose input it sums, as a bit mask; adding a
// contribution twice would carry into another bit and be caught.
using Mask = unsigned __int128;
struct Message {
  std::vector<Mask> data;
};

struct RankState {
  std::vector<Mask> in, out;
  std::vector<RingStep> steps;
  size_t next = 0;
};

Mask bit(int r) { return static_cast<Mask>(1) << r; }

// Runs all ranks until none can move; returns false if some rank is stuck.
// `half` and `order` as in RingParams; `input(r, i)`, when given, replaces rank r's input values.
bool simulate(Collective coll, int n, int root, size_t length, size_t chunk, std::vector<RankState>* ranks,
              RingHalf half = RingHalf::kBoth, const int* order = nullptr,
              const std::function<Mask(int, size_t)>& input = {}) {
  bool segmented = coll == Collective::kAllGather || coll == Collective::kReduceScatter;
  size_t inLen = coll == Collective::kReduceScatter ? length * n : length;
  size_t outLen = coll == Collective::kAllGather ? length * n : length;
  ranks->assign(n, RankState{});
  for (int r = 0; r < n; ++r) {
    RankState& s = (*ranks)[r];
    s.in.assign(inLen, 0);
    for (size_t i = 0; i < inLen; ++i)
      s.in[i] = input ? input(r, i) : (coll == Collective::kBroadcast && r != root) ? 0 : bit(r);
    s.out.assign(outLen, 0);
    RingParams p{coll, n, r, root, 0, length, segmented ? length : 0, chunk, half, order};
    RingSchedule sched(p);
    for (size_t i = 0; i < sched.numSteps(); ++i) s.steps.push_back(sched.step(i));
  }
  std::vector<std::deque<Message>> links(n);  // links[r]: messages from r to r+1
  bool moved = true;
  while (moved) {
    moved = false;
    for (int r = 0; r < n; ++r) {
      RankState& s = (*ranks)[r];
      while (s.next < s.steps.size()) {
        const RingStep& st = s.steps[s.next];
        std::deque<Message>& from = links[(r + n - 1) % n];
        if (st.recv && from.empty()) break;
        std::vector<Mask> v(st.count);
        if (st.recv) {
          EXPECT_EQ(from.front().data.size(), st.count) << "rank " << r << " step " << s.next;
          v = std::move(from.front().data);
          v.resize(st.count);
          from.pop_front();
        }
        for (size_t i = 0; i < st.count; ++i) {
          Mask local = s.in[st.srcOffset + i];
          if (st.recv && st.reduceLocal) v[i] += local;
          if (!st.recv) v[i] = local;
        }
        if (st.writeOut)
          for (size_t i = 0; i < st.count; ++i) s.out[st.dstOffset + i] = v[i];
        if (st.send) links[r].push_back(Message{std::move(v)});
        ++s.next;
        moved = true;
      }
    }
  }
  for (int r = 0; r < n; ++r)
    if ((*ranks)[r].next != (*ranks)[r].steps.size() || !links[r].empty()) return false;
  return true;
}

Mask everyone(int n) { return n == 128 ? ~static_cast<Mask>(0) : bit(n) - 1; }

class RingScheduleTest : public ::testing::TestWithParam<int> {};

TEST_P(RingScheduleTest, AllCollectivesDeliverExactlyOnce) {
  int n = GetParam();
  for (size_t length : {size_t{0}, size_t{1}, static_cast<size_t>(n), static_cast<size_t>(3 * n + 1)}) {
    for (size_t chunk : {size_t{1}, size_t{2}, size_t{5}}) {
      std::vector<RankState> ranks;
      SCOPED_TRACE("n=" + std::to_string(n) + " length=" + std::to_string(length) + " chunk=" + std::to_string(chunk));
      ASSERT_TRUE(simulate(Collective::kAllReduce, n, 0, length, chunk, &ranks));
      for (auto& r : ranks)
        for (Mask m : r.out) ASSERT_TRUE(m == everyone(n));
      ASSERT_TRUE(simulate(Collective::kReduceScatter, n, 0, length, chunk, &ranks));
      for (auto& r : ranks)
        for (Mask m : r.out) ASSERT_TRUE(m == everyone(n));
      ASSERT_TRUE(simulate(Collective::kAllGather, n, 0, length, chunk, &ranks));
      for (auto& r : ranks)
        for (size_t i = 0; i < r.out.size(); ++i) ASSERT_TRUE(r.out[i] == bit(static_cast<int>(i / length)));
      for (int root : {0, n / 2, n - 1}) {
        ASSERT_TRUE(simulate(Collective::kBroadcast, n, root, length, chunk, &ranks));
        for (auto& r : ranks)
          for (Mask m : r.out) ASSERT_TRUE(m == bit(root));
        ASSERT_TRUE(simulate(Collective::kReduce, n, root, length, chunk, &ranks));
        for (Mask m : ranks[root].out) ASSERT_TRUE(m == everyone(n));
      }
    }
  }
}

// The hierarchical all-reduce runs the halves apart: after the reduce-scatter half
// each rank's owned segment is complete; the all-gather half spreads those segments.
TEST_P(RingScheduleTest, HalvesComposeToAllReduce) {
  int n = GetParam();
  for (size_t length : {size_t{0}, size_t{1}, static_cast<size_t>(n), static_cast<size_t>(3 * n + 1)}) {
    for (size_t chunk : {size_t{1}, size_t{3}}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " length=" + std::to_string(length) + " chunk=" + std::to_string(chunk));
      std::vector<RankState> ranks;
      ASSERT_TRUE(simulate(Collective::kAllReduce, n, 0, length, chunk, &ranks, RingHalf::kReduceScatter));
      std::vector<Segment> owned(n);
      for (int r = 0; r < n; ++r) {
        owned[r] = ownedSegment(RingParams{Collective::kAllReduce, n, r, 0, 0, length, 0, chunk});
        for (size_t i = owned[r].begin; i < owned[r].begin + owned[r].length; ++i)
          ASSERT_TRUE(ranks[r].out[i] == everyone(n)) << "rank " << r << " element " << i;
      }
      size_t covered = 0;
      for (const Segment& seg : owned) covered += seg.length;
      EXPECT_EQ(covered, length);  // the owned segments tile the region
      auto reduced = [&](int r, size_t i) {
        return i >= owned[r].begin && i < owned[r].begin + owned[r].length ? everyone(n) : Mask{0};
      };
      ASSERT_TRUE(simulate(Collective::kAllReduce, n, 0, length, chunk, &ranks, RingHalf::kAllGather, nullptr, reduced));
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < length; ++i) {
          bool own = i >= owned[r].begin && i < owned[r].begin + owned[r].length;  // already in place
          if (!own) {
            ASSERT_TRUE(ranks[r].out[i] == everyone(n)) << "rank " << r << " element " << i;
          }
        }
      }
    }
  }
}

// A ring that visits ranks out of rank order (node by node) still puts rank k's
// segment at k: positions are simulated, order[pos] is the rank there.
TEST_P(RingScheduleTest, SegmentsFollowTheRingOrder) {
  int n = GetParam();
  std::vector<int> order(n);
  for (int p = 0; p < n; ++p) order[p] = (p % 2) * ((n + 1) / 2) + p / 2;  // 0, h, 1, h+1, ...
  std::vector<int> posOf(n);
  for (int p = 0; p < n; ++p) posOf[order[p]] = p;
  std::vector<RankState> ranks;
  size_t length = 3;
  ASSERT_TRUE(simulate(Collective::kAllGather, n, 0, length, 2, &ranks, RingHalf::kBoth, order.data()));
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < ranks[p].out.size(); ++i)
      ASSERT_TRUE(ranks[p].out[i] == bit(posOf[i / length])) << "position " << p << " element " << i;
  // Reduce-scatter: position p's input segment k holds bit(p) in element k; the
  // result at position p must be segment order[p].
  auto tagged = [&](int p, size_t i) { return i / length == static_cast<size_t>(order[p]) ? bit(p) : Mask{0}; };
  ASSERT_TRUE(simulate(Collective::kReduceScatter, n, 0, length, 2, &ranks, RingHalf::kBoth, order.data(), tagged));
  for (int p = 0; p < n; ++p)
    for (Mask m : ranks[p].out) ASSERT_TRUE(m == bit(p)) << "position " << p;
}

INSTANTIATE_TEST_SUITE_P(Ranks, RingScheduleTest, ::testing::Range(1, 65));
INSTANTIATE_TEST_SUITE_P(Large, RingScheduleTest, ::testing::Values(100, 128));

TEST(RingSchedule, StepCountIsTwoNMinusOnePerLoop) {
  RingSchedule s(RingParams{Collective::kAllReduce, 8, 3, 0, 0, 8 * 10, 0, 4});
  EXPECT_EQ(s.numSteps(), size_t{3} * 15);  // ceil(10 / 4) loops of 2n-1 steps
}

}  // namespace
}  // namespace strata::algorithms
