#include "algorithms/predict.h"

#include "algorithms/algorithm.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace strata::algorithms {

using topology::Plan;


std::vector<size_t> predictionSizes() {
  std::vector<size_t> out;
  for (size_t b = 8; b <= (size_t{8} << 30); b *= 8) out.push_back(b);
  return out;
}

namespace {

double costOf(const TuneRequest& r, const Prediction& p) {
  const Algorithm* a = findAlgorithm(p.algorithm.c_str());
  return a ? algorithms::costOf(*a, p.protocol == "LL" ? Protocol::kLL : Protocol::kSimple, r) : 0;
}

// The resource whose removal saves the most time.
std::string boundOf(const Plan& plan, const TuneRequest& r, const Prediction& p) {
  double t = costOf(r, p);
  TuneRequest noLatency = r, freeIntra = r, freeNet = r;
  noLatency.intra.latencyUs = noLatency.net.latencyUs = noLatency.launchUs = 0;
  freeIntra.intra.bandwidthGBps *= 1e6;
  freeNet.net.bandwidthGBps *= 1e6;
  double intra = t - costOf(freeIntra, p), net = r.nodes > 1 ? t - costOf(freeNet, p) : 0;
  double lat = t - costOf(noLatency, p);
  // On one node what no bandwidth saves is latency too (a device kernel's launch and
  // steps are constants). Across nodes freeing one link alone may save nothing.
  if (r.nodes == 1) lat = std::max(lat, t - intra);
  if (lat >= intra && lat >= net) return "latency";
  if (net > intra) return format("network (%.1f GB/s per node)", r.net.bandwidthGBps);
  return plan.gpus ? plan.ringBottleneck : "host memory copies";
}

}  // namespace

TuneRequest requestFor(const Plan& plan, int nodes, Collective coll, size_t bytes) {
  TuneRequest r;
  r.coll = coll;
  r.bytes = bytes;
  r.ranksPerNode = static_cast<int>(plan.devices.size());
  r.nodes = nodes;
  r.nranks = r.ranksPerNode * nodes;
  r.intra = plan.intra;
  r.net = plan.net;
  if (r.net.bandwidthGBps <= 0) r.net.bandwidthGBps = 1.25;  // no NIC in the topology: 10 Gb/s
  // Across nodes with more ranks than cores, a hop inside a node waits for the
  // scheduler too (fitted on the 4 x 2 test bed: docs/design.md).
  if (nodes > 1 && plan.oversubscribed) r.intra.latencyUs = topology::kCrowdedHopUs;
  r.sharedMemory = !plan.staged;
  r.gpuMachine = plan.gpus;
  r.launchUs = plan.launchUs;
  return r;
}

Prediction predict(const Plan& plan, int nodes, Collective coll, size_t bytes, const std::string& algo,
                   const std::string& proto) {
  return predict(plan, requestFor(plan, nodes, coll, bytes), algo, proto);
}

Prediction predict(const Plan& plan, const TuneRequest& r, const std::string& algo, const std::string& proto) {
  Choice c = choose(r, algo, proto);
  Prediction p;
  p.coll = r.coll;
  p.bytes = r.bytes;
  p.algorithm = c.name();
  p.protocol = protocolName(c.proto);
  p.us = c.estimatedUs;
  p.algbwGBps = r.bytes / (p.us * 1e3);
  p.busbwGBps = p.algbwGBps * strata::busFactor(r.coll, r.nranks);
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

bool deviceDriven(const Plan& plan, int nodes) {
  std::vector<int> d = plan.devices;
  std::sort(d.begin(), d.end());
  bool own = std::unique(d.begin(), d.end()) == d.end();
  return plan.gpus && !plan.staged && nodes == 1 && own && d.size() > 1;
}

std::vector<Prediction> predictDevicePath(const Plan& plan) {
  std::vector<Prediction> out;
  if (!deviceDriven(plan, 1)) return out;
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kBroadcast, Collective::kReduce, Collective::kAllToAll})
    for (size_t b : predictionSizes()) {
      TuneRequest r = requestFor(plan, 1, c, b);
      r.deviceBuffers = r.streamOrdered = r.ownGpus = true;
      Choice unused;
      if (tryChoose(r, "", "", &unused)) out.push_back(predict(plan, r));
    }
  return out;
}

}  // namespace strata::algorithms

namespace strata::algorithms {

std::string sizeLabel(size_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && bytes % 1024 == 0 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + " " + units[u];
}

std::string predictionHeader() {
  return format("%-14s %9s %-13s %-7s %12s %10s %10s  %s", "collective", "bytes", "algorithm", "proto", "time_us",
                "algbw", "busbw", "bound by");
}

std::string predictionLine(const Prediction& p) {
  return format("%-14s %9s %-13s %-7s %12.1f %10.2f %10.2f  %s", collectiveName(p.coll), sizeLabel(p.bytes).c_str(),
                p.algorithm.c_str(), p.protocol.c_str(), p.us, p.algbwGBps, p.busbwGBps, p.bound.c_str());
}

}  // namespace strata::algorithms
