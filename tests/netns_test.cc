// Every collective with exact results across "nodes" that are network
// namespaces (scripts/netns-testbed.sh): each rank enters its node's namespace
// and takes the node's identity, so ranks on one node use shm and ranks on
// different nodes the socket transport. Shapes: nodes x ranks per node.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>

#include "collective_cases.h"
#include "harness/netns.h"
#include "harness/ranks.h"

namespace strata::test {
namespace {

class Netns : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Netns, ExactResults) {
  auto [nodes, perNode] = GetParam();
  if (std::string why = missingBed(nodes); !why.empty()) GTEST_SKIP() << why;
  int n = nodes * perNode;
  auto results = runRanks(
      Mode::kProcesses, n,
      runAllOnNewComm,
      600, [perNode](int rank) { return enterNode(rank / perNode); });
  EXPECT_EQ(failures(results), "");
}

INSTANTIATE_TEST_SUITE_P(TestBed, Netns,
                         ::testing::Values(std::make_tuple(2, 1), std::make_tuple(2, 2), std::make_tuple(4, 2),
                                           std::make_tuple(3, 3)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "x" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace strata::test
