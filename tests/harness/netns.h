// The network-namespace test bed (scripts/netns-testbed.sh) as the tests see it:
// node k is namespace strata-node<k> with eth0 at 192.0.2.(101+k).
#pragma once

#include <string>

namespace strata::test {

std::string nodeNamespace(int node);  // its path under /var/run/netns
// Moves this (forked) rank into its node: namespace, host identity, interface; "" or why not.
std::string enterNode(int node);
// "" when nodes 0..n-1 exist, else a reason to skip.
std::string missingBed(int nodes);
// Runs a shell command inside node k's namespace; its exit status.
int inNode(int node, const std::string& command);

}  // namespace strata::test
