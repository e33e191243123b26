#include "algorithms/tuner.h"

#include <strings.h>

#include <limits>

#include "base/error.h"

namespace strata::algorithms {
namespace {

// Ring: 2(n-1) hops for all-reduce, n-1 for the others; each hop carries bytes/n
// (a whole-buffer chain for broadcast and reduce), pipelined in slot-sized chunks.
double ringCost(const TuneRequest& r) {
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

// Pairwise: every rank exchanges with its peers concurrently.
double pairwiseCost(const TuneRequest& r) {
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
       ringCost},
      {"Pairwise", {Collective::kAllToAll, Collective::kGather, Collective::kScatter, Collective::kSendRecv},
       pairwiseCost},
  };
  return registry;
}

bool listAllows(const std::string& spec, const std::string& name) {
  if (spec.empty()) return true;
  bool exclude = spec[0] == '^';
  bool listed = false;
  size_t pos = exclude ? 1 : 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string tok = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (strcasecmp(tok.c_str(), name.c_str()) == 0) listed = true;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return exclude ? !listed : listed;
}

Choice choose(const TuneRequest& req, const std::string& algoSpec, const std::string& protoSpec) {
  // Host memory has one protocol: whole slots through staging ("Simple" in NCCL's terms).
  static const char* kProtocol = "Simple";
  STRATA_REQUIRE(listAllows(protoSpec, kProtocol), ncclInvalidUsage,
                 "NCCL_PROTO=%s excludes Simple, the only protocol Strata has for host memory", protoSpec.c_str());
  Choice best;
  best.estimatedUs = std::numeric_limits<double>::infinity();
  for (const AlgorithmInfo& a : algorithmRegistry()) {
    bool fits = false;
    for (Collective c : a.collectives) fits |= c == req.coll;
    // Pairwise transfers are how point-to-point work is done, not a choice NCCL_ALGO makes.
    bool selectable = req.coll < Collective::kAllToAll;
    if (!fits || (selectable && !listAllows(algoSpec, a.name))) continue;
    double t = a.costUs(req);
    if (t < best.estimatedUs) best = Choice{a.name, kProtocol, t};
  }
  STRATA_REQUIRE(best.algorithm[0] != '\0', ncclInvalidUsage,
                 "NCCL_ALGO=%s leaves no algorithm for %s (this build has Ring for it)", algoSpec.c_str(),
                 collectiveName(req.coll));
  return best;
}

}  // namespace strata::algorithms
