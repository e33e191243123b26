// Making a communicator: describing this rank, the rendezvous, the plan of
// every node from its topology (the one strata-topo shows), the rank layout,
// the tuner's inputs, and the links the algorithms want at once.
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>
#include <tuple>

#include "algorithms/predict.h"
#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "base/mutation.h"
#include "base/shm_segment.h"
#include "core/comm_plan.h"
#include "core/communicator.h"
#include "core/settings_agreement.h"
#include "device/gpu.h"
#include "topology/local.h"
#include "transports/transport.h"

namespace strata::core {
namespace {

constexpr double kDefaultNetGBps = 1.25;  // an interface that reports no speed: 10 Gb/s

void copyString(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(cap - 1, s.size());
  memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// Ends a bootstrap wait once the handle is aborted (during init, or a split later).
WaitCheck abortCheck(const AbortSignal* aborted, int rank) {
  return [aborted, rank] {
    if (const char* by = aborted ? aborted->load() : nullptr)
      fail(ncclInvalidUsage, "rank %d: the communicator was stopped while it initialised: %s was called on another thread",
           rank, by);
  };
}

// What a rank tells the others about its node's plan: its node's ranks in ring
// order and the link model inside the node ("r,r,...;latencyUs;GBps;staged;launchUs").
std::string nodeSummary(const std::vector<int>& local, const topology::Plan& plan) {
  std::ostringstream os;
  for (size_t i = 0; i < plan.ring.size(); ++i) os << (i ? "," : "") << local[plan.ring[i]];
  os << ";" << plan.intra.latencyUs << ";" << plan.intra.bandwidthGBps << ";" << (plan.staged ? 1 : 0) << ";"
     << plan.launchUs;
  return os.str();
}

// True when every rank drives a GPU no other rank drives (by bus id, or device
// number, on its host).
bool ownGpus(const std::vector<PeerInfo>& peers) {
  std::set<std::tuple<uint64_t, std::string, int>> gpus;
  for (const PeerInfo& p : peers) {
    if (p.device < 0) return false;
    std::string bus = p.busId[0] ? std::string(p.busId, strnlen(p.busId, sizeof(p.busId))) : std::string();
    if (!gpus.emplace(p.hostHash, bus, bus.empty() ? p.device : -1).second) return false;
  }
  return true;
}

struct NodeSummary {
  std::vector<int> ring;
  algorithms::LinkModel intra;
  bool staged = false;
  double launchUs = 0;
};

NodeSummary parseSummary(const std::string& s, int from) {
  NodeSummary n;
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ';');) parts.push_back(p);
  STRATA_REQUIRE(parts.size() == 5, ncclInternalError, "rank %d sent a malformed node plan '%s'", from, s.c_str());
  std::stringstream ring(parts[0]);
  for (std::string r; std::getline(ring, r, ',');) n.ring.push_back(std::stoi(r));
  n.intra = {std::stod(parts[1]), std::stod(parts[2])};
  n.staged = parts[3] == "1";
  n.launchUs = std::stod(parts[4]);
  return n;
}

// GPUDirect RDMA for a rank whose GPU is `gpu` and NIC `nic` in the topology: when the
// path between them is no worse than NCCL_NET_GDR_LEVEL (default PXB, as NCCL's); where
// the topology places either one not at all, the distance is unknown and it is allowed.
bool gdrAllowed(const topology::System& sys, int gpu, int nic, int rank) {
  topology::PathType level = topology::PathType::kPxb;
  const std::string& want = config().netGdrLevel;
  if (!want.empty() && !topology::parsePathType(want, &level))
    STRATA_WARN(rank, "NCCL_NET_GDR_LEVEL=%s is not a path type (LOC, PIX, PXB, PHB, SYS or 0-5): PXB", want.c_str());
  if (nic < 0 || sys.node(gpu).type != topology::NodeType::kGpu) {
    STRATA_INFO(kSubsysNet, rank, "GPUDirect RDMA: the topology does not place this rank's GPU and NIC; allowed");
    return true;
  }
  topology::PathType path = sys.path(gpu, nic).type;
  bool ok = path <= level;
  STRATA_INFO(kSubsysNet, rank, "GPUDirect RDMA %s: %s to %s is %s (NCCL_NET_GDR_LEVEL %s)", ok ? "allowed" : "off",
              sys.label(gpu).c_str(), sys.label(nic).c_str(), topology::pathTypeName(path),
              topology::pathTypeName(level));
  return ok;
}

}  // namespace

PeerInfo Communicator::describeSelf(int rank, const CommOptions& opts, std::shared_ptr<Doorbell>* bell) {
  static std::once_flag sweep;
  std::call_once(sweep, removeStaleSegments);
  STRATA_REQUIRE(!*mutationProblem(), ncclInvalidUsage, "rank %d: %s", rank, mutationProblem());
  if (activeMutation() != Mutation::kNone)
    STRATA_WARN(rank, "STRATA_MUTATION=%s: a deliberate fault is active (the tests' mutation stage)",
                mutationName(activeMutation()));
  PeerInfo self;
  self.rank = rank;
  self.pid = getpid();
  self.device = opts.device;
  copyString(self.busId, sizeof(self.busId), device::gpuBusId(opts.device));
  if (opts.device >= 0) self.kernelBlocks = device::kernelBlocksAtOnce(opts.device);
  if (opts.device >= 0) self.pipeChannels = device::pipeChannels(opts.device);
  copyString(self.netName, sizeof(self.netName), opts.netName.empty() ? config().netName : opts.netName);
  hashSettings(agreedSettings(opts), &self);
  self.hostHash = hostIdentity(nullptr);
  self.processHash = processIdentity();
  self.machineHash = machineIdentity();
  self.listenAddr = PostOffice::instance().address();
  self.numaNode = topology::currentNumaNode();
  auto topo = topology::localTopology(config().topoFile);  // throws for a bad NCCL_TOPO_FILE
  int cpu = topology::cpuForNuma(topo->sys, self.numaNode);
  // The NIC nearest this rank's GPU (else its NUMA node), in the file or as discovered:
  // the network device its connections use. Equally near ones go to consecutive ranks.
  int near = topology::rankDevices(topo->sys, {self.busId}, {self.numaNode}).front();
  std::vector<int> nics = topology::nearestNets(topo->sys, near);
  int nic = nics.empty() ? -1 : nics[rank % nics.size()];
  if (nic >= 0) {
    topology::RailId id = topology::railIdentity(topo->sys, nic);
    copyString(self.railName, sizeof(self.railName), id.name);
    copyString(self.railBusId, sizeof(self.railBusId), id.busId);
    self.railPort = id.port;
  }
  self.gdr = self.device >= 0 && gdrAllowed(topo->sys, near, nic, rank);
  std::vector<int> rails = topo->fromFile ? topology::nearestNets(topo->sys, cpu) : std::vector<int>{};
  if (config().netGBps > 0) {
    self.netGBps = config().netGBps;
  } else if (!rails.empty()) {
    // The file describes this node's NICs: equally near ones are spread over consecutive ranks.
    self.rail = rails[rank % rails.size()];
    self.netGBps = topology::railTo(topo->sys, cpu, self.rail).second;
  } else if (double gbps = transport::networkGBps(self.netName); gbps > 0) {
    self.netGBps = gbps;  // the network a transport brings (an NCCL net plugin's device)
  } else {
    std::string ifname;
    chooseInterfaceAddress(config().socketIfname, &ifname);
    self.netGBps = interfaceSpeedGBps(ifname);
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  copyString(self.hostname, sizeof(self.hostname), host);
  *bell = Doorbell::create();
  copyString(self.bellName, sizeof(self.bellName), (*bell)->name());
  return self;
}

std::unique_ptr<Communicator> Communicator::fromRoot(const std::vector<UniqueIdLayout>& ids, int nranks, int rank,
                                                     const CommOptions& opts, const AbortSignal* aborted) {
  std::unique_ptr<Communicator> comm(new Communicator());
  PeerInfo self = describeSelf(rank, opts, &comm->bell_);
  std::vector<PeerInfo> peers = rendezvous(ids, nranks, self);
  std::vector<SockAddr> addrs;
  for (const PeerInfo& p : peers) addrs.push_back(p.listenAddr);
  WaitCheck check = abortCheck(aborted, rank);
  comm->setup(std::move(peers), std::make_unique<Bootstrap>(ids[0].magic, rank, std::move(addrs), check), opts);
  comm->bootstrap_->setCheck({});  // from now on stop() ends its waits, with the reason
  return comm;
}

std::unique_ptr<Communicator> Communicator::fromParent(uint64_t magic, int rank, std::vector<SockAddr> addrs,
                                                       const CommOptions& opts, const AbortSignal* aborted,
                                                       std::vector<Bootstrap::Kin> kin, WaitCheck parentCheck) {
  std::unique_ptr<Communicator> comm(new Communicator());
  PeerInfo self = describeSelf(rank, opts, &comm->bell_);
  WaitCheck own = abortCheck(aborted, rank);
  WaitCheck during = [own = std::move(own), parentCheck] {
    own();
    if (parentCheck) parentCheck();
  };
  auto bootstrap = std::make_unique<Bootstrap>(magic, rank, std::move(addrs), during);
  for (const Bootstrap::Kin& k : kin) bootstrap->addKin(k);
  std::string mine(reinterpret_cast<const char*>(&self), sizeof(self));
  std::vector<PeerInfo> peers;
  for (const std::string& blob : bootstrap->allGather(mine)) {
    PeerInfo p;
    STRATA_REQUIRE(blob.size() == sizeof(p), ncclInternalError, "rank %d: peer info of %zu bytes", rank, blob.size());
    memcpy(static_cast<void*>(&p), blob.data(), sizeof(p));
    peers.push_back(p);
  }
  comm->setup(std::move(peers), std::move(bootstrap), opts);
  comm->bootstrap_->setCheck({});  // from now on stop() ends its waits; the parent may go away
  return comm;
}

std::vector<Bootstrap::Kin> Communicator::adoptChild(uint64_t childMagic, int childRank) {
  bootstrap_->addKin({childMagic, childRank});
  std::vector<Bootstrap::Kin> kin = bootstrap_->kin();
  kin.back() = {magic(), rank()};  // the child's kin: this communicator and its other kin, not the child itself
  return kin;
}

void Communicator::setup(std::vector<PeerInfo> peers, std::unique_ptr<Bootstrap> bootstrap, const CommOptions& opts) {
  peers_ = std::move(peers);
  bootstrap_ = std::move(bootstrap);
  bootstrap_->setStopSignal(&stopEpoch_, [this] { return stopReason(); });
  opts_ = opts;
  layout_.rank = bootstrap_->rank();
  layout_.nranks = static_cast<int>(peers_.size());
  chooseStaging(opts);
  checkNetworkAgreed();
  checkSettingsAgreed(peers_, rank(), agreedSettings(opts));
  int machineRanks = 0;
  for (const PeerInfo& p : peers_) machineRanks += p.machineHash == peers_[rank()].machineHash ? 1 : 0;
  oversubscribed_ = machineRanks > sysconf(_SC_NPROCESSORS_ONLN);
  redops_ = std::make_unique<RedOpTable>(rank(), nranks());
  pool_ = std::make_unique<ConnectionPool>(rank(), &peers_, bootstrap_.get(), LinkShape{slotBytes_, slots_},
                                           [this] { failIfStopped(); });
  planNodes();
  reportTopology();
  warmUp();
  bootstrap_->barrier();  // every rank's connections are up before anyone returns
  STRATA_INFO(kSubsysInit, rank(), "comm %s commId 0x%016llx rank %d nranks %d pid %d - %d channel(s) of %d x %zu B slots%s%s",
              opts_.name.empty() ? "-" : opts_.name.c_str(), static_cast<unsigned long long>(magic()), rank(), nranks(),
              getpid(), numChannels(), slots_, slotBytes_, nranks() > 1 ? ", ring via " : "",
              nranks() > 1 ? pool_->transportTo(layout_.ringNext()) : "");
}

// Every rank of a communicator must ask for the same network between nodes, or the
// two ends of a connection would speak different networks. All ranks see the same
// table, so all of them fail here alike.
void Communicator::checkNetworkAgreed() const {
  for (const PeerInfo& p : peers_)
    STRATA_REQUIRE(strcasecmp(p.netName, peers_[0].netName) == 0, ncclInvalidUsage,
                   "rank %d: the ranks disagree on the network between nodes: rank 0 asks for \"%s\", rank %d for "
                   "\"%s\" (ncclConfig_t.netName and NCCL_NET must be alike on every rank)",
                   rank(), peers_[0].netName, p.rank, p.netName);
}

void Communicator::chooseStaging(const CommOptions& opts) {
  const Config& cfg = config();
  StagingShape shape = stagingShape(cfg);
  slots_ = shape.slots;
  slotBytes_ = shape.slotBytes;
  channels_ = channelCount(cfg, opts);
}

// Each rank plans its own node with topology::planNode, as strata-topo does; the
// ranks exchange their nodes' ring orders and link models, so every rank builds
// the same layout and tuner inputs (the slowest node's link model counts).
void Communicator::planNodes() {
  const Config& cfg = config();
  std::vector<uint64_t> hosts;
  for (const PeerInfo& p : peers_) hosts.push_back(p.hostHash);
  algorithms::RankLayout byRank = algorithms::RankLayout::make(rank(), hosts);
  const std::vector<int>& local = byRank.nodeRanks(byRank.node());
  auto topo = topology::localTopology(cfg.topoFile);
  topology::PlanOptions po;
  po.ranksPerNode = static_cast<int>(local.size());
  po.threads = std::all_of(local.begin(), local.end(), [&](int r) { return peers_[r].sameProcess(peers_[rank()]); });
  po.oversubscribed = oversubscribed_;
  po.p2pDisable = cfg.p2pDisable;
  if (!cfg.p2pLevel.empty()) topology::parsePathType(cfg.p2pLevel, &po.p2pLevel);
  std::vector<std::string> busIds;
  std::vector<int> numas;
  for (int r : local) {
    busIds.push_back(peers_[r].busId);
    numas.push_back(peers_[r].numaNode);
  }
  po.rankDevices = topology::rankDevices(topo->sys, busIds, numas);
  plan_ = topology::planNode(topo->sys, po);
  // Every rank of a node plans it alike; its first rank's summary speaks for it (the
  // others send none, so the exchange grows with the ranks, not with their square).
  std::vector<std::string> all = bootstrap_->allGather(rank() == local[0] ? nodeSummary(local, plan_) : std::string());
  std::vector<NodeSummary> nodes;
  for (int k = 0; k < byRank.numNodes(); ++k) nodes.push_back(parseSummary(all[byRank.nodeRanks(k)[0]], byRank.nodeRanks(k)[0]));
  layout_ = algorithms::RankLayout::make(rank(), hosts, [&](int k, const std::vector<int>&) { return nodes[k].ring; });

  algorithms::TuneRequest& b = tuneBasis_;
  b.nranks = nranks();
  b.nodes = layout_.numNodes();
  b.ranksPerNode = layout_.ranksPerNode();
  b.intra = nodes[0].intra;
  b.launchUs = 0;
  bool staged = false;
  for (const NodeSummary& n : nodes) {
    b.intra.latencyUs = std::max(b.intra.latencyUs, n.intra.latencyUs);
    b.intra.bandwidthGBps = std::min(b.intra.bandwidthGBps, n.intra.bandwidthGBps);
    b.launchUs = std::max(b.launchUs, n.launchUs);
    staged |= n.staged;
  }
  if (b.nodes > 1 && oversubscribed_) b.intra.latencyUs = topology::kCrowdedHopUs;
  // The network: every rank must choose alike, so the rate comes from peer info (the slowest node counts).
  std::vector<double> rates;
  std::vector<int> rails;
  for (const PeerInfo& p : peers_) {
    rates.push_back(p.netGBps);
    rails.push_back(p.rail);
  }
  double net = 0;
  for (int k = 0; k < b.nodes; ++k) {
    double rate = algorithms::nodeNetworkGBps(layout_.nodeRanks(k), rates, rails);
    if (rate > 0 && (net == 0 || rate < net)) net = rate;
  }
  b.net = {topology::kSocketHopUs, net > 0 ? net : kDefaultNetGBps};
  b.ownGpus = ownGpus(peers_);
  // Threads of one process on one GPU: one rank's stream can run the others' work (DeviceShared).
  b.oneGpuThreads = !staged && !config().p2pDisable && nranks() > 1;  // P2P off: everything through the host
  for (const PeerInfo& p : peers_)
    if (p.device < 0 || p.device != peers_[0].device || !p.sameProcess(peers_[0])) b.oneGpuThreads = false;
  kernelBlocks_ = peers_[0].kernelBlocks;  // what every rank's GPU holds: the fewest
  for (const PeerInfo& p : peers_) kernelBlocks_ = std::min(kernelBlocks_, p.kernelBlocks);
  pipeChannels_ = peers_[0].pipeChannels;
  for (const PeerInfo& p : peers_) pipeChannels_ = std::min(pipeChannels_, p.pipeChannels);
  b.oneProcess = true;
  for (const PeerInfo& p : peers_) b.oneProcess = b.oneProcess && p.sameProcess(peers_[0]);
  b.sharedMemory = b.nodes == 1 && !staged;
  for (const PeerInfo& p : peers_)
    b.sharedMemory = b.sharedMemory && transport::selectTransport(peers_[rank()], p).has(transport::kSharedRegions);
  // Where transfers start to move one-sided: STRATA_PUT_BYTES; but on one host whose
  // ranks outnumber its cores (every rank of it sees the same), unless that is set,
  // from NCCL_BUFFSIZE. A one-sided transfer needs both ends on a core at once (an
  // exposure waits for its reader, a write for its offer); one that fits in a
  // connection's slots lets the sender go on without the receiver scheduled. The
  // algorithms chosen stay the same (docs/perf.md: 4 processes on 2 cores, 128 KiB-2 MiB).
  putBytes_ = cfg.putBytes;
  if (b.nodes == 1 && oversubscribed_ && !cfg.putBytesSet && cfg.putBytes > 0 && cfg.buffSize > cfg.putBytes) {
    putBytes_ = cfg.buffSize;
    STRATA_INFO(kSubsysTuning, rank(), "more ranks than this host's %ld cores: transfers move one-sided from %zu "
                "bytes (NCCL_BUFFSIZE), not %zu; STRATA_PUT_BYTES chooses", sysconf(_SC_NPROCESSORS_ONLN), putBytes_,
                cfg.putBytes);
  }
  if (b.nodes > 1) {
    STRATA_INFO(kSubsysTuning, rank(), "network: this rank's rate %.3g GB/s (%s); the tuner assumes %.3g GB/s per node",
                peers_[rank()].netGBps,
                cfg.netGBps > 0 ? "STRATA_NET_GBPS" : peers_[rank()].rail >= 0 ? "its rail in NCCL_TOPO_FILE" : "its interface",
                b.net.bandwidthGBps);
    STRATA_INFO(kSubsysInit, rank(), "%d nodes, %s ranks per node; this rank is local rank %d of node %d", b.nodes,
                b.ranksPerNode ? std::to_string(b.ranksPerNode).c_str() : "uneven", layout_.localRank, layout_.node());
  }
  for (const std::string& note : plan_.notes) STRATA_INFO(kSubsysGraph, rank(), "plan: %s", note.c_str());
}

void Communicator::reportTopology() {
  const Config& cfg = config();
  auto topo = topology::localTopology(cfg.topoFile);
  const topology::System& sys = topo->sys;
  const PeerInfo& me = peers_[rank()];
  for (const std::string& w : topo->warnings) STRATA_INFO(kSubsysGraph, rank(), "topology: %s", w.c_str());
  std::string rail = me.rail >= 0 ? format("; rail %s at %.1f GB/s", sys.label(me.rail).c_str(), me.netGBps) : "";
  STRATA_INFO(kSubsysInit, rank(), "topology: %s: %zu CPU(s), %zu GPU(s), %zu NIC port(s); this rank runs on NUMA %d%s",
              topo->source.c_str(), sys.ofType(topology::NodeType::kCpu).size(),
              sys.ofType(topology::NodeType::kGpu).size(), sys.ofType(topology::NodeType::kNet).size(), me.numaNode,
              rail.c_str());
  if (!cfg.topoDumpFile.empty() && rank() == cfg.topoDumpRank) {
    topology::saveXmlFile(cfg.topoDumpFile, sys.xml());
    STRATA_INFO(kSubsysInit, rank(), "topology: written to %s (NCCL_TOPO_DUMP_FILE)", cfg.topoDumpFile.c_str());
  }
}

// Each algorithm opens what it wants at once; one that cannot run here (or, if
// optional, whose links failed to open) is left out, and the ranks agree on it.
void Communicator::warmUp() {
  const auto& all = algorithms::registry();
  uint64_t unavailable = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    CommPlan plan(*this);
    bool can = all[i]->warmUp(plan);
    try {
      if (can) plan.openLinks();
    } catch (const Error& e) {
      if (!all[i]->optional()) throw;
      STRATA_INFO(kSubsysInit, rank(), "%s: not used on this communicator: %s", all[i]->name(), e.what());
      can = false;
    }
    if (!can) unavailable |= uint64_t{1} << i;
  }
  for (const std::string& v : bootstrap_->allGather(std::string(reinterpret_cast<const char*>(&unavailable), 8))) {
    uint64_t theirs = 0;
    memcpy(&theirs, v.data(), std::min<size_t>(v.size(), 8));
    unavailable |= theirs;
  }
  tuneBasis_.unavailable = unavailable;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i]->deviceMemory() || peers_[rank()].device < 0) continue;
    // One that can never be this communicator's choice (its shape does not fit) says nothing.
    if (!all[i]->applies(tuneRequest(Collective::kAllReduce, 1 << 20, true, all[i]->streamOrdered()))) continue;
    if (!(unavailable >> i & 1))
      STRATA_INFO(kSubsysInit, rank(), "%s: device buffers go GPU to GPU (%s)", all[i]->name(),
                  nranks() == 1                ? "one rank: copies on its own GPU"
                  : tuneBasis_.oneGpuThreads ? "every rank on this GPU: rank 0's stream runs each operation"
                                             : pool_->transportTo(layout_.ringNext(), transport::kDeviceMemory));
    else
      STRATA_INFO(kSubsysInit, rank(), "%s: not used; device buffers are staged through host memory (one rank, "
                  "several nodes, or no device-memory transport for every pair: NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, "
                  "the topology)", all[i]->name());
  }
}

}  // namespace strata::core
