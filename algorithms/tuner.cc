#include "algorithms/tuner.h"

#include <strings.h>

#include <algorithm>
#include <limits>

#include "algorithms/tree.h"
#include "base/error.h"

namespace strata::algorithms {
namespace {

double transferUs(double bytes, const LinkModel& l) { return bytes / (l.bandwidthGBps * 1e3); }

// The link a step of a ring or tree waits for: across nodes the network's
// latency, and the lower of the two rates (a fast network can outrun NVLink).
LinkModel slowest(const TuneRequest& r) {
  if (r.nodes <= 1) return r.intra;
  return LinkModel{r.net.latencyUs, std::min(r.net.bandwidthGBps, r.intra.bandwidthGBps)};
}

// A ring step across nodes both sends and receives through the kernel before the
// next can start: 1.5 network hops (fitted on the 4 x 2 test bed, docs/design.md).
constexpr double kRingStepHops = 1.5;
// A tree hop across nodes: 1.25 network hops (same fit).
constexpr double kTreeStepHops = 1.25;
// Each further message a rank sends across nodes in one step costs its system
// calls: 4/3 of a network hop (same fit).
constexpr double kNetMessageHops = 4.0 / 3;

// Ranks per node, or the average when nodes differ.
double ranksPerNode(const TuneRequest& r) {
  return r.ranksPerNode ? r.ranksPerNode : static_cast<double>(r.nranks) / r.nodes;
}

// Ring: 2(n-1) hops for all-reduce, n-1 for the others; each hop carries bytes/n
// (a whole-buffer chain for broadcast and reduce), pipelined in slot-sized chunks.
// Ranks are ordered by node, so each node link carries the ring once each way.
double ringCost(const TuneRequest& r, Protocol) {
  int n = r.nranks;
  const LinkModel l = slowest(r);
  if (n <= 1) return r.intra.latencyUs;
  double hops, wireBytes;
  switch (r.coll) {
    case Collective::kAllReduce:
      hops = 2.0 * (n - 1);
      wireBytes = 2.0 * (n - 1) / n * r.bytes;
      break;
    case Collective::kBroadcast:
    case Collective::kReduce:
      hops = n - 1;
      wireBytes = r.bytes;
      break;
    default:
      hops = n - 1;
      wireBytes = static_cast<double>(n - 1) / n * r.bytes;
      break;
  }
  return hops * l.latencyUs * (r.nodes > 1 ? kRingStepHops : 1.0) + transferUs(wireBytes, l);
}

// Double binary tree (all-reduce: up then down both trees, half the data each) and
// one tree from the root (broadcast, reduce). An inner node sends to two children,
// so the busiest link carries twice what a ring's does, for log2(n) hops instead of n.
double treeCost(const TuneRequest& r, Protocol) {
  const LinkModel l = slowest(r);
  double levels = treeDepth(r.nranks) - 1;
  bool allReduce = r.coll == Collective::kAllReduce;
  double hops = allReduce ? 2 * levels : levels;
  return l.latencyUs * (hops * (r.nodes > 1 ? kTreeStepHops : 1.0) + 1) + transferUs(2.0 * r.bytes, l);
}

// Hierarchical all-reduce: reduce-scatter inside each node, all-reduce across nodes
// on L rails (each with 1/L of the data, all sharing the node link), all-gather
// inside the node. The phases are pipelined in pieces, so the slower phase's
// transfer time dominates.
double hierarchicalCost(const TuneRequest& r, Protocol) {
  int L = r.ranksPerNode, N = r.nodes;
  double inside = 2.0 * (L - 1) * r.intra.latencyUs;
  double across = 2.0 * (N - 1) * r.net.latencyUs * kRingStepHops;
  double insideBytes = 2.0 * (L - 1) / L * r.bytes, acrossBytes = 2.0 * (N - 1) / N * r.bytes;
  double a = transferUs(insideBytes, r.intra), b = transferUs(acrossBytes, r.net);
  return inside + across + std::max(a, b) + 0.1 * std::min(a, b);
}

// Leaders (small all-reduces across nodes): a chain reduce inside each node to its
// first rank, one-shot among the N leaders, a chain broadcast back: (L-1) intra
// hops each way and N-1 network messages per leader, each carrying S.
double leadersCost(const TuneRequest& r, Protocol) {
  double L = ranksPerNode(r);
  int N = r.nodes;
  double inside = 2 * (L - 1) * r.intra.latencyUs + 2 * transferUs(r.bytes, r.intra);
  double across =
      r.net.latencyUs * (1 + (N - 2) * kNetMessageHops) + transferUs((N - 1) * double(r.bytes), r.net);
  return inside + across;
}

// One-shot all-reduce: one hop, but every rank writes its input to n-1 peers
// and reads n-1 inputs back, so it moves (n-1) x bytes each way; across nodes a
// node link carries L x (n - L) copies, and each network message costs its
// system calls. LL skips the FIFO
// handshake (a fifth of the hop latency, measured) and doubles the bytes.
double oneShotCost(const TuneRequest& r, Protocol p) {
  int n = r.nranks;
  if (r.nodes > 1) {
    double L = ranksPerNode(r);
    double messages = (n - L) * r.net.latencyUs * kNetMessageHops + (L - 1) * r.intra.latencyUs;
    return r.net.latencyUs + messages + transferUs(L * (n - L) * r.bytes, r.net);
  }
  double bytes = 2.0 * (n > 1 ? n - 1 : 0) * r.bytes * (p == Protocol::kLL ? 2 : 1);
  double latency = r.intra.latencyUs * (p == Protocol::kLL ? 0.2 : 1.0);
  return latency + transferUs(bytes, r.intra);
}

// Pairwise: every rank exchanges with its peers concurrently.
double pairwiseCost(const TuneRequest& r, Protocol) {
  int n = r.nranks;
  const LinkModel l = slowest(r);
  double wireBytes = r.coll == Collective::kSendRecv ? r.bytes : static_cast<double>(n - 1) / n * r.bytes;
  return l.latencyUs * (n > 1 ? n - 1 : 1) + transferUs(wireBytes, l);
}

bool hierarchicalFits(const TuneRequest& r) { return r.nodes > 1 && r.ranksPerNode > 1; }
bool multiNode(const TuneRequest& r) { return r.nodes > 1; }

}  // namespace

const std::vector<AlgorithmInfo>& algorithmRegistry() {
  static const std::vector<AlgorithmInfo> registry = {
      {"Ring",
       {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter, Collective::kBroadcast,
        Collective::kReduce},
       {Protocol::kSimple},
       ringCost},
      {"Tree", {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce}, {Protocol::kSimple}, treeCost},
      {"Hierarchical", {Collective::kAllReduce}, {Protocol::kSimple}, hierarchicalCost, hierarchicalFits},
      {"Leaders", {Collective::kAllReduce}, {Protocol::kSimple}, leadersCost, multiNode},
      {"OneShot", {Collective::kAllReduce}, {Protocol::kSimple, Protocol::kLL}, oneShotCost},
      {"Pairwise",
       {Collective::kAllToAll, Collective::kGather, Collective::kScatter, Collective::kSendRecv},
       {Protocol::kSimple},
       pairwiseCost},
  };
  return registry;
}

namespace {

bool plainListAllows(const std::string& list, const std::string& name) {
  if (list.empty()) return true;
  bool exclude = list[0] == '^';
  bool listed = false;
  size_t pos = exclude ? 1 : 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string tok = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (strcasecmp(tok.c_str(), name.c_str()) == 0) listed = true;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return exclude ? !listed : listed;
}

}  // namespace

bool listAllows(const std::string& spec, const std::string& name, const std::string& func) {
  std::string common, scoped;
  bool haveScoped = false;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t semi = spec.find(';', pos);
    std::string entry = spec.substr(pos, semi == std::string::npos ? std::string::npos : semi - pos);
    size_t colon = entry.find(':');
    if (colon == std::string::npos) {
      common = entry;
    } else if (!func.empty() && strcasecmp(entry.substr(0, colon).c_str(), func.c_str()) == 0) {
      scoped = entry.substr(colon + 1);
      haveScoped = true;
    }
    if (semi == std::string::npos) break;
    pos = semi + 1;
  }
  return plainListAllows(haveScoped ? scoped : common, name);
}

const char* protocolName(Protocol p) { return p == Protocol::kLL ? "LL" : "Simple"; }

Choice choose(const TuneRequest& req, const std::string& algoSpec, const std::string& protoSpec) {
  Choice best;
  best.estimatedUs = std::numeric_limits<double>::infinity();
  for (const AlgorithmInfo& a : algorithmRegistry()) {
    bool fits = false;
    for (Collective c : a.collectives) fits |= c == req.coll;
    // Pairwise transfers are how point-to-point work is done, not a choice NCCL_ALGO makes.
    bool selectable = req.coll < Collective::kAllToAll;
    if (!fits || (a.applies && !a.applies(req))) continue;
    if (selectable && !listAllows(algoSpec, a.name, collectiveName(req.coll))) continue;
    for (Protocol p : a.protocols) {
      if (p == Protocol::kLL && !req.sharedMemory) continue;
      if (selectable && !listAllows(protoSpec, protocolName(p), collectiveName(req.coll))) continue;
      double t = req.launchUs + a.costUs(req, p);
      if (t < best.estimatedUs) best = Choice{a.name, protocolName(p), p, t};
    }
  }
  if (best.algorithm[0] == '\0') {
    std::string have, set;
    for (const AlgorithmInfo& a : algorithmRegistry())
      for (Collective c : a.collectives)
        if (c == req.coll && (!a.applies || a.applies(req))) have += std::string(have.empty() ? "" : ", ") + a.name;
    if (!algoSpec.empty()) set = "NCCL_ALGO=" + algoSpec;
    if (!protoSpec.empty()) set += (set.empty() ? "" : " and ") + std::string("NCCL_PROTO=") + protoSpec;
    fail(ncclInvalidUsage, "%s %s no algorithm for %s (this build has %s for it, with protocol Simple%s)",
         set.c_str(), algoSpec.empty() || protoSpec.empty() ? "leaves" : "leave", collectiveName(req.coll),
         have.c_str(), req.sharedMemory ? " or LL" : "");
  }
  return best;
}

}  // namespace strata::algorithms
