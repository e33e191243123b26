// The chaos matrix's network cases, on the namespace test bed (label netns):
// two nodes of two ranks, all-reducing across the nodes when node 1's link goes
// down, or starts dropping every packet (no ACK, no RST). Nothing tells the
// ranks; the timeout must, every rank must name a rank across the broken link,
// and once the link is back a new communicator over both nodes must work.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/chaos.h"
#include "harness/netns.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace strata::test {
namespace {

constexpr int kNodes = 2, kPerNode = 2, kRanks = kNodes * kPerNode;

RankOutcome allReduceUntilFailure(RankContext& ctx) {
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRank(&comm, kRanks, ctx.id, ctx.rank);
  if (r != ncclSuccess) return RankOutcome::failed(r, ncclGetLastError(nullptr));
  std::vector<float> buf(4 << 20, 1.0f);
  ctx.mark('R');
  for (int i = 0; i < 1000000; ++i) {
    r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
    if (r != ncclSuccess) {
      std::string err = ncclGetLastError(comm);
      ncclCommAbort(comm);
      return RankOutcome::failed(r, err);
    }
  }
  return RankOutcome::success();
}

// After the link is back: a fresh communicator over both nodes, exact results.
std::string freshJobWorks() {
  auto results = runRanks(
      Mode::kProcesses, kRanks,
      [](int rank, int nranks, const ncclUniqueId& id) -> std::string {
        ncclComm_t comm;
        RANK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
        std::vector<int> buf(1 << 20, rank + 1);
        RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclInt32, ncclSum, comm, nullptr));
        ncclCommDestroy(comm);
        for (int v : buf)
          if (v != nranks * (nranks + 1) / 2) return "wrong sum " + std::to_string(v);
        return "";
      },
      60, [](int rank) { return enterNode(rank / kPerNode); });
  return failures(results);
}

ChaosCase networkCase(const std::string& name, std::function<void()> strike) {
  ChaosCase c{name, Phase::kAllReduce, 0, kNoVictim, 300, true};
  c.strike = std::move(strike);
  c.enter = [](int rank) { return enterNode(rank / kPerNode); };
  c.culprit = [](int rank) { return rank < kPerNode ? "rank 2|rank 3" : "rank 0|rank 1"; };  // across the link
  return c;
}

TEST(ChaosNetwork, LinkDownMidTransferAndBack) {
  if (std::string why = missingBed(kNodes); !why.empty()) GTEST_SKIP() << why;
  ChaosCase c = networkCase("link_down", [] { inNode(1, "ip link set eth0 down"); });
  ChaosReport rep = runChaos(c, kRanks, allReduceUntilFailure);
  ASSERT_EQ(inNode(1, "ip link set eth0 up"), 0);
  EXPECT_EQ(rep.problems, "");
  printChaosRow(c, rep);
  EXPECT_EQ(freshJobWorks(), "") << "after the link came back";
}

TEST(ChaosNetwork, DropEveryPacketAndLift) {
  if (std::string why = missingBed(kNodes); !why.empty()) GTEST_SKIP() << why;
  if (system("command -v nft >/dev/null") != 0) GTEST_SKIP() << "nft not found (apt-get install nftables)";
  ChaosCase c = networkCase("drop_all_packets", [] {
    inNode(1, "nft add table inet chaos && "
              "nft add chain inet chaos in \"{ type filter hook input priority 0; policy drop; }\" && "
              "nft add chain inet chaos out \"{ type filter hook output priority 0; policy drop; }\" && "
              "nft add rule inet chaos in iif lo accept && nft add rule inet chaos out oif lo accept");
  });
  ChaosReport rep = runChaos(c, kRanks, allReduceUntilFailure);
  ASSERT_EQ(inNode(1, "nft delete table inet chaos"), 0);
  EXPECT_EQ(rep.problems, "");
  printChaosRow(c, rep);
  EXPECT_EQ(freshJobWorks(), "") << "after the drop rule was lifted";
}

// A rank of node 1 killed or stopped mid-transfer: its node's peers see it by pid,
// node 0 by the end of its TCP streams (killed) or by the timeout (stopped).
class ChaosAcrossNodes : public ::testing::TestWithParam<int> {};

TEST_P(ChaosAcrossNodes, SurvivorsNameTheRank) {
  if (std::string why = missingBed(kNodes); !why.empty()) GTEST_SKIP() << why;
  int sig = GetParam();
  ChaosCase c{sig == SIGKILL ? "killed_across_nodes" : "stopped_across_nodes", Phase::kAllReduce, sig, 3, 300, true};
  c.enter = [](int rank) { return enterNode(rank / kPerNode); };
  ChaosReport rep = runChaos(c, kRanks, allReduceUntilFailure);
  EXPECT_EQ(rep.problems, "");
  printChaosRow(c, rep);
}

INSTANTIATE_TEST_SUITE_P(Signals, ChaosAcrossNodes, ::testing::Values(SIGKILL, SIGSTOP),
                         [](const auto& info) { return info.param == SIGKILL ? "kill" : "stop"; });

}  // namespace
}  // namespace strata::test
