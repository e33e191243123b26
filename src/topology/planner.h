// Plans one node from its topology: which device each local rank drives, the
// ring order with the widest bottleneck, the channel count, each rank's rail
// (nearest NIC), and the link models the tuner prices algorithms with.
#pragma once

#include <string>
#include <vector>

#include "topology/system.h"

namespace strata::topology {

// Cost of moving one message between neighbours: a fixed latency and a rate.
// Plain data the tuner reads (topology includes nothing from above it).
struct LinkCost {
  double latencyUs = 1.0;
  double bandwidthGBps = 5.0;
};

struct PlanOptions {
  int ranksPerNode = 0;                // 0: one per GPU; without GPUs one per core, at most 8 (at least one per NUMA domain)
  PathType p2pLevel = PathType::kPxb;  // NCCL_P2P_LEVEL: the worst path GPUs still talk directly over
  bool p2pDisable = false;             // NCCL_P2P_DISABLE: every GPU pair goes through host memory
  std::vector<int> rankDevices;        // local rank -> System node, when the caller knows (else by order)
  bool threads = false;                // host ranks are threads of one process (copies cost less)
  bool oversubscribed = false;         // the machine runs more ranks than it has cores
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
  LinkCost intra, net;
  double launchUs = 0;
  bool oversubscribed = false;  // PlanOptions::oversubscribed: every hop may wait for the scheduler
  std::vector<std::string> notes;  // one line per decision, saying why
};

Hop hopBetween(const System& sys, int a, int b, const PlanOptions& opts);
// The class and rate of the path from a device to a network port (through its
// CPU when a GPU has no GPUDirect RDMA to it).
std::pair<PathType, double> railTo(const System& sys, int dev, int net);
// The network ports nearest to a device, equally near ones together.
std::vector<int> nearestNets(const System& sys, int dev);
Plan planNode(const System& sys, const PlanOptions& opts);

// Host copies through a staging slot: a write and a read per byte, measured on
// the test VMs (docs/design.md); ranks that are threads of one process copy faster.
constexpr double kHostCopyGBps = 5.0;
constexpr double kThreadCopyGBps = 6.0;
// A small message between two nodes over TCP (measured between
// two namespaces: 14.3 us one way, about twice that under load), and a hop inside a
// node when more ranks than cores run across nodes (it waits for the scheduler;
// fitted on the 4 x 2 test bed, docs/design.md).
constexpr double kSocketHopUs = 30.0;
constexpr double kCrowdedHopUs = 20.0;

}  // namespace strata::topology
