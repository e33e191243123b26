// Simulates every rank's ring schedule symbolically for 1..64 ranks and
// checks that sends meet receives and every output holds exactly the right
// contributions. Pure: no transport, no threads.
#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "algorithms/ring_schedule.h"

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
bool simulate(Collective coll, int n, int root, size_t length, size_t chunk, std::vector<RankState>* ranks) {
  bool segmented = coll == Collective::kAllGather || coll == Collective::kReduceScatter;
  size_t inLen = coll == Collective::kReduceScatter ? length * n : length;
  size_t outLen = coll == Collective::kAllGather ? length * n : length;
  ranks->assign(n, RankState{});
  for (int r = 0; r < n; ++r) {
    RankState& s = (*ranks)[r];
    s.in.assign(inLen, 0);
    for (size_t i = 0; i < inLen; ++i) s.in[i] = (coll == Collective::kBroadcast && r != root) ? 0 : bit(r);
    s.out.assign(outLen, 0);
    RingParams p{coll, n, r, root, 0, length, segmented ? length : 0, chunk};
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
          v = from.front().data;
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
        if (st.send) links[r].push_back(Message{v});
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

INSTANTIATE_TEST_SUITE_P(Ranks, RingScheduleTest, ::testing::Range(1, 65));
INSTANTIATE_TEST_SUITE_P(Large, RingScheduleTest, ::testing::Values(100, 128));

TEST(RingSchedule, StepCountIsTwoNMinusOnePerLoop) {
  RingSchedule s(RingParams{Collective::kAllReduce, 8, 3, 0, 0, 8 * 10, 0, 4});
  EXPECT_EQ(s.numSteps(), size_t{3} * 15);  // ceil(10 / 4) loops of 2n-1 steps
}

}  // namespace
}  // namespace strata::algorithms
