#include "transports/net/rail.h"

#include <strings.h>

#include <fstream>
#include <vector>

#include "base/error.h"

namespace strata::transport::net {
namespace {

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && strcasecmp(s.c_str() + s.size() - tail.size(), tail.c_str()) == 0;
}

// The rail's NIC among the devices: by name ("mlx5_0"), else by PCI bus id (the
// last component of the device's PCI path); -1 when none is it.
int namedDevice(Network& net, const PeerInfo& self, std::string* why) {
  std::string name = self.railName, bus = self.railBusId;
  if (name.empty() && bus.empty()) return -1;
  int n = net.devices();
  // A two-port HCA is one name (and one PCI function) with a device per port.
  auto portMatches = [&](const DeviceProperties& p) { return self.railPort == 0 || p.port == self.railPort; };
  for (int d = 0; d < n; ++d) {
    DeviceProperties p = net.properties(d);
    if (!name.empty() && p.name == name && portMatches(p)) {
      *why = format("its rail %s, by name", name.c_str());
      return d;
    }
  }
  for (int d = 0; d < n; ++d) {
    DeviceProperties p = net.properties(d);
    std::string path = p.pciPath;
    if (!bus.empty() && !path.empty() && endsWith(path, bus) && portMatches(p)) {
      *why = format("its rail %s, by PCI bus id %s", name.c_str(), bus.c_str());
      return d;
    }
  }
  return -1;
}

}  // namespace

int deviceNumaNode(const std::string& pciPath) {
  if (pciPath.empty()) return -1;
  std::ifstream in(pciPath + "/numa_node");
  int numa = -1;
  return in >> numa ? numa : -1;
}

int railDevice(Network& net, const PeerInfo& self, std::string* why) {
  int n = net.devices();
  STRATA_REQUIRE(n > 0, ncclSystemError, "network %s has no devices", net.name().c_str());
  int d = namedDevice(net, self, why);
  if (d >= 0) return d;
  std::vector<int> local;
  for (int i = 0; i < n; ++i)
    if (deviceNumaNode(net.properties(i).pciPath) == self.numaNode) local.push_back(i);
  std::string missed = self.railName[0] ? format("its rail %s is not one of them; ", self.railName) : "";
  if (!local.empty()) {
    d = local[static_cast<size_t>(self.rank) % local.size()];
    *why = format("%sone of %zu on its NUMA node %d", missed.c_str(), local.size(), self.numaNode);
    return d;
  }
  d = self.rank % n;
  *why = format("%sone of %d, by rank (the network does not say which are near)", missed.c_str(), n);
  return d;
}

}  // namespace strata::transport::net
