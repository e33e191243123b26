#include "algorithms/tuner.h"

#include <string.h>
#include <strings.h>

#include <limits>

#include "algorithms/algorithm.h"
#include "base/error.h"

namespace strata::algorithms {
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

[[noreturn]] void nothingLeft(const TuneRequest& req, const std::string& algoSpec, const std::string& protoSpec) {
  std::string have, set;
  for (const Algorithm* a : registry())
    if (a->serves(req.coll) && a->applies(req) && a->deviceMemory() == req.deviceBuffers &&
        a->streamOrdered() == req.streamOrdered)
      have += std::string(have.empty() ? "" : ", ") + a->name();
  if (!algoSpec.empty()) set = "NCCL_ALGO=" + algoSpec;
  if (!protoSpec.empty()) set += (set.empty() ? "" : " and ") + std::string("NCCL_PROTO=") + protoSpec;
  std::string why;
  if (!protoSpec.empty() && !req.sharedMemory)
    why = "; LL runs only where every rank maps every other's memory (ranks of one host)";
  if (strcasestr(protoSpec.c_str(), "LL128"))
    why += "; LL128 is a GPU protocol (NVLink's 128-byte stores): host memory has none";
  fail(ncclInvalidUsage, "%s %s no algorithm for %s (this build has %s for it, with protocol Simple%s%s)", set.c_str(),
       algoSpec.empty() || protoSpec.empty() ? "leaves" : "leave", collectiveName(req.coll), have.c_str(),
       req.sharedMemory ? " or LL" : "", why.c_str());
}

}  // namespace

namespace {

// The plain list `spec` gives `func` (NCCL's syntax: "allreduce:Ring;Tree" scopes
// entries per function; an entry without a function applies to the rest).
std::string effectiveList(const std::string& spec, const std::string& func) {
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
  return haveScoped ? scoped : common;
}

}  // namespace

bool listAllows(const std::string& spec, const std::string& name, const std::string& func) {
  return plainListAllows(effectiveList(spec, func), name);
}

namespace {

// NCCL_ALGO lets `a` run: a list names it (by its name or an alias), or an
// exclusion list names neither.
bool algorithmAllowed(const Algorithm& a, const std::string& spec, const char* func) {
  std::string list = effectiveList(spec, func);
  bool exclude = !list.empty() && list[0] == '^';
  bool allowed = plainListAllows(list, a.name());
  for (const char* alias : a.aliases()) {
    bool byAlias = plainListAllows(list, alias);
    allowed = exclude ? allowed && byAlias : allowed || byAlias;
  }
  return allowed;
}

}  // namespace

const char* protocolName(Protocol p) { return p == Protocol::kLL ? "LL" : "Simple"; }

const char* Choice::name() const { return algorithm ? algorithm->name() : ""; }

// launchUs is the proxy path's fixed cost (NCCL's base latency on GPUs); a
// stream-ordered algorithm is one kernel launch, which its own cost counts.
double costOf(const Algorithm& a, Protocol p, const TuneRequest& req) {
  return (a.streamOrdered() ? 0 : req.launchUs) + a.costUs(req, p);
}

Choice choose(const TuneRequest& req, const std::string& algoSpec, const std::string& protoSpec) {
  Choice best;
  if (!tryChoose(req, algoSpec, protoSpec, &best)) nothingLeft(req, algoSpec, protoSpec);
  return best;
}

namespace {

// The cheapest algorithm and protocol that serve and apply to `req` and that NCCL_ALGO
// and NCCL_PROTO allow, among the preferred ones or among all.
bool tryChooseAmong(const TuneRequest& req, const std::string& algoSpec, const std::string& protoSpec,
                    bool preferredOnly, Choice* out) {
  Choice best;
  best.estimatedUs = std::numeric_limits<double>::infinity();
  const char* func = collectiveName(req.coll);
  for (size_t i = 0; i < registry().size(); ++i) {
    const Algorithm* a = registry()[i];
    if (!a->serves(req.coll) || !a->applies(req) || a->deviceMemory() != req.deviceBuffers) continue;
    if (preferredOnly && (!a->preferred(req) || (a->linksEveryRank() && req.nranks > kMaxMeshRanks))) continue;
    if (a->streamOrdered() != req.streamOrdered) continue;
    if (req.unavailable >> i & 1) continue;
    // NCCL_ALGO and NCCL_PROTO choose only among these; one rank's collective is a
    // copy whatever they say, as in NCCL.
    bool listed = a->selectable() && traits(req.coll).scheduled && req.nranks > 1;
    if (listed && !algorithmAllowed(*a, algoSpec, func)) continue;
    for (Protocol p : a->protocols()) {
      if (p == Protocol::kLL && !a->deviceMemory() && !req.sharedMemory) continue;  // the host's LL: shared memory
      if (listed && !listAllows(protoSpec, protocolName(p), func)) continue;
      double t = costOf(*a, p, req);
      if (t < best.estimatedUs) best = Choice{a, p, t};
    }
  }
  *out = best;
  return best.algorithm != nullptr;
}

}  // namespace

bool tryChoose(const TuneRequest& req, const std::string& algoSpec, const std::string& protoSpec, Choice* out) {
  // The preferred algorithms first; the others only where none of those is left.
  return tryChooseAmong(req, algoSpec, protoSpec, true, out) || tryChooseAmong(req, algoSpec, protoSpec, false, out);
}

}  // namespace strata::algorithms
