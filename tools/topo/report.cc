#include "topo/report.h"

#include <sstream>

#include "algorithms/tree/tree.h"
#include "base/error.h"

namespace strata::tools {

using namespace strata::topology;
using namespace strata::algorithms;
namespace {


// The devices a reader cares about: GPUs, CPUs, network ports.
std::vector<int> endpoints(const System& sys) {
  std::vector<int> out = sys.ofType(NodeType::kGpu);
  for (NodeType t : {NodeType::kCpu, NodeType::kNet})
    for (int i : sys.ofType(t)) out.push_back(i);
  return out;
}

void writePaths(std::ostringstream& os, const System& sys) {
  std::vector<int> ids = endpoints(sys);
  os << format("%-14s", "");
  for (int j : ids) os << format(" %11s", sys.label(j).substr(0, 11).c_str());
  os << "\n";
  for (int i : ids) {
    os << format("%-14s", sys.label(i).substr(0, 14).c_str());
    for (int j : ids) {
      const Path& p = sys.path(i, j);
      os << (i == j ? format(" %11s", "-") : format(" %5s/%-5.1f", pathTypeName(p.type), p.bw));
    }
    os << "\n";
  }
}

void writeGroups(std::ostringstream& os, const System& sys, const Plan& plan, int nodes) {
  int perNode = static_cast<int>(plan.devices.size());
  os << "ring order (local ranks):";
  for (int r : plan.ring) os << " " << r;
  os << "\n";
  for (int r = 0; r < perNode; ++r) {
    os << format("  local rank %d: %s", r, sys.label(plan.devices[r]).c_str());
    if (plan.rails[r] >= 0)
      os << format(" -> rail %s, %s %.1f GB/s", sys.label(plan.rails[r]).c_str(),
                   pathTypeName(sys.path(plan.devices[r], plan.rails[r]).type), plan.railGBps[r]);
    os << "\n";
  }
  for (const std::string& n : plan.notes) os << "  " << n << "\n";
  os << format("tuner inputs: intra %.1f us/hop, %.1f GB/s per rank; network %.1f us/hop, %.1f GB/s per node; "
               "launch %.1f us\n",
               plan.intra.latencyUs, plan.intra.bandwidthGBps, plan.net.latencyUs, plan.net.bandwidthGBps,
               plan.launchUs);
  if (nodes <= 1) return;
  os << format("nodes: %d x %d ranks; node k holds ranks k*%d .. k*%d+%d; the ring enters and leaves each node once\n",
               nodes, perNode, perNode, perNode, perNode - 1);
  os << format("hierarchical: reduce-scatter inside each node, then %d rail ring(s) across nodes (rail i = local rank "
               "i of every node), then all-gather inside\n",
               perNode);
  os << "double binary tree across nodes (parent of each node; -1 = root):\n";
  for (int t = 0; t < 2; ++t) {
    os << format("  tree %d:", t);
    for (int k = 0; k < nodes; ++k) os << " " << algorithms::doubleTree(nodes, k, t).parent;
    os << "\n";
  }
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += format("\\u%04x", c);
      continue;
    }
    out += c;
  }
  return out + "\"";
}

void writePredictions(std::ostringstream& os, const std::vector<Prediction>& preds) {
  os << "[";
  for (size_t i = 0; i < preds.size(); ++i) {
    const Prediction& p = preds[i];
    os << (i ? ",\n  " : "\n  ") << "{\"collective\": " << jsonString(collectiveName(p.coll)) << ", \"bytes\": " << p.bytes
       << ", \"algorithm\": " << jsonString(p.algorithm) << ", \"protocol\": " << jsonString(p.protocol)
       << ", \"time_us\": " << format("%.3f", p.us) << ", \"algbw_gbps\": " << format("%.3f", p.algbwGBps)
       << ", \"busbw_gbps\": " << format("%.3f", p.busbwGBps) << ", \"bound\": " << jsonString(p.bound) << "}";
  }
  os << "]";
}

}  // namespace

std::string textReport(const std::string& source, const System& sys, const Plan& plan, int nodes,
                       const std::vector<Prediction>& preds) {
  std::ostringstream os;
  os << format("strata-topo: %s; %d node(s) x %zu rank(s) on %s\n\n", source.c_str(), nodes, plan.devices.size(),
               plan.gpus ? "GPUs" : "host memory (CPUs)");
  os << "== Devices and links (GB/s per direction) ==\n" << sys.describe() << "\n";
  os << "== Paths (class/GB/s) ==\n";
  writePaths(os, sys);
  os << "\n== Plan ==\n";
  writeGroups(os, sys, plan, nodes);
  os << "\n== Predictions ==\n";
  os << predictionHeader() << "\n";
  for (const Prediction& p : preds) os << predictionLine(p) << "\n";
  std::vector<Prediction> device = nodes == 1 ? predictDevicePath(plan) : std::vector<Prediction>{};
  if (device.empty()) return os.str();
  os << "\n== Device-driven path (device buffers, one rank per GPU: one kernel per collective, no proxy) ==\n";
  os << predictionHeader() << "\n";
  for (const Prediction& p : device) os << predictionLine(p) << "\n";
  return os.str();
}

std::string jsonReport(const std::string& source, const System& sys, const Plan& plan, int nodes,
                       const std::vector<Prediction>& preds) {
  std::ostringstream os;
  os << "{\"source\": " << jsonString(source) << ", \"nodes\": " << nodes
     << ", \"ranks_per_node\": " << plan.devices.size() << ", \"gpus\": " << (plan.gpus ? "true" : "false");
  os << ",\n \"devices\": [";
  for (size_t i = 0; i < sys.nodes().size(); ++i) {
    const Node& n = sys.node(static_cast<int>(i));
    os << (i ? ",\n  " : "\n  ") << "{\"index\": " << i << ", \"type\": " << jsonString(nodeTypeName(n.type))
       << ", \"id\": " << jsonString(n.id) << ", \"label\": " << jsonString(sys.label(static_cast<int>(i)))
       << ", \"links\": [";
    for (size_t k = 0; k < n.links.size(); ++k)
      os << (k ? ", " : "") << "{\"to\": " << n.links[k].to << ", \"type\": " << jsonString(linkTypeName(n.links[k].type))
         << ", \"count\": " << n.links[k].count << ", \"bw_gbps\": " << format("%.2f", n.links[k].bw) << "}";
    os << "]}";
  }
  os << "],\n \"paths\": [";
  std::vector<int> ids = endpoints(sys);
  bool first = true;
  for (int i : ids)
    for (int j : ids) {
      if (i == j) continue;
      os << (first ? "\n  " : ",\n  ") << "{\"from\": " << jsonString(sys.label(i)) << ", \"to\": " << jsonString(sys.label(j))
         << ", \"type\": " << jsonString(pathTypeName(sys.path(i, j).type))
         << ", \"bw_gbps\": " << format("%.2f", sys.path(i, j).bw) << "}";
      first = false;
    }
  os << "],\n \"plan\": {\"ring\": [";
  for (size_t i = 0; i < plan.ring.size(); ++i) os << (i ? ", " : "") << plan.ring[i];
  os << "], \"ring_gbps\": " << format("%.2f", plan.ringGBps) << ", \"ring_bottleneck\": " << jsonString(plan.ringBottleneck)
     << ", \"ring_path\": " << jsonString(pathTypeName(plan.ringPath)) << ", \"staged\": " << (plan.staged ? "true" : "false")
     << ", \"channels\": " << plan.channels << ", \"net_gbps_per_node\": " << format("%.2f", plan.netGBps) << ", \"rails\": [";
  for (size_t r = 0; r < plan.rails.size(); ++r)
    os << (r ? ", " : "") << "{\"local_rank\": " << r << ", \"device\": " << jsonString(sys.label(plan.devices[r]))
       << ", \"nic\": " << (plan.rails[r] >= 0 ? jsonString(sys.label(plan.rails[r])) : "null")
       << ", \"gbps\": " << format("%.2f", plan.railGBps[r]) << "}";
  os << "], \"notes\": [";
  for (size_t i = 0; i < plan.notes.size(); ++i) os << (i ? ", " : "") << jsonString(plan.notes[i]);
  os << "]},\n \"predictions\": ";
  writePredictions(os, preds);
  os << ",\n \"device_predictions\": ";
  writePredictions(os, nodes == 1 ? predictDevicePath(plan) : std::vector<Prediction>{});
  os << "}\n";
  return os.str();
}

std::string compareReport(const std::string& aName, const Plan& a, const std::vector<Prediction>& aPreds,
                          const std::string& bName, const Plan& b, const std::vector<Prediction>& bPreds) {
  std::ostringstream os;
  os << format("\n== %s compared with %s ==\n", aName.c_str(), bName.c_str());
  os << format("ring: %.1f GB/s per rank here (%s), %.1f there (%s)\n", a.ringGBps, a.ringBottleneck.c_str(),
               b.ringGBps, b.ringBottleneck.c_str());
  os << format("channels: %d here, %d there (%.0f GB/s per channel)\n", a.channels, b.channels, a.perChannelGBps);
  os << format("network: %.1f GB/s per node here, %.1f there\n", a.netGBps, b.netGBps);
  int differ = 0;
  for (size_t i = 0; i < aPreds.size() && i < bPreds.size(); ++i) {
    const Prediction &p = aPreds[i], &q = bPreds[i];
    if (p.algorithm == q.algorithm && p.protocol == q.protocol) continue;
    if (!differ++) os << "choices that differ (here | there):\n";
    os << format("  %-13s %9s  %s/%s %.2f GB/s busbw, bound by %s | %s/%s %.2f GB/s, bound by %s\n",
                 collectiveName(p.coll), sizeLabel(p.bytes).c_str(), p.algorithm.c_str(), p.protocol.c_str(),
                 p.busbwGBps, p.bound.c_str(), q.algorithm.c_str(), q.protocol.c_str(), q.busbwGBps, q.bound.c_str());
  }
  if (!differ) os << "every collective and size gets the same algorithm and protocol on both\n";
  return os.str();
}

}  // namespace strata::tools
