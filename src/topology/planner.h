// Plans one node from its topology: which device each local rank drives, the
// ring order with the widest bottleneck, the channel count, each rank's rail
// (nearest NIC), and the link models the tuner prices algorithms with.
#pragma once

#include <string>
#include <vector>

#include "algorithms/tuner.h"
#include "topology/system.h"

namespace strata::topology {

struct PlanOptions {
  int ranksPerNode = 0;                // 0: one per GPU; without GPUs one per core, at most 8 (at least one per NUMA domain)
  PathType p2pLevel = PathType::kPxb;  // NCCL_P2P_LEVEL: the worst path GPUs still talk directly over
  bool p2pDisable = false;             // NCCL_P2P_DISABLE: every GPU pair goes through host memory
  std::vector<int> rankDevices;        // local rank -> System node, when the caller knows (else by order)
};

// How data moves from one rank's device to another's.
struct Hop {
  PathType type = PathType::kDis;
  double bw = 0;
  bool staged = false;                     // through host memory (no P2P on this pair)
  std::vector<std::pair<int, int>> links;  // directed links it occupies
};

struct Plan {
  bool gpus = false;            // ranks drive GPUs (else host memory on CPUs)
  std::vector<int> devices;     // local rank -> System node
  std::vector<int> ring;        // local ranks in ring order
  double ringGBps = 0;          // what the ring moves per rank, links shared by several hops divided
  std::string ringBottleneck;   // the link that sets ringGBps
  PathType ringPath = PathType::kLoc;  // worst hop class on the ring
  bool staged = false;          // some ring hop goes through host memory
  double perChannelGBps = 0;    // what one channel (one CTA or thread) moves
  int channels = 1;
  std::vector<int> rails;       // local rank -> NET node, -1 when the node has no NIC
  std::vector<double> railGBps; // local rank -> its rail's rate (NIC and the path to it)
  double netGBps = 0;           // the node's network rate: distinct rails summed
  algorithms::LinkModel intra, net;
  double launchUs = 0;
  std::vector<std::string> notes;  // one line per decision, saying why
};

Hop hopBetween(const System& sys, int a, int b, const PlanOptions& opts);
// The class and rate of the path from a device to a network port (through its
// CPU when a GPU has no GPUDirect RDMA to it).
std::pair<PathType, double> railTo(const System& sys, int dev, int net);
// The network ports nearest to a device, equally near ones together.
std::vector<int> nearestNets(const System& sys, int dev);
Plan planNode(const System& sys, const PlanOptions& opts);

// The tuner's view of `nodes` nodes planned alike.
algorithms::TuneRequest tuneRequest(const Plan& plan, int nodes, algorithms::Collective coll, size_t bytes);

// Host copies through a staging slot: a write and a read per byte, measured on
// the test VMs (docs/design.md).
constexpr double kHostCopyGBps = 5.0;

}  // namespace strata::topology
