#include "harness/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>

namespace strata::test {

std::string nodeNamespace(int node) { return "/var/run/netns/strata-node" + std::to_string(node); }

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

std::string missingBed(int nodes) {
  for (int k = 0; k < nodes; ++k)
    if (access(nodeNamespace(k).c_str(), F_OK) != 0)
      return "no test bed: " + nodeNamespace(k) + " is missing (scripts/netns-testbed.sh up " +
             std::to_string(nodes) + " creates it; ctest -L netns does so itself, as root)";
  return "";
}

int inNode(int node, const std::string& command) {
  std::string cmd = "ip netns exec strata-node" + std::to_string(node) + " sh -c '" + command + "'";
  return system(cmd.c_str());
}

}  // namespace strata::test
