// Which of a network's devices a rank's connections use: the NIC its rail names
// (the nearest to its GPU or NUMA node in the topology: NCCL_TOPO_FILE or
// discovery), matched by name, else by the NIC's PCI bus id; else the devices on
// the rank's NUMA node (or all of them, where the network does not say where
// they are), one per rank in turn.
#pragma once

#include <string>

#include "base/peer_info.h"
#include "transports/net/network.h"

namespace strata::transport::net {

// The device index; *why says how it was chosen (for NCCL_DEBUG_SUBSYS=NET).
int railDevice(Network& net, const PeerInfo& self, std::string* why);

// The NUMA node of a device from its PCI path (<pciPath>/numa_node), -1 when unknown.
int deviceNumaNode(const std::string& pciPath);

}  // namespace strata::transport::net
