// Every collective on host memory with exact expected values (collective_cases.cc):
// ranks as threads and as processes, 1..8 ranks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>

#include "collective_cases.h"
#include "harness/ranks.h"

namespace strata::test {
namespace {

class Collectives : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(Collectives, ExactResults) {
  auto [mode, n] = GetParam();
  auto results = runRanks(mode, n, runAllOnNewComm, 600);
  EXPECT_EQ(failures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Host, Collectives,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(1, 2, 3, 4, 7, 8)),
                         [](const auto& info) {
                           return std::string(modeName(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// Processes that claim different hosts (NCCL_HOSTID): rank k on node k % nodes, so
// the node-ordered ring differs from rank order; ranks of one node talk over
// shared memory, nodes over TCP on loopback. Without root: the netns test bed's little sibling.
class FakeNodes : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(FakeNodes, ExactResults) {
  auto [nodes, perNode] = GetParam();
  auto results = runRanks(
      Mode::kProcesses, nodes * perNode,
      runAllOnNewComm,
      600,
      [nodes = nodes](int rank) {
        setenv("NCCL_HOSTID", ("fake-node" + std::to_string(rank % nodes)).c_str(), 1);
        setenv("NCCL_SOCKET_IFNAME", "lo", 1);
        return std::string();
      });
  EXPECT_EQ(failures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Loopback, FakeNodes,
                         ::testing::Values(std::make_tuple(2, 2), std::make_tuple(3, 2), std::make_tuple(2, 3)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "x" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace strata::test
