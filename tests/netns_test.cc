// Every collective with exact results across "nodes" that are network
// namespaces (scripts/netns-testbed.sh): each rank enters its node's namespace
// and takes the node's identity, so ranks on one node use shm and ranks on
// different nodes the socket transport. Shapes: nodes x ranks per node.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <tuple>

#include "collective_cases.h"
#include "harness/ranks.h"

namespace strata::test {
namespace {

std::string nodeNamespace(int node) { return "/var/run/netns/strata-node" + std::to_string(node); }

// Moves this (forked) rank into its node: namespace, host identity, interface.
std::string enterNode(int node) {
  int fd = open(nodeNamespace(node).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "cannot open " + nodeNamespace(node);
  int rc = setns(fd, CLONE_NEWNET);
  close(fd);
  if (rc != 0) return "setns into " + nodeNamespace(node) + " failed";
  setenv("NCCL_HOSTID", ("strata-node" + std::to_string(node)).c_str(), 1);
  setenv("NCCL_SOCKET_IFNAME", "eth0", 1);
  return "";
}

class Netns : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Netns, ExactResults) {
  auto [nodes, perNode] = GetParam();
  for (int k = 0; k < nodes; ++k)
    if (access(nodeNamespace(k).c_str(), F_OK) != 0)
      GTEST_SKIP() << "no test bed: " << nodeNamespace(k) << " is missing (scripts/netns-testbed.sh up " << nodes
                   << " creates it; ctest -L netns does so itself, as root)";
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
