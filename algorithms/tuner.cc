#include "algorithms/tuner.h"

#include <strings.h>

#include <limits>

#include "base/error.h"

namespace strata::algorithms {
namespace {

// Ring: 2(n-1) hops for all-reduce, n-1 for the others; each hop carries bytes/n
// (a whole-buffer chain for broadcast and reduce), pipelined in slot-sized chunks.
double ringCost(const TuneRequest& r, Protocol) {
  int n = r.nranks;
  if (n <= 1) return r.link.latencyUs;
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
  return hops * r.link.latencyUs + wireBytes / (r.link.bandwidthGBps * 1e3);
}

// One-shot all-reduce: one hop, but every rank writes its input to n-1 peers
// and reads n-1 inputs back, so it moves (n-1) x bytes each way. LL skips the
// FIFO handshake (a fifth of the hop latency, measured) and doubles the bytes.
double oneShotCost(const TuneRequest& r, Protocol p) {
  int n = r.nranks;
  double bytes = 2.0 * (n > 1 ? n - 1 : 0) * r.bytes * (p == Protocol::kLL ? 2 : 1);
  double latency = r.link.latencyUs * (p == Protocol::kLL ? 0.2 : 1.0);
  return latency + bytes / (r.link.bandwidthGBps * 1e3);
}

// Pairwise: every rank exchanges with its peers concurrently.
double pairwiseCost(const TuneRequest& r, Protocol) {
  int n = r.nranks;
  double wireBytes = r.coll == Collective::kSendRecv ? r.bytes : static_cast<double>(n - 1) / n * r.bytes;
  return r.link.latencyUs * (n > 1 ? n - 1 : 1) + wireBytes / (r.link.bandwidthGBps * 1e3);
}

}  // namespace

const std::vector<AlgorithmInfo>& algorithmRegistry() {
  static const std::vector<AlgorithmInfo> registry = {
      {"Ring",
       {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter, Collective::kBroadcast,
        Collective::kReduce},
       {Protocol::kSimple},
       ringCost},
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
    if (!fits || (selectable && !listAllows(algoSpec, a.name, collectiveName(req.coll)))) continue;
    for (Protocol p : a.protocols) {
      if (p == Protocol::kLL && !req.sharedMemory) continue;
      if (selectable && !listAllows(protoSpec, protocolName(p), collectiveName(req.coll))) continue;
      double t = a.costUs(req, p);
      if (t < best.estimatedUs) best = Choice{a.name, protocolName(p), p, t};
    }
  }
  if (best.algorithm[0] == '\0') {
    std::string have, set;
    for (const AlgorithmInfo& a : algorithmRegistry())
      for (Collective c : a.collectives)
        if (c == req.coll) have += std::string(have.empty() ? "" : ", ") + a.name;
    if (!algoSpec.empty()) set = "NCCL_ALGO=" + algoSpec;
    if (!protoSpec.empty()) set += (set.empty() ? "" : " and ") + std::string("NCCL_PROTO=") + protoSpec;
    fail(ncclInvalidUsage, "%s %s no algorithm for %s (this build has %s for it, with protocol Simple%s)",
         set.c_str(), algoSpec.empty() || protoSpec.empty() ? "leaves" : "leave", collectiveName(req.coll),
         have.c_str(), req.sharedMemory ? " or LL" : "");
  }
  return best;
}

}  // namespace strata::algorithms
