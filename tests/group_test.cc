// A group's collectives: several communicators driven by one thread, and the order
// in which collectives that share memory run (NCCL runs a group's operations in call
// order on one stream; Strata runs them side by side where they share no memory).
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "harness/ranks.h"
#include "verify/reference.h"

namespace strata::test {
namespace {

class GroupOrder : public ::testing::TestWithParam<Mode> {};

// Collectives of one group that use each other's memory see each other's results, in
// call order, whichever algorithms (and so lanes) each runs on: the ring's all-reduce,
// DirectRead's broadcast and all-gather, the pairwise all-to-all. N ints per rank.
std::string callOrderRank(size_t N, int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
  std::vector<int> a(N), b(N, -1), c(N, -1), d(N, -1);
  std::iota(a.begin(), a.end(), rank);
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclAllReduce(a.data(), a.data(), N, ncclInt32, ncclSum, comm, nullptr));  // a = 4i + 6
  RANK_NCCL(ncclBroadcast(a.data(), b.data(), N, ncclInt32, 1, comm, nullptr));         // reads a
  RANK_NCCL(ncclAllGather(b.data(), c.data(), N / n, ncclInt32, comm, nullptr));        // reads b
  RANK_NCCL(ncclAllReduce(a.data(), a.data(), N, ncclInt32, ncclSum, comm, nullptr));   // rewrites a
  RANK_NCCL(ncclAlltoAll(c.data(), d.data(), N / n, ncclInt32, comm, nullptr));         // reads c
  RANK_NCCL(ncclGroupEnd());
  ncclCommDestroy(comm);
  for (size_t i = 0; i < N; ++i) {
    int first = 4 * static_cast<int>(i) + 6, piece = 4 * static_cast<int>(i % (N / n)) + 6;
    if (a[i] != 4 * first) return "second all-reduce: a[" + std::to_string(i) + "] = " + std::to_string(a[i]);
    if (b[i] != first) return "broadcast of the all-reduce: b[" + std::to_string(i) + "] = " + std::to_string(b[i]);
    if (c[i] != piece) return "all-gather of the broadcast: c[" + std::to_string(i) + "] = " + std::to_string(c[i]);
    if (d[i] != piece) return "all-to-all of the all-gather: d[" + std::to_string(i) + "] = " + std::to_string(d[i]);
  }
  return "";
}

// 4 MiB of ints: one-sided transfers, even where the 4 ranks outnumber the cores
// (pieces of NCCL_BUFFSIZE, 1 MiB, and more move one-sided there).
TEST_P(GroupOrder, CollectivesThatShareMemoryRunInCallOrder) {
  auto results = runRanks(GetParam(), 4, [](int rank, int n, const ncclUniqueId& id) {
    return callOrderRank(size_t{1} << 20, rank, n, id);
  });
  EXPECT_EQ(failures(results), "");
}

// 32 KiB: DirectRead's all-gather (from STRATA_PUT_BYTES, 16 KiB) with 8 KiB pieces,
// whose own piece is copied as the group is planned, and the all-to-all's likewise:
// they were copied before the collectives they read had run.
TEST_P(GroupOrder, SmallCollectivesThatShareMemoryRunInCallOrder) {
  auto results = runRanks(GetParam(), 4, [](int rank, int n, const ncclUniqueId& id) {
    return callOrderRank(size_t{1} << 13, rank, n, id);
  });
  EXPECT_EQ(failures(results), "");
}

// An in-place all-to-all whose input an earlier collective of the group writes is
// refused, naming the call, rather than run on the input as it was before the group
// (Strata copies it when it plans). Without a writer before it, it runs.
TEST(GroupOrder, AnInPlaceAllToAllAfterAWriterOfItsBufferIsRefused) {
  constexpr int n = 4;
  constexpr size_t N = 1 << 12;
  ncclComm_t comms[n];
  ASSERT_EQ(ncclCommInitAll(comms, n, nullptr), ncclSuccess);
  std::vector<std::vector<int>> x(n, std::vector<int>(N));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(ncclAllReduce(x[r].data(), x[r].data(), N, ncclInt32, ncclSum, comms[r], nullptr), ncclSuccess);
    ASSERT_EQ(ncclAlltoAll(x[r].data(), x[r].data(), N / n, ncclInt32, comms[r], nullptr), ncclSuccess);
  }
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("in-place all-to-all in the same group"), std::string::npos)
      << ncclGetLastError(comms[0]);
  for (int r = 0; r < n; ++r) ncclCommDestroy(comms[r]);

  ASSERT_EQ(ncclCommInitAll(comms, n, nullptr), ncclSuccess);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < N; ++i) x[r][i] = static_cast<int>(r * N + i);
  std::vector<std::vector<int>> sum(n, std::vector<int>(N));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {  // reads x, writes elsewhere: the all-to-all may follow
    ASSERT_EQ(ncclAllReduce(x[r].data(), sum[r].data(), N, ncclInt32, ncclSum, comms[r], nullptr), ncclSuccess);
    ASSERT_EQ(ncclAlltoAll(x[r].data(), x[r].data(), N / n, ncclInt32, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(x[r][2 * (N / n) + 5], static_cast<int>(2 * N + r * (N / n) + 5)) << "rank " << r;
    EXPECT_EQ(sum[r][7], static_cast<int>(4 * 7 + N * 6)) << "rank " << r;
  }
  for (int r = 0; r < n; ++r) ncclCommDestroy(comms[r]);
}

INSTANTIATE_TEST_SUITE_P(Host, GroupOrder, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return std::string(modeName(info.param)); });


// The ncclCommInitAll pattern: one thread, several communicators, one group.
TEST(Group, OneThreadDrivesSeveralCommunicators) {
  constexpr int n = 4;
  ncclComm_t comms[n];
  ASSERT_EQ(ncclCommInitAll(comms, n, nullptr), ncclSuccess);
  constexpr size_t count = 100000;
  std::vector<std::vector<int>> in(n, std::vector<int>(count)), out(n, std::vector<int>(count * n));
  for (int r = 0; r < n; ++r)
    verify::fillBuffer(ncclInt32, in[r].data(), count, [&](size_t i) { return verify::inputValue(n, r, i, ncclInt32, verify::TestOp::kSum); });
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(ncclAllReduce(in[r].data(), in[r].data(), in[r].size(), ncclInt32, ncclSum, comms[r], nullptr),
              ncclSuccess);
    ASSERT_EQ(ncclAllGather(in[r].data(), out[r].data(), in[r].size(), ncclInt32, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::vector<int> sum(count), gathered(count * n);  // every rank gathers the sums (the all-gather follows the all-reduce)
  verify::fillBuffer(ncclInt32, sum.data(), count, [&](size_t i) { return verify::reducedValue(n, i, ncclInt32, verify::TestOp::kSum); });
  for (int q = 0; q < n; ++q) std::copy(sum.begin(), sum.end(), gathered.begin() + q * count);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(verify::compareBuffers(ncclInt32, in[r].data(), sum.data(), count, "all-reduce"), "") << "rank " << r;
    EXPECT_EQ(verify::compareBuffers(ncclInt32, out[r].data(), gathered.data(), count * n, "all-gather"), "") << "rank " << r;
  }
  // Communicators initialised one by one inside a group from a single thread, as nccl-tests does.
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t more[n];
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) ASSERT_EQ(ncclCommInitRank(&more[r], n, id, r), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  int vals[n] = {1, 2, 3, 4};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) ASSERT_EQ(ncclAllReduce(&vals[r], &vals[r], 1, ncclInt32, ncclMax, more[r], nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; ++r) EXPECT_EQ(vals[r], 4);
  for (int r = 0; r < n; ++r) {
    ncclCommDestroy(comms[r]);
    ncclCommAbort(more[r]);
  }
}

}  // namespace
}  // namespace strata::test
