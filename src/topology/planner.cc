#include "topology/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "base/error.h"

namespace strata::topology {
namespace {

// Per-hop latencies (us): NCCL's ring Simple figures for NVLink and PCIe steps
// and its base launch cost; Strata's own measured host and socket figures.
constexpr double kNvlinkHopUs = 3.4, kPciHopUs = 5.7, kGpuLaunchUs = 8.4;
constexpr double kHostHopUs = 1.0, kThreadHopUs = 0.5;
constexpr double kRdmaHopUs = 5.0;
// What one channel moves: the per-channel speeds NCCL's search settles on
// (A100: 12 channels x 20 GB/s) and one host thread's staged copy.
double perChannel(const System& sys, bool gpus, int device) {
  if (!gpus) return kHostCopyGBps;
  return sys.node(device).sm >= 90 ? 40.0 : 20.0;
}

std::vector<std::pair<int, int>> linksOf(int from, const Path& p) {
  std::vector<std::pair<int, int>> out;
  int prev = from;
  for (int h : p.hops) {
    out.emplace_back(prev, h);
    prev = h;
  }
  return out;
}

// Set bits in an affinity mask ("ffffffff,0000000f").
int coresOf(const std::string& affinity) {
  int n = 0;
  for (char c : affinity)
    if (isxdigit(static_cast<unsigned char>(c)))
      n += __builtin_popcount(static_cast<unsigned>(isdigit(static_cast<unsigned char>(c)) ? c - '0' : (tolower(c) - 'a' + 10)));
  return n;
}

std::vector<int> chooseDevices(const System& sys, const PlanOptions& opts, bool* gpus) {
  if (!opts.rankDevices.empty()) {
    *gpus = sys.node(opts.rankDevices[0]).type == NodeType::kGpu;
    return opts.rankDevices;
  }
  std::vector<int> pool = sys.ofType(NodeType::kGpu);
  *gpus = !pool.empty();
  if (pool.empty()) pool = sys.ofType(NodeType::kCpu);
  auto key = [&](int i) { return sys.node(i).rank >= 0 ? sys.node(i).rank : sys.node(i).index; };
  std::stable_sort(pool.begin(), pool.end(), [&](int a, int b) { return key(a) < key(b); });
  int n = opts.ranksPerNode > 0 ? opts.ranksPerNode : static_cast<int>(pool.size());
  if (!*gpus && opts.ranksPerNode <= 0) {  // host ranks: one per core, at most 8, spread over the NUMA domains
    int cores = 0;
    for (int c : pool) cores += coresOf(sys.node(c).affinity);
    n = std::clamp(cores, n, std::max(n, 8));
  }
  std::vector<int> devices(n);
  int p = static_cast<int>(pool.size());
  for (int r = 0; r < n; ++r)  // GPUs: round robin (several ranks per GPU); CPUs: in blocks
    devices[r] = *gpus ? pool[r % p] : pool[static_cast<size_t>(r) * p / n];
  return devices;
}

// Hops between ranks, kept per pair of devices: ranks that share a device (host
// ranks of one CPU, several ranks on a GPU) share their hops, so a node of
// thousands of host ranks costs a few entries, not ranks squared.
struct HopTable {
  std::vector<int> deviceOf;           // rank -> index into devices
  std::vector<int> devices;            // distinct System nodes
  std::vector<std::vector<Hop>> hops;  // device index x device index
  const Hop& at(int a, int b) const { return hops[deviceOf[a]][deviceOf[b]]; }
  int ranks() const { return static_cast<int>(deviceOf.size()); }
};

HopTable hopTable(const System& sys, const std::vector<int>& rankDevices, const PlanOptions& opts) {
  HopTable t;
  std::map<int, int> index;
  for (int dev : rankDevices) {
    auto [it, fresh] = index.emplace(dev, static_cast<int>(t.devices.size()));
    if (fresh) t.devices.push_back(dev);
    t.deviceOf.push_back(it->second);
  }
  size_t d = t.devices.size();
  t.hops.assign(d, std::vector<Hop>(d));
  for (size_t a = 0; a < d; ++a)
    for (size_t b = 0; b < d; ++b) t.hops[a][b] = hopBetween(sys, t.devices[a], t.devices[b], opts);
  return t;
}

struct RingScore {
  double bw = 0;
  int worstType = 0, typeSum = 0;
  std::pair<int, int> bottleneck{-1, -1};
  bool staged = false;
};

RingScore scoreRing(const std::vector<int>& ring, const HopTable& hops, const System& sys, bool gpus) {
  std::map<std::pair<int, int>, int> uses;
  RingScore s;
  s.bw = gpus ? 1e9 : kHostCopyGBps;
  int n = static_cast<int>(ring.size());
  for (int i = 0; i < n; ++i) {
    const Hop& h = hops.at(ring[i], ring[(i + 1) % n]);
    for (const auto& l : h.links) ++uses[l];
    s.worstType = std::max(s.worstType, static_cast<int>(h.type));
    s.typeSum += static_cast<int>(h.type);
    s.staged |= h.staged;
  }
  for (const auto& [l, count] : uses) {
    double bw = sys.linkBw(l.first, l.second) / count;
    if (bw < s.bw) {
      s.bw = bw;
      s.bottleneck = l;
    }
  }
  return s;
}

bool better(const RingScore& a, const RingScore& b) {
  if (std::fabs(a.bw - b.bw) > 1e-9) return a.bw > b.bw;
  if (a.worstType != b.worstType) return a.worstType < b.worstType;
  return a.typeSum < b.typeSum;
}

// Nearest neighbour from rank 0: the next rank is the unused one with the widest,
// then shortest, hop, the lowest rank among equals. Ranks of one device are alike,
// so each step weighs one candidate per device (its lowest unused rank).
std::vector<int> nearestNeighbourRing(const HopTable& hops) {
  int n = hops.ranks(), d = static_cast<int>(hops.devices.size());
  std::vector<std::vector<int>> unused(d);  // per device, its unused ranks, highest first
  for (int r = n - 1; r > 0; --r) unused[hops.deviceOf[r]].push_back(r);
  std::vector<int> ring{0};
  for (int i = 1; i < n; ++i) {
    int from = hops.deviceOf[ring.back()], pick = -1;
    for (int dev = 0; dev < d; ++dev) {
      if (unused[dev].empty()) continue;
      if (pick < 0) {
        pick = dev;
        continue;
      }
      const Hop &h = hops.hops[from][dev], &b = hops.hops[from][pick];
      bool same = h.bw == b.bw && h.type == b.type;
      if (h.bw > b.bw || (h.bw == b.bw && h.type < b.type) || (same && unused[dev].back() < unused[pick].back()))
        pick = dev;
    }
    ring.push_back(unused[pick].back());
    unused[pick].pop_back();
  }
  return ring;
}

// Exhaustive up to 9 ranks (rank 0 first, natural order wins ties), nearest
// neighbour beyond.
std::vector<int> searchRing(const HopTable& hops, const System& sys, bool gpus) {
  int n = hops.ranks();
  std::vector<int> ring(n);
  std::iota(ring.begin(), ring.end(), 0);
  if (n <= 3) return ring;
  if (n <= 9) {
    std::vector<int> best = ring, cur = ring;
    RingScore bestScore = scoreRing(ring, hops, sys, gpus);
    while (std::next_permutation(cur.begin() + 1, cur.end())) {
      RingScore s = scoreRing(cur, hops, sys, gpus);
      if (better(s, bestScore)) {
        bestScore = s;
        best = cur;
      }
    }
    return best;
  }
  return nearestNeighbourRing(hops);
}

// Each rank's nearest NIC, no NIC serving more than its share while another is
// as near; a GPU without GPUDirect RDMA to the NIC goes through its CPU.
void assignRails(const System& sys, Plan& plan) {
  std::vector<int> nets = sys.ofType(NodeType::kNet);
  int n = static_cast<int>(plan.devices.size());
  plan.rails.assign(n, -1);
  plan.railGBps.assign(n, 0);
  if (nets.empty()) {
    plan.notes.push_back("rails: the topology has no NIC; the network rate comes from the interface in use");
    return;
  }
  int cap = (n + static_cast<int>(nets.size()) - 1) / static_cast<int>(nets.size());
  std::map<int, int> load;
  for (int r = 0; r < n; ++r) {
    int dev = plan.devices[r], best = -1;
    PathType bestType = PathType::kDis;
    double bestBw = 0;
    for (int net : nets) {
      auto [t, bw] = railTo(sys, dev, net);
      bool full = load[net] >= cap;
      bool bestFull = best >= 0 && load[best] >= cap;
      if (best < 0 || (bestFull && !full) ||
          (full == bestFull && (t < bestType || (t == bestType && bw > bestBw)))) {
        best = net;
        bestType = t;
        bestBw = bw;
      }
    }
    ++load[best];
    plan.rails[r] = best;
    plan.railGBps[r] = bestBw;
  }
  std::map<int, double> distinct;
  for (int r = 0; r < n; ++r) {
    double& bw = distinct[plan.rails[r]];
    bw = bw == 0 ? plan.railGBps[r] : std::min(bw, plan.railGBps[r]);
  }
  for (const auto& [net, bw] : distinct) plan.netGBps += bw;
  plan.notes.push_back(format("network: %zu rail(s) for %d rank(s), %.1f GB/s per node (each rail: the NIC's "
                              "rate or the path to it, whichever is lower)",
                              distinct.size(), n, plan.netGBps));
}

}  // namespace

std::pair<PathType, double> railTo(const System& sys, int dev, int net) {
  const Path& p = sys.path(dev, net);
  bool direct = sys.node(dev).type != NodeType::kGpu || (sys.node(net).gdr && p.type <= PathType::kPxb);
  if (direct) return {p.type, p.bw};
  int cpu = sys.node(dev).cpu;  // no GPUDirect RDMA: through a host buffer
  return {std::max(PathType::kPhb, std::max(sys.path(dev, cpu).type, sys.path(cpu, net).type)),
          std::min(sys.path(dev, cpu).bw, sys.path(cpu, net).bw)};
}

std::vector<int> nearestNets(const System& sys, int dev) {
  std::vector<int> best;
  std::pair<PathType, double> bestRail{PathType::kDis, 0};
  for (int net : sys.ofType(NodeType::kNet)) {
    auto r = railTo(sys, dev, net);
    bool better = r.first < bestRail.first || (r.first == bestRail.first && r.second > bestRail.second);
    if (better) best.clear();
    if (better || r == bestRail) {
      best.push_back(net);
      bestRail = r;
    }
  }
  return best;
}

Hop hopBetween(const System& sys, int a, int b, const PlanOptions& opts) {
  Hop h;
  const Path& p = sys.path(a, b);
  if (a == b) return Hop{PathType::kLoc, p.bw, false, {}};
  const Node &na = sys.node(a), &nb = sys.node(b);
  bool gpuPair = na.type == NodeType::kGpu && nb.type == NodeType::kGpu;
  bool direct = !gpuPair || (!opts.p2pDisable && na.p2p && nb.p2p &&
                             (p.type <= opts.p2pLevel || p.type <= PathType::kNvb));
  if (direct) return Hop{p.type, p.bw, false, linksOf(a, p)};
  // Through host memory: into a buffer on a's CPU, out of it to b.
  const Path &up = sys.path(a, na.cpu), &down = sys.path(na.cpu, b);
  h.type = std::max(PathType::kPhb, std::max(up.type, down.type));
  h.bw = std::min(up.bw, down.bw);
  h.staged = true;
  h.links = linksOf(a, up);
  for (const auto& l : linksOf(na.cpu, down)) h.links.push_back(l);
  return h;
}

Plan planNode(const System& sys, const PlanOptions& opts) {
  Plan plan;
  plan.devices = chooseDevices(sys, opts, &plan.gpus);
  int n = static_cast<int>(plan.devices.size());
  STRATA_REQUIRE(n > 0, ncclInvalidUsage, "topology plan: no ranks to place");
  HopTable hops = hopTable(sys, plan.devices, opts);
  plan.ring = searchRing(hops, sys, plan.gpus);
  RingScore s = scoreRing(plan.ring, hops, sys, plan.gpus);
  plan.ringGBps = n > 1 ? s.bw : (plan.gpus ? 5000 : kHostCopyGBps);
  // Threads of one process copy through heap slots, faster than through shared memory.
  if (!plan.gpus && opts.threads && plan.ringGBps >= kHostCopyGBps) plan.ringGBps = kThreadCopyGBps;
  plan.ringPath = static_cast<PathType>(s.worstType);
  plan.staged = s.staged;
  if (s.bottleneck.first >= 0) {
    const auto [a, b] = s.bottleneck;
    const Link* link = nullptr;
    for (const Link& l : sys.node(a).links)
      if (l.to == b) link = &l;
    plan.ringBottleneck = sys.label(a) + " -> " + sys.label(b) + " (" + linkTypeName(link->type) +
                          (link->type == LinkType::kNvl ? " x" + std::to_string(link->count) : std::string()) +
                          format(", %.1f GB/s)", link->bw);
  } else {
    plan.ringBottleneck = plan.gpus ? "none (one device)" : "host memory copies";
  }
  plan.notes.push_back(format("ring: %.1f GB/s per rank, bound by %s; worst hop %s%s", plan.ringGBps,
                              plan.ringBottleneck.c_str(), pathTypeName(plan.ringPath),
                              plan.staged ? ", staged through host memory (no GPU peer-to-peer)" : ""));
  plan.perChannelGBps = perChannel(sys, plan.gpus, plan.devices[0]);
  plan.channels = std::clamp(static_cast<int>(std::lround(plan.ringGBps / plan.perChannelGBps)), 1, 32);
  plan.notes.push_back(format("channels: %d = %.1f GB/s / %.0f GB/s per channel%s", plan.channels, plan.ringGBps,
                              plan.perChannelGBps, plan.gpus ? " (one CTA each)" : " (one host thread each)"));
  assignRails(sys, plan);
  double hostHopUs = opts.threads ? kThreadHopUs : kHostHopUs;
  double hopUs = !plan.gpus ? hostHopUs : plan.ringPath <= PathType::kNvb ? kNvlinkHopUs : kPciHopUs;
  plan.intra = LinkCost{hopUs, plan.ringGBps};
  plan.oversubscribed = opts.oversubscribed;
  bool rdma = !plan.rails.empty() && plan.rails[0] >= 0 && sys.node(plan.rails[0]).gdr;
  plan.net = LinkCost{rdma ? kRdmaHopUs : kSocketHopUs, plan.netGBps};
  plan.launchUs = plan.gpus ? kGpuLaunchUs : 0;
  return plan;
}

}  // namespace strata::topology
