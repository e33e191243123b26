// OpOrder: which of a group's collectives wait for which, and when they are released.
#include "core/op_order.h"

#include <gtest/gtest.h>

namespace strata::core {
namespace {

constexpr int kRanks = 4;

OpDesc coll(Collective c, const void* send, void* recv, size_t count, int root = 0) {
  OpDesc op;
  op.coll = c;
  op.sendbuff = send;
  op.recvbuff = recv;
  op.count = count;
  op.type = ncclInt32;
  op.root = root;
  return op;
}

TEST(OpOrder, CollectivesThatOnlyShareWhatTheyReadRunAtOnce) {
  int a[64], b[64], c[64];
  OpOrder o;
  EXPECT_EQ(o.add(coll(Collective::kAllReduce, a, b, 64), 0, kRanks), 0);
  EXPECT_EQ(o.add(coll(Collective::kAllReduce, a, c, 64), 0, kRanks), 1);
  o.taskAdded(0);
  o.taskAdded(1);
  o.start();
  EXPECT_FALSE(o.ordered());
  EXPECT_TRUE(o.ready(0));
  EXPECT_TRUE(o.ready(1));
}

TEST(OpOrder, AReadAfterAWriteWaitsOnlyWhereThisRankReads) {
  int a[64], b[64];
  for (int rank : {0, 1}) {  // the broadcast's root (1) reads a; rank 0 only writes b
    OpOrder o;
    o.add(coll(Collective::kAllReduce, a, a, 64), rank, kRanks);
    o.add(coll(Collective::kBroadcast, a, b, 64, 1), rank, kRanks);
    o.taskAdded(0);
    o.taskAdded(1);
    o.start();
    EXPECT_EQ(o.ordered(), rank == 1) << "rank " << rank;
    EXPECT_EQ(o.ready(1), rank != 1) << "rank " << rank;
    o.taskDone(0);
    EXPECT_TRUE(o.ready(1));
  }
}

TEST(OpOrder, AWriteWaitsForEarlierReadsAndWritesOfItsMemory) {
  int a[64], b[256], c[64], d[64];
  OpOrder o;
  o.add(coll(Collective::kAllGather, a, b, 64), 0, kRanks);      // reads a, writes b (4 x 64 ints)
  o.add(coll(Collective::kAllReduce, c, a + 32, 16), 0, kRanks);  // writes into a: after a read
  o.add(coll(Collective::kReduceScatter, d, b + 255, 1), 0, kRanks);  // writes b's last int: after a write
  for (int op : {0, 1, 2}) o.taskAdded(op);
  o.start();
  EXPECT_TRUE(o.ordered());
  EXPECT_TRUE(o.ready(0));
  EXPECT_FALSE(o.ready(1));
  EXPECT_FALSE(o.ready(2));
  o.taskDone(0);
  EXPECT_TRUE(o.ready(1));
  EXPECT_TRUE(o.ready(2));
}

TEST(OpOrder, ACollectiveIsReleasedWhenEverythingUpToWhatItWaitsForIsDone) {
  int a[64], b[64], c[64], d[64];
  OpOrder o;
  o.add(coll(Collective::kAllReduce, a, b, 64), 0, kRanks);  // 0: two tasks
  o.add(coll(Collective::kAllReduce, c, d, 64), 0, kRanks);  // 1: unrelated
  o.add(coll(Collective::kAllReduce, d, d, 64), 0, kRanks);  // 2: after 1 (and so after 0)
  o.add(coll(Collective::kAllReduce, a, c, 0), 0, kRanks);   // 3: no tasks, no bytes
  o.taskAdded(0);
  o.taskAdded(0);
  o.taskAdded(1);
  o.taskAdded(2);
  o.start();
  EXPECT_TRUE(o.ready(1));
  EXPECT_TRUE(o.ready(3));
  o.taskDone(1);
  EXPECT_FALSE(o.ready(2)) << "collective 0 is not done yet";
  o.taskDone(0);
  EXPECT_FALSE(o.ready(2));
  o.taskDone(0);
  EXPECT_TRUE(o.ready(2));
}

TEST(OpOrder, SaysWhetherACollectiveReadsWhatAnEarlierOneWrites) {
  int a[64], b[64], c[64];
  OpOrder o;
  o.add(coll(Collective::kAllReduce, a, b, 64), 0, kRanks);   // writes b
  o.add(coll(Collective::kAllReduce, a, a, 64), 0, kRanks);   // writes what 0 reads: waits, reads nothing written
  o.add(coll(Collective::kAllReduce, b, c, 64), 0, kRanks);   // reads what 0 writes
  EXPECT_FALSE(o.readsEarlierWrites(0));
  EXPECT_FALSE(o.readsEarlierWrites(1));
  EXPECT_TRUE(o.readsEarlierWrites(2));
  EXPECT_FALSE(o.readsEarlierWrites(-1));
}

TEST(OpOrder, SendsAndReceivesAreNotOrdered) {
  int a[64];
  OpOrder o;
  o.add(coll(Collective::kAllReduce, a, a, 64), 0, kRanks);
  OpDesc recv = coll(Collective::kAllReduce, nullptr, a, 64, 1);
  recv.kind = OpKind::kRecv;
  EXPECT_EQ(o.add(recv, 0, kRanks), -1);
  o.taskAdded(0);
  o.start();
  EXPECT_FALSE(o.ordered());
  EXPECT_TRUE(o.ready(-1));
}

}  // namespace
}  // namespace strata::core
