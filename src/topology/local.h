// The node's topology as a communicator uses it: NCCL_TOPO_FILE when set, else
// this machine discovered; loaded once per process and file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "topology/system.h"

namespace strata::topology {

struct LocalTopology {
  System sys;
  std::string source;  // the file, or "discovered (hwloc, NVML)"
  bool fromFile = false;
  std::vector<std::string> warnings;  // what discovery could not see
};

// Throws Error(ncclInvalidUsage) for a file that cannot be read or parsed.
std::shared_ptr<const LocalTopology> localTopology(const std::string& file);

// The NUMA domain the calling thread runs on (0 when the kernel does not say).
int currentNumaNode();

// The device each local rank drives, for planNode: its GPU where the topology has
// every rank's GPU (by PCI bus id), else the CPU of its NUMA domain.
std::vector<int> rankDevices(const System& sys, const std::vector<std::string>& busIds, const std::vector<int>& numas);

// How the NIC port `net` is known to a network: its name and its NIC's PCI bus id.
struct RailId {
  std::string name, busId;
  int port = 0;  // 0: any port
};
RailId railIdentity(const System& sys, int net);

// The CPU node for a NUMA id, or the first CPU when the topology has no such id
// (a topology file from another machine).
int cpuForNuma(const System& sys, int numa);

}  // namespace strata::topology
