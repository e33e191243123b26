// The chaos matrix on one host: a rank is killed (SIGKILL) or frozen
// (SIGSTOP) during init, during each collective, inside a group, during split
// and during destroy; the bootstrap root's process is killed after and during
// init. Every surviving rank must return an error naming the failed rank (or the
// root) within its bound, and exit by itself. Each case prints its detection time
// ("[chaos] ..."), the figures of docs/reliability.md.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "harness/chaos.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace strata::test {
namespace {

constexpr int kRanks = 4;
constexpr int kVictim = 2;

// One operation of the matrix, on buffers big enough that it is always mid-transfer.
ncclResult_t runOp(Phase phase, ncclComm_t comm, std::vector<float>& a, std::vector<float>& b, int rank) {
  size_t n = a.size(), piece = n / kRanks;
  switch (phase) {
    case Phase::kAllReduce: return ncclAllReduce(a.data(), b.data(), n, ncclFloat, ncclSum, comm, nullptr);
    case Phase::kBroadcast: return ncclBroadcast(a.data(), b.data(), n, ncclFloat, 0, comm, nullptr);
    case Phase::kReduce: return ncclReduce(a.data(), b.data(), n, ncclFloat, ncclSum, 0, comm, nullptr);
    case Phase::kAllGather: return ncclAllGather(a.data(), b.data(), piece, ncclFloat, comm, nullptr);
    case Phase::kReduceScatter: return ncclReduceScatter(a.data(), b.data(), piece, ncclFloat, ncclSum, comm, nullptr);
    case Phase::kSendRecv: {  // a ring exchange, as pipeline parallelism does
      ncclGroupStart();
      ncclSend(a.data(), n, ncclFloat, (rank + 1) % kRanks, comm, nullptr);
      ncclRecv(b.data(), n, ncclFloat, (rank + kRanks - 1) % kRanks, comm, nullptr);
      return ncclGroupEnd();
    }
    case Phase::kGroup: {  // several collectives fused in one group
      ncclGroupStart();
      ncclAllReduce(a.data(), a.data(), piece, ncclFloat, ncclSum, comm, nullptr);
      ncclBroadcast(b.data(), b.data(), piece, ncclFloat, 1, comm, nullptr);
      ncclAllGather(a.data(), b.data(), piece, ncclFloat, comm, nullptr);
      return ncclGroupEnd();
    }
    case Phase::kSplit: {  // split off a child and use it, over and over
      ncclComm_t child = nullptr;
      ncclResult_t r = ncclCommSplit(comm, 0, rank, &child, nullptr);
      if (r != ncclSuccess) return r;
      r = ncclAllReduce(a.data(), b.data(), 1024, ncclFloat, ncclSum, child, nullptr);
      if (r != ncclSuccess) {
        ncclCommAbort(child);
        return r;
      }
      return ncclCommDestroy(child);
    }
    default: return ncclInvalidUsage;
  }
}

// A rank's body for the kill-or-stop cases.
RankOutcome rankBody(const ChaosCase& c, RankContext& ctx) {
  ncclComm_t comm;
  if (c.phase == Phase::kInit && ctx.rank == c.victim) ctx.mark('I');  // the parent kills it inside init
  ncclResult_t r = ncclCommInitRank(&comm, kRanks, ctx.id, ctx.rank);
  if (r != ncclSuccess) return RankOutcome::failed(r, ncclGetLastError(nullptr));
  std::vector<float> a(4 << 20, 1.0f), b(4 << 20, 0.0f);
  if (c.phase == Phase::kDestroy) {  // every rank destroys; the victim is killed inside its destroy
    r = ncclAllReduce(a.data(), b.data(), 1024, ncclFloat, ncclSum, comm, nullptr);
    if (r != ncclSuccess) return RankOutcome::failed(r, ncclGetLastError(comm));
    ctx.mark('R');
    r = ncclCommDestroy(comm);
    return r == ncclSuccess ? RankOutcome::success() : RankOutcome::failed(r, ncclGetLastError(nullptr));
  }
  Phase op = c.phase == Phase::kInit ? Phase::kAllReduce : c.phase;  // after a survived init
  ctx.mark('R');
  for (int i = 0; i < 1000000; ++i) {
    r = runOp(op, comm, a, b, ctx.rank);
    if (r != ncclSuccess) {
      std::string err = ncclGetLastError(comm);
      ncclCommAbort(comm);
      return RankOutcome::failed(r, err);
    }
  }
  return RankOutcome::success();
}

class ChaosKill : public ::testing::TestWithParam<ChaosCase> {};

TEST_P(ChaosKill, SurvivorsFailNamingTheRank) {
  const ChaosCase& c = GetParam();
  ChaosReport rep = runChaos(c, kRanks, [&c](RankContext& ctx) { return rankBody(c, ctx); });
  EXPECT_EQ(rep.problems, "");
  printChaosRow(c, rep);
}

std::vector<ChaosCase> killCases() {
  std::vector<ChaosCase> cases;
  for (int delayMs : {0, 5, 20})  // where in init the kill lands: the rendezvous, the links, the end
    cases.push_back({"init_" + std::to_string(delayMs) + "ms", Phase::kInit, SIGKILL, kVictim, delayMs, true});
  for (Phase p : {Phase::kAllReduce, Phase::kBroadcast, Phase::kReduce, Phase::kAllGather, Phase::kReduceScatter,
                  Phase::kSendRecv, Phase::kGroup, Phase::kSplit})
    cases.push_back({phaseName(p), p, SIGKILL, kVictim, 200, true});
  cases.push_back({"destroy", Phase::kDestroy, SIGKILL, kVictim, 0, false});
  cases.push_back({"stopped_all_reduce", Phase::kAllReduce, SIGSTOP, kVictim, 200, true});
  cases.push_back({"stopped_split", Phase::kSplit, SIGSTOP, kVictim, 200, true});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Matrix, ChaosKill, ::testing::ValuesIn(killCases()),
                         [](const auto& info) { return info.param.name; });

// The same between two fake nodes linked by an NCCL net plugin (the tests' TCP
// plugin, tests/net_plugin; NCCL_NET names it, so nothing falls back to the built-in
// TCP): the plugin's errors turn into the same named failures, within the same bounds.
std::vector<ChaosCase> netPluginCases() {
  auto enter = [](int rank) {
    setenv("NCCL_HOSTID", ("fake-node" + std::to_string(rank % 2)).c_str(), 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    setenv("NCCL_NET_PLUGIN", STRATA_TEST_PLUGIN_DIR "/libnccl-net-strata-test-v11.so", 1);
    setenv("NCCL_NET", "StrataTestTCP", 1);
    reloadEnvironment();
    return std::string();
  };
  std::vector<ChaosCase> cases;
  for (Phase p : {Phase::kAllReduce, Phase::kAllGather, Phase::kSendRecv})
    cases.push_back({std::string(phaseName(p)) + "_over_net_plugin", p, SIGKILL, kVictim, 200, true, {}, enter});
  cases.push_back({"stopped_all_reduce_over_net_plugin", Phase::kAllReduce, SIGSTOP, kVictim, 200, true, {}, enter});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(NetPlugin, ChaosKill, ::testing::ValuesIn(netPluginCases()),
                         [](const auto& info) { return info.param.name; });

// The same over Strata's IB transport on the user-space verbs device (tests/verbs_emu):
// a peer killed mid-transfer is a retry-exceeded completion or the closed setup
// stream, named, within the same bounds.
std::vector<ChaosCase> ibCases() {
  auto enter = [](int rank) {
    setenv("NCCL_HOSTID", ("fake-node" + std::to_string(rank % 2)).c_str(), 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    setenv("STRATA_IBVERBS_LIB", STRATA_TEST_PLUGIN_DIR "/libstrata-verbs-emu.so", 1);
    setenv("NCCL_NET", "IB", 1);
    reloadEnvironment();
    return std::string();
  };
  std::vector<ChaosCase> cases;
  for (Phase p : {Phase::kAllReduce, Phase::kAllGather, Phase::kSendRecv})
    cases.push_back({std::string(phaseName(p)) + "_over_ib", p, SIGKILL, kVictim, 200, true, {}, enter});
  cases.push_back({"stopped_all_reduce_over_ib", Phase::kAllReduce, SIGSTOP, kVictim, 200, true, {}, enter});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Ib, ChaosKill, ::testing::ValuesIn(ibCases()),
                         [](const auto& info) { return info.param.name; });

// The bootstrap root lives in the process that made the unique id. Killed after
// init, the job goes on: collectives and a split (which needs no root) work.
TEST(ChaosRoot, KilledAfterInitTheJobGoesOn) {
  ChaosCase c{"root_after_init", Phase::kInit, SIGKILL, kRootVictim, 0, false};
  ChaosReport rep = runChaos(c, kRanks, [](RankContext& ctx) {
    ncclComm_t comm, child;
    ncclResult_t r = ncclCommInitRank(&comm, kRanks, ctx.id, ctx.rank);
    if (r != ncclSuccess) return RankOutcome::failed(r, ncclGetLastError(nullptr));
    ctx.mark('R');
    ctx.waitGo();  // the root is dead now
    std::vector<int> buf(1 << 16, ctx.rank + 1);
    for (int i = 0; i < 20 && r == ncclSuccess; ++i)
      r = ncclAllReduce(buf.data(), buf.data(), 1, ncclInt32, ncclSum, comm, nullptr);
    if (r == ncclSuccess) r = ncclCommSplit(comm, ctx.rank % 2, ctx.rank, &child, nullptr);
    if (r != ncclSuccess) return RankOutcome::failed(r, ncclGetLastError(comm));
    std::vector<int> all(kRanks * 4, -1), mine(4, ctx.rank);
    r = ncclAllGather(mine.data(), all.data(), 4, ncclInt32, comm, nullptr);
    if (r != ncclSuccess) return RankOutcome::failed(r, ncclGetLastError(comm));
    ncclCommDestroy(child);
    ncclCommDestroy(comm);
    for (int k = 0; k < kRanks * 4; ++k)
      if (all[k] != k / 4) return RankOutcome::failed(ncclInternalError, "wrong all-gather result");
    return RankOutcome::success();
  });
  EXPECT_EQ(rep.problems, "");
  printChaosRow(c, rep);
}

// Killed while ranks wait for it in init: every rank fails, naming the root; the
// last rank arrives after the root is gone and fails at once.
TEST(ChaosRoot, KilledDuringInitEveryoneFailsNamingIt) {
  ChaosCase c{"root_during_init", Phase::kInit, SIGKILL, kRootVictim, 200, true};
  ChaosReport rep = runChaos(c, kRanks, [](RankContext& ctx) {
    if (ctx.rank == kRanks - 1) ctx.waitGo();  // arrives after the root was killed
    else ctx.mark('I');
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, kRanks, ctx.id, ctx.rank);
    if (r == ncclSuccess) {
      ncclCommDestroy(comm);
      return RankOutcome::success();
    }
    return RankOutcome::failed(r, ncclGetLastError(nullptr));
  });
  EXPECT_EQ(rep.problems, "");
  printChaosRow(c, rep);
}

}  // namespace
}  // namespace strata::test
