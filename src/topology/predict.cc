#include "topology/predict.h"

#include <cstring>

#include "base/error.h"

namespace strata::topology {

using algorithms::Collective;

std::vector<size_t> predictionSizes() {
  std::vector<size_t> out;
  for (size_t b = 8; b <= (size_t{8} << 30); b *= 8) out.push_back(b);
  return out;
}

namespace {

double costOf(const algorithms::TuneRequest& r, const Prediction& p) {
  for (const algorithms::AlgorithmInfo& a : algorithms::algorithmRegistry())
    if (p.algorithm == a.name)
      return r.launchUs + a.costUs(r, p.protocol == "LL" ? algorithms::Protocol::kLL : algorithms::Protocol::kSimple);
  return 0;
}

// The resource whose removal saves the most time.
std::string boundOf(const Plan& plan, const algorithms::TuneRequest& r, const Prediction& p) {
  double t = costOf(r, p);
  algorithms::TuneRequest noLatency = r, freeIntra = r, freeNet = r;
  noLatency.intra.latencyUs = noLatency.net.latencyUs = noLatency.launchUs = 0;
  freeIntra.intra.bandwidthGBps *= 1e6;
  freeNet.net.bandwidthGBps *= 1e6;
  double lat = t - costOf(noLatency, p), intra = t - costOf(freeIntra, p);
  double net = r.nodes > 1 ? t - costOf(freeNet, p) : 0;
  if (lat >= intra && lat >= net) return "latency";
  if (net > intra) return format("network (%.1f GB/s per node)", plan.netGBps);
  return plan.gpus ? plan.ringBottleneck : "host memory copies";
}

}  // namespace

Prediction predict(const Plan& plan, int nodes, Collective coll, size_t bytes, const std::string& algo,
                   const std::string& proto) {
  algorithms::TuneRequest r = tuneRequest(plan, nodes, coll, bytes);
  algorithms::Choice c = algorithms::choose(r, algo, proto);
  Prediction p;
  p.coll = coll;
  p.bytes = bytes;
  p.algorithm = c.algorithm;
  p.protocol = c.protocol;
  p.us = c.estimatedUs;
  p.algbwGBps = bytes / (p.us * 1e3);
  p.busbwGBps = p.algbwGBps * strata::busFactor(coll, r.nranks);
  p.bound = boundOf(plan, r, p);
  return p;
}

std::vector<Prediction> predictAll(const Plan& plan, int nodes, const std::string& algo, const std::string& proto) {
  std::vector<Prediction> out;
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kBroadcast, Collective::kReduce, Collective::kAllToAll})
    for (size_t b : predictionSizes()) {
      try {
        out.push_back(predict(plan, nodes, c, b, algo, proto));
      } catch (const Error&) {  // the lists exclude every algorithm for this collective
        if (algo.empty() && proto.empty()) throw;
      }
    }
  return out;
}

}  // namespace strata::topology
