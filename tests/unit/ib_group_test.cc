// Grouped receives over the IB network on the user-space verbs device: one irecv
// of several buffers is one FIFO write; each isend lands in the receive its tag
// names (equal tags in order); the group completes only once every receive has
// its data, and reports each one's size; misuse fails with named errors.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "transports/ib/ib_network.h"
#include "transports/net/nccl_net.h"
#include "ib_emu.h"
#include "network_link.h"

namespace strata::transport::ib {
namespace {

using net::RecvBuffer;

// Sends each (tag, size) in order from its own region of `src`, into a receive
// group posted for `tags` with room `room` each; checks every byte and size.
struct Group {
  net::Link& l;
  std::vector<char> src, dst;
  void *smh, *rmh;
  static constexpr size_t kRoom = 200003;
  explicit Group(net::Link& link, int n) : l(link), src(n * kRoom), dst(n * kRoom) {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 131 + 17);
    smh = l.net->regMr(l.send, src.data(), src.size(), net::abi::kPtrHost);
    rmh = l.net->regMr(l.recv, dst.data(), dst.size(), net::abi::kPtrHost);
  }
  ~Group() {
    l.net->deregMr(l.send, smh);
    l.net->deregMr(l.recv, rmh);
  }
  void* post(const std::vector<int>& tags) {
    std::vector<RecvBuffer> b;
    for (size_t i = 0; i < tags.size(); ++i) b.push_back({dst.data() + i * kRoom, kRoom, tags[i], rmh});
    return l.net->irecv(l.recv, static_cast<int>(b.size()), b.data());
  }
};

TEST(IbNetwork, GroupedReceiveTakesEachSendByTagAndCompletesOnlyWhenAllArrived) {
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  EXPECT_EQ(l.net->properties(0).maxRecvs, net::kMaxRecvs);
  Group g(l, 3);
  memset(g.dst.data(), 0, g.dst.size());
  Counters before = counters();
  void* r = g.post({7, 8, 9});
  ASSERT_NE(r, nullptr);
  // Sent in another order than posted: tag 9 (receive 2) first; receive 1 gets nothing.
  struct Send {
    int tag;
    size_t bytes;
  } sends[] = {{9, 5000}, {8, 0}, {7, Group::kRoom}};
  uint64_t writes = 0;
  for (int k = 0; k < 3; ++k) {
    int at = sends[k].tag - 7;
    void* s = l.post(g.src.data() + at * Group::kRoom, sends[k].bytes, sends[k].tag, g.smh);
    ASSERT_NE(s, nullptr) << "send " << k;
    ASSERT_TRUE(l.wait(s, nullptr));  // written and acknowledged
    if (sends[k].bytes) writes += writesFor(sends[k].bytes);
    if (k < 2) {
      EXPECT_FALSE(l.net->test(r, nullptr)) << "the group completed before its last receive's data";
    }
  }
  size_t got[3] = {99, 99, 99};
  ASSERT_TRUE(l.wait(r, got));
  EXPECT_EQ(got[0], Group::kRoom);
  EXPECT_EQ(got[1], 0u);
  EXPECT_EQ(got[2], 5000u);
  EXPECT_EQ(memcmp(g.dst.data(), g.src.data(), Group::kRoom), 0);
  EXPECT_EQ(g.dst[Group::kRoom], 0) << "an empty send wrote into its receive";
  EXPECT_EQ(memcmp(g.dst.data() + 2 * Group::kRoom, g.src.data() + 2 * Group::kRoom, 5000), 0);
  Counters after = counters();
  EXPECT_EQ(after.fifoWrites - before.fifoWrites, 1u);  // the whole group in one FIFO write
  EXPECT_EQ(after.messagesReceived - before.messagesReceived, 3u);
  EXPECT_EQ(after.dataWrites - before.dataWrites, writes + 1);  // and one write back with the sizes
}

// Equal tags go in order; groups of every size and single receives alternate for
// more rounds than the FIFO has slots, so each slot is reused.
TEST(IbNetwork, GroupsOfEverySizeReuseTheFifoSlotsInOrder) {
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  Group g(l, net::kMaxRecvs);
  for (int round = 0; round < 80; ++round) {
    int n = 1 + round % net::kMaxRecvs;
    memset(g.dst.data(), 0, g.dst.size());
    void* r = g.post(std::vector<int>(n, 0));
    ASSERT_NE(r, nullptr) << "round " << round;
    for (int k = 0; k < n; ++k) {
      size_t bytes = (round * 977 + k * 4099) % Group::kRoom;
      void* s = l.post(g.src.data() + k * Group::kRoom, bytes, 0, g.smh);
      ASSERT_NE(s, nullptr) << "round " << round << " send " << k;
      ASSERT_TRUE(l.wait(s, nullptr));
    }
    size_t got[net::kMaxRecvs];
    ASSERT_TRUE(l.wait(r, got)) << "round " << round;
    for (int k = 0; k < n; ++k) {
      size_t bytes = (round * 977 + k * 4099) % Group::kRoom;
      ASSERT_EQ(got[k], bytes) << "round " << round << " receive " << k;
      ASSERT_EQ(memcmp(g.dst.data() + k * Group::kRoom, g.src.data() + k * Group::kRoom, bytes), 0)
          << "round " << round << " receive " << k;
    }
  }
}

TEST(IbNetwork, GroupedReceivesSplitOverQueuePairs) {
  SplitLink l(3);
  ASSERT_TRUE(l.send && l.recv);
  Group g(l, 4);
  for (int round = 0; round < 5; ++round) {
    memset(g.dst.data(), 0, g.dst.size());
    void* r = g.post({1, 2, 1, 2});
    ASSERT_NE(r, nullptr);
    size_t sizes[4] = {Group::kRoom, 1, 0, size_t(round) * 1001 + 513};
    int tags[4] = {2, 1, 1, 2};  // receives 1, 0, 2, 3
    int into[4] = {1, 0, 2, 3};
    for (int k = 0; k < 4; ++k) {
      void* s = l.post(g.src.data() + into[k] * Group::kRoom, sizes[k], tags[k], g.smh);
      ASSERT_NE(s, nullptr);
      ASSERT_TRUE(l.wait(s, nullptr));
    }
    size_t got[4];
    ASSERT_TRUE(l.wait(r, got));
    for (int k = 0; k < 4; ++k) {
      ASSERT_EQ(got[into[k]], sizes[k]) << "round " << round;
      ASSERT_EQ(memcmp(g.dst.data() + into[k] * Group::kRoom, g.src.data() + into[k] * Group::kRoom, sizes[k]), 0);
    }
  }
}

TEST(IbNetwork, GroupMisuseIsNamed) {
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  Group g(l, 2);
  std::vector<RecvBuffer> tooMany(net::kMaxRecvs + 1, RecvBuffer{g.dst.data(), 16, 0, g.rmh});
  try {
    l.net->irecv(l.recv, static_cast<int>(tooMany.size()), tooMany.data());
    FAIL() << "a group of " << tooMany.size() << " was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grouped receive of 9"), std::string::npos) << e.what();
  }
  ASSERT_NE(g.post({4, 5}), nullptr);
  ASSERT_NE(l.post(g.src.data(), 10, 4, g.smh), nullptr);
  try {
    l.post(g.src.data(), 10, 4, g.smh);  // receive 0's tag again: only 5 is left
    FAIL() << "a second send with tag 4 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tag 4 matches none of the 2 receives"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::transport::ib
