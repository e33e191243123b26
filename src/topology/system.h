// The machine as a graph: CPUs (NUMA domains), PCI switches, GPUs, NVSwitches,
// NICs and their network ports, joined by typed links with a bandwidth each way,
// and the best path between every pair of nodes with NCCL's path classes.
// Bandwidths come from what is counted (NVLinks x per-link rate of the GPU
// generation, PCIe lanes x per-lane rate), never from a product name.
#pragma once

#include <string>
#include <vector>

#include "topology/xml.h"

namespace strata::topology {

enum class NodeType { kGpu, kPci, kNvs, kCpu, kNic, kNet };
const char* nodeTypeName(NodeType t);

// Numbered as NCCL numbers them, so link and path classes compare directly.
enum class LinkType { kLoc = 0, kNvl = 1, kC2c = 3, kPci = 4, kSys = 9, kNet = 10 };
enum class PathType { kLoc = 0, kNvl, kNvb, kC2c, kPix, kPxb, kP2c, kPxn, kPhb, kSys, kNet, kDis };
const char* pathTypeName(PathType t);
const char* linkTypeName(LinkType t);
// NCCL_P2P_LEVEL's values: LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS NET, or the old numbers 0-5.
bool parsePathType(const std::string& text, PathType* out);

struct Link {
  int to = -1;
  LinkType type = LinkType::kLoc;
  double bw = 0;  // GB/s in this direction
  int count = 1;  // NVLinks aggregated into this link, or PCIe lanes
};

struct Node {
  NodeType type = NodeType::kPci;
  std::string id;  // PCI bus id; "numa<N>" for CPUs; the port name for NET; "nvswitch"
  int index = -1;  // GPU: dev; CPU: NUMA id; NET: dev
  int cpu = -1;    // the CPU node this one hangs under (itself for a CPU)
  // GPU
  int sm = 0;
  int rank = -1;
  bool p2p = true;  // false: the driver refuses peer access (Strata's p2p="0")
  // CPU
  std::string vendor, arch, affinity;
  int family = 0, model = 0;
  // NET
  double speedMbps = 0;
  int port = 0;  // the HCA port (NCCL's net "port"), 0 when the file does not say
  bool gdr = false;
  std::vector<Link> links;
};

struct Path {
  PathType type = PathType::kDis;
  double bw = 0;
  std::vector<int> hops;  // nodes after the source, ending at the destination
};

class System {
 public:
  // Builds the graph from NCCL's XML; `source` names it in errors.
  static System fromXml(const XmlElement& root, const std::string& source);

  const XmlElement& xml() const { return xml_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(int i) const { return nodes_[i]; }
  std::vector<int> ofType(NodeType t) const;
  const Path& path(int from, int to) const { return paths_[from][to]; }
  // Bandwidth of the directed link a -> b (0 when none).
  double linkBw(int a, int b) const;
  // Short human name: "GPU3", "NVSwitch", "CPU1", "NET mlx5_2", "PCI 0000:0b:00.0".
  std::string label(int i) const;
  // One line per node and link.
  std::string describe() const;

 private:
  struct PendingNvlink {  // NVLinks wait until every GPU they may target exists
    int gpu;
    std::string target, tclass;
    int count;
  };
  int addNode(Node n);
  void connect(int a, int b, LinkType t, double bw, int count = 1);
  void addPciTree(const XmlElement& e, int parent, int cpu, const std::string& source,
                  std::vector<PendingNvlink>& nvlinks);
  void addNvlinks(const std::vector<PendingNvlink>& nvlinks);
  void computePaths();

  XmlElement xml_;
  std::vector<Node> nodes_;
  std::vector<std::vector<Path>> paths_;
};

// Effective NVLink bandwidth per link and direction for a compute capability
// (NCCL's figures: about 80% of the 25 GB/s line rate of NVLink3/4).
double nvlinkBwPerLink(int sm);
// PCIe bandwidth per direction from sysfs-style speed ("16.0 GT/s PCIe") and width.
double pciBw(const std::string& speed, const std::string& width);
// Inter-socket bandwidth for a CPU vendor and model.
double interSocketBw(const Node& cpu);

}  // namespace strata::topology
