#include "core/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "base/shm_segment.h"
#include "core/device_direct.h"
#include "device/gpu.h"
#include "topology/local.h"
#include "topology/planner.h"

namespace strata::core {
namespace {

constexpr uint64_t kMeshConnection = 2ull << 32;  // and of the one-shot mesh link
// The mesh carries small messages only: a few small slots keep n-1 of them cheap.
constexpr size_t kMeshSlotBytes = 64 << 10;
constexpr int kMeshSlots = 4;
constexpr uint64_t kLlRegion = 3ull << 32;  // connection id of the LL region
constexpr size_t kLlRegionBytes = 2 * kLlWordsPerSlot * sizeof(uint64_t);
// The network as the tuner sees it: one hop of a small message between two
// namespaces of the test VMs (socket transport, measured; docs/design.md), and a
// rate for interfaces that report none.
constexpr double kNetHopUs = 30.0;
constexpr double kDefaultNetGBps = 1.25;
constexpr double kCrowdedHopUs = 20.0;

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

}  // namespace

PeerInfo Communicator::describeSelf(int rank, const CommOptions& opts, std::shared_ptr<Doorbell>* bell) {
  static std::once_flag sweep;
  std::call_once(sweep, removeStaleSegments);
  PeerInfo self;
  self.rank = rank;
  self.pid = getpid();
  self.device = opts.device;
  copyString(self.busId, sizeof(self.busId), device::gpuBusId(opts.device));
  self.hostHash = hostIdentity(nullptr);
  self.processHash = processIdentity();
  self.machineHash = machineIdentity();
  self.listenAddr = PostOffice::instance().address();
  self.numaNode = topology::currentNumaNode();
  auto topo = topology::localTopology(config().topoFile);  // throws for a bad NCCL_TOPO_FILE
  int cpu = topology::cpuForNuma(topo->sys, self.numaNode);
  std::vector<int> rails = topo->fromFile ? topology::nearestNets(topo->sys, cpu) : std::vector<int>{};
  if (config().netGBps > 0) {
    self.netGBps = config().netGBps;
  } else if (!rails.empty()) {
    // The file describes this node's NICs: equally near ones are spread over consecutive ranks.
    self.rail = rails[rank % rails.size()];
    self.netGBps = topology::railTo(topo->sys, cpu, self.rail).second;
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
                                                       WaitCheck parentCheck) {
  std::unique_ptr<Communicator> comm(new Communicator());
  PeerInfo self = describeSelf(rank, opts, &comm->bell_);
  WaitCheck own = abortCheck(aborted, rank);
  WaitCheck during = [own = std::move(own), parentCheck] {
    own();
    if (parentCheck) parentCheck();
  };
  auto bootstrap = std::make_unique<Bootstrap>(magic, rank, std::move(addrs), during);
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

void Communicator::setup(std::vector<PeerInfo> peers, std::unique_ptr<Bootstrap> bootstrap, const CommOptions& opts) {
  const Config& cfg = config();
  peers_ = std::move(peers);
  bootstrap_ = std::move(bootstrap);
  bootstrap_->setStopSignal(&stopEpoch_, [this] { return stopReason(); });
  opts_ = opts;
  rank_ = bootstrap_->rank();
  slots_ = std::min(cfg.slots, 64);
  slotBytes_ = std::max<size_t>(4096, (cfg.buffSize / slots_) & ~size_t{63});
  int nch = cfg.maxChannels;
  if (opts.maxChannels > 0) nch = std::min(nch, opts.maxChannels);
  if (opts.minChannels > 0) nch = std::max(nch, opts.minChannels);
  nch = std::max(1, std::min(nch, 64));
  if (nranks() > 1) channels_.resize(nch);
  int localRanks = 0, machineRanks = 0;
  for (const PeerInfo& p : peers_) {
    localRanks += p.sameHost(peers_[rank_]) ? 1 : 0;
    machineRanks += p.machineHash == peers_[rank_].machineHash ? 1 : 0;
  }
  oversubscribed_ = machineRanks > sysconf(_SC_NPROCESSORS_ONLN);
  sharedMemory_ = localRanks == nranks();
  mapNodes();
  reportTopology();
  for (const PeerInfo& p : peers_)
    sharedMemory_ = sharedMemory_ && transport::selectTransport(peers_[rank_], p).sharesMemory();
  connectRing();
  device_direct::setup(*this);  // collective: maps the ranks' GPU staging when they may talk directly
  bootstrap_->barrier();  // every rank's connections are up before anyone returns
  STRATA_INFO(kSubsysInit, rank_, "comm %s commId 0x%016llx rank %d nranks %d pid %d - %d channel(s) of %d x %zu B slots%s%s",
              opts_.name.empty() ? "-" : opts_.name.c_str(), static_cast<unsigned long long>(magic()), rank_, nranks(),
              getpid(), numChannels(), slots_,
              slotBytes_, nranks() > 1 ? ", ring via " : "",
              nranks() > 1 ? transport::selectTransport(peers_[rank_], peers_[ringOrder_[(ringPos_[rank_] + 1) % nranks()]]).name() : "");
}

void Communicator::mapNodes() {
  int n = nranks();
  nodeOf_.assign(n, -1);
  for (int r = 0; r < n; ++r) {
    if (nodeOf_[r] >= 0) continue;
    nodes_.emplace_back();
    for (int s = r; s < n; ++s)
      if (peers_[s].sameHost(peers_[r])) {
        nodeOf_[s] = static_cast<int>(nodes_.size()) - 1;
        nodes_.back().push_back(s);
      }
  }
  ringPos_.assign(n, 0);
  for (const std::vector<int>& node : nodes_)
    for (int r : ringOrderInNode(node, peers_)) {
      ringPos_[r] = static_cast<int>(ringOrder_.size());
      ringOrder_.push_back(r);
    }
  // Every rank must choose alike, so this comes from peer info only: the slowest node counts.
  netGBps_ = 0;
  for (const std::vector<int>& node : nodes_) {
    double rate = nodeNetGBps(node, peers_);
    if (rate > 0 && (netGBps_ == 0 || rate < netGBps_)) netGBps_ = rate;
  }
  if (netGBps_ == 0) netGBps_ = kDefaultNetGBps;
  if (numNodes() > 1)
    STRATA_INFO(kSubsysTuning, rank_, "network: this rank's rate %.3g GB/s (%s); the tuner assumes %.3g GB/s per node",
                peers_[rank_].netGBps,
                config().netGBps > 0 ? "STRATA_NET_GBPS" : peers_[rank_].rail >= 0 ? "its rail in NCCL_TOPO_FILE" : "its interface",
                netGBps_);
  const std::vector<int>& mine = nodes_[nodeOf_[rank_]];
  localRank_ = static_cast<int>(std::find(mine.begin(), mine.end(), rank_) - mine.begin());
  if (numNodes() > 1)
    STRATA_INFO(kSubsysInit, rank_, "%d nodes, %s ranks per node; this rank is local rank %d of node %d", numNodes(),
                ranksPerNode() ? std::to_string(ranksPerNode()).c_str() : "uneven", localRank_, nodeOf_[rank_]);
}

void Communicator::reportTopology() {
  const Config& cfg = config();
  auto topo = topology::localTopology(cfg.topoFile);
  const topology::System& sys = topo->sys;
  const PeerInfo& me = peers_[rank_];
  for (const std::string& w : topo->warnings) STRATA_INFO(kSubsysGraph, rank_, "topology: %s", w.c_str());
  std::string rail = me.rail >= 0 ? format("; rail %s at %.1f GB/s", sys.label(me.rail).c_str(), me.netGBps) : "";
  STRATA_INFO(kSubsysInit, rank_, "topology: %s: %zu CPU(s), %zu GPU(s), %zu NIC port(s); this rank runs on NUMA %d%s",
              topo->source.c_str(), sys.ofType(topology::NodeType::kCpu).size(),
              sys.ofType(topology::NodeType::kGpu).size(), sys.ofType(topology::NodeType::kNet).size(), me.numaNode,
              rail.c_str());
  if (!cfg.topoDumpFile.empty() && rank_ == cfg.topoDumpRank) {
    topology::saveXmlFile(cfg.topoDumpFile, sys.xml());
    STRATA_INFO(kSubsysInit, rank_, "topology: written to %s (NCCL_TOPO_DUMP_FILE)", cfg.topoDumpFile.c_str());
  }
}

std::vector<int> ringOrderInNode(const std::vector<int>& node, const std::vector<PeerInfo>& peers) {
  std::vector<int> order = node;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return peers[a].numaNode < peers[b].numaNode; });
  return order;
}

double nodeNetGBps(const std::vector<int>& node, const std::vector<PeerInfo>& peers) {
  std::map<int, double> rails;  // rail -> its slowest user's rate; -1: the one socket interface
  for (int r : node) {
    double v = peers[r].netGBps;
    if (v <= 0) continue;
    auto [it, fresh] = rails.emplace(peers[r].rail, v);
    if (!fresh) it->second = std::min(it->second, v);
  }
  double sum = 0;
  for (const auto& [rail, rate] : rails) sum += rate;
  return sum;
}

int Communicator::ranksPerNode() const {
  for (const std::vector<int>& node : nodes_)
    if (node.size() != nodes_[0].size()) return 0;
  return static_cast<int>(nodes_[0].size());
}

void Communicator::connectRing() {
  if (channels_.empty()) return;
  int n = nranks(), pos = ringPos_[rank_];
  int prev = ringOrder_[(pos + n - 1) % n], next = ringOrder_[(pos + 1) % n];
  std::vector<std::pair<int, uint64_t>> recvFrom, sendTo;
  for (int c = 0; c < numChannels(); ++c) {
    recvFrom.push_back({prev, static_cast<uint64_t>(c)});
    sendTo.push_back({next, static_cast<uint64_t>(c)});
  }
  std::vector<std::unique_ptr<transport::RecvConnection>> recvs;
  std::vector<std::unique_ptr<transport::SendConnection>> sends;
  connect(recvFrom, sendTo, &recvs, &sends, slotBytes_, slots_);
  for (int c = 0; c < numChannels(); ++c) {
    channels_[c].fromPrev = std::move(recvs[c]);
    channels_[c].toNext = std::move(sends[c]);
  }
}

void Communicator::connect(const std::vector<std::pair<int, uint64_t>>& recvFrom,
                           const std::vector<std::pair<int, uint64_t>>& sendTo,
                           std::vector<std::unique_ptr<transport::RecvConnection>>* recvs,
                           std::vector<std::unique_ptr<transport::SendConnection>>* sends, size_t slotBytes,
                           int slots) {
  const PeerInfo& self = peers_[rank_];
  for (auto [peer, id] : recvFrom) {
    transport::Transport& t = transport::selectTransport(self, peers_[peer]);
    transport::ConnectRequest req{&self, &peers_[peer], slotBytes, slots};
    std::string handle;
    recvs->push_back(t.listen(req, &handle));
    bootstrap_->send(peer, MsgKind::kConnect, id, std::string(t.name()) + '\0' + handle);
    STRATA_TRACE(kSubsysInit, rank_, "connection %llu from rank %d via %s", static_cast<unsigned long long>(id), peer,
                 t.name());
  }
  for (auto [peer, id] : sendTo) {
    std::string msg = bootstrap_->recv(peer, MsgKind::kConnect, id, [this] { failIfStopped(); });
    size_t zero = msg.find('\0');
    STRATA_REQUIRE(zero != std::string::npos, ncclInternalError, "rank %d: malformed connection handle", rank_);
    std::string name = msg.substr(0, zero);
    transport::Transport* chosen = nullptr;
    for (transport::Transport* t : transport::transports())
      if (name == t->name()) chosen = t;
    STRATA_REQUIRE(chosen, ncclInvalidUsage,
                   "rank %d: rank %d chose transport '%s', which this rank has disabled (check NCCL_SHM_DISABLE "
                   "is the same on every rank)",
                   rank_, peer, name.c_str());
    transport::ConnectRequest req{&self, &peers_[peer], slotBytes, slots};
    sends->push_back(chosen->connect(req, msg.substr(zero + 1)));
  }
}

void Communicator::listenLinks(const std::set<LinkKey>& recvFrom) {
  std::vector<LinkKey> fresh;
  for (const LinkKey& k : recvFrom)
    if (!linkRecv_.count(k)) fresh.push_back(k);
  if (fresh.empty()) return;
  std::vector<std::unique_ptr<transport::RecvConnection>> recvs;
  std::vector<std::unique_ptr<transport::SendConnection>> none;
  connect(fresh, {}, &recvs, &none, slotBytes_, slots_);
  for (size_t i = 0; i < fresh.size(); ++i) linkRecv_[fresh[i]] = std::move(recvs[i]);
  STRATA_INFO(kSubsysP2p, rank_, "links: receiving on %zu new link(s)", fresh.size());
}

void Communicator::connectLinks(const std::set<LinkKey>& sendTo) {
  std::vector<LinkKey> fresh;
  for (const LinkKey& k : sendTo)
    if (!linkSend_.count(k)) fresh.push_back(k);
  if (fresh.empty()) return;
  std::vector<std::unique_ptr<transport::RecvConnection>> none;
  std::vector<std::unique_ptr<transport::SendConnection>> sends;
  connect({}, fresh, &none, &sends, slotBytes_, slots_);
  for (size_t i = 0; i < fresh.size(); ++i) linkSend_[fresh[i]] = std::move(sends[i]);
  STRATA_INFO(kSubsysP2p, rank_, "links: sending on %zu new link(s)", fresh.size());
}

Communicator::LeaderMesh& Communicator::leaderMesh() {
  if (leaders_.scratch.empty()) {
    leaders_.sends.assign(numNodes(), nullptr);
    leaders_.recvs.assign(numNodes(), nullptr);
    for (int k = 0; k < numNodes(); ++k) {
      if (k == nodeOf(rank_)) continue;
      leaders_.sends[k] = &linkSend({nodes_[k][0], kLeaderLink});
      leaders_.recvs[k] = &linkRecv({nodes_[k][0], kLeaderLink});
    }
    leaders_.scratch.resize(slotBytes_);
  }
  return leaders_;
}

std::vector<std::pair<int, uint64_t>> Communicator::everyPeer(uint64_t connection) const {
  std::vector<std::pair<int, uint64_t>> v;
  for (int p = 0; p < nranks(); ++p)
    if (p != rank_) v.push_back({p, connection});
  return v;
}

void Communicator::listenMesh() {
  if (!meshRecv_.empty()) return;
  std::vector<std::pair<int, uint64_t>> recvFrom = everyPeer(kMeshConnection);
  std::vector<std::unique_ptr<transport::RecvConnection>> recvs;
  std::vector<std::unique_ptr<transport::SendConnection>> none;
  connect(recvFrom, {}, &recvs, &none, kMeshSlotBytes, kMeshSlots);
  meshRecv_.resize(nranks());
  for (size_t i = 0; i < recvFrom.size(); ++i) meshRecv_[recvFrom[i].first] = std::move(recvs[i]);
  for (const auto& c : meshRecv_) meshRecvPtrs_.push_back(c.get());
  if (!sharedMemory_) return;
  ll_.in.assign(nranks(), nullptr);
  for (auto [p, id] : everyPeer(kLlRegion)) {
    transport::ConnectRequest req{&peers_[rank_], &peers_[p], 0, 0};
    std::string handle;
    transport::Transport& t = transport::selectTransport(peers_[rank_], peers_[p]);
    llRegions_.push_back(t.createRegion(req, kLlRegionBytes, &handle));
    ll_.in[p] = static_cast<const uint64_t*>(llRegions_.back().data);
    bootstrap_->send(p, MsgKind::kConnect, id, handle);
  }
}

void Communicator::connectMesh() {
  if (!meshSend_.empty()) return;
  std::vector<std::pair<int, uint64_t>> sendTo = everyPeer(kMeshConnection);
  std::vector<std::unique_ptr<transport::RecvConnection>> none;
  std::vector<std::unique_ptr<transport::SendConnection>> sends;
  connect({}, sendTo, &none, &sends, kMeshSlotBytes, kMeshSlots);
  meshSend_.resize(nranks());
  for (size_t i = 0; i < sendTo.size(); ++i) meshSend_[sendTo[i].first] = std::move(sends[i]);
  for (const auto& c : meshSend_) meshSendPtrs_.push_back(c.get());
  meshScratch_.resize(kMeshSlotBytes);
  if (sharedMemory_) {
    ll_.out.assign(nranks(), nullptr);
    ll_.outBells.assign(nranks(), nullptr);
    ll_.staging.assign(nranks() * kLlWordsPerSlot * 4, 0);
    for (auto [p, id] : everyPeer(kLlRegion)) {
      transport::ConnectRequest req{&peers_[rank_], &peers_[p], 0, 0};
      std::string handle = bootstrap_->recv(p, MsgKind::kConnect, id, [this] { failIfStopped(); });
      llRegions_.push_back(transport::selectTransport(peers_[rank_], peers_[p]).attachRegion(req, handle));
      ll_.out[p] = static_cast<uint64_t*>(llRegions_.back().data);
      ll_.outBells[p] = llRegions_.back().peerBell.get();
    }
  }
  STRATA_INFO(kSubsysInit, rank_, "one-shot mesh: connected to %d peer(s), %d x %zu B slots each", nranks() - 1,
              kMeshSlots, kMeshSlotBytes);
}

algorithms::Choice Communicator::choose(algorithms::Collective coll, size_t bytes) {
  const Config& cfg = config();
  CachedChoice& c = choices_[(bytes * 31 + static_cast<size_t>(coll)) % choices_.size()];
  if (c.config != &cfg || c.coll != coll || c.bytes != bytes) {
    c.choice = algorithms::choose(tuneRequest(coll, bytes), cfg.algo, cfg.proto);  // throws before caching
    STRATA_INFO(kSubsysTuning, rank_, "%s: %zu bytes on %d ranks (%d node(s)) -> %s/%s, estimated %.1f us",
                algorithms::collectiveName(coll), bytes, nranks(), numNodes(), c.choice.algorithm,
                c.choice.protocol, c.choice.estimatedUs);
    c.config = &cfg;
    c.coll = coll;
    c.bytes = bytes;
  }
  return c.choice;
}

algorithms::TuneRequest Communicator::tuneRequest(algorithms::Collective coll, size_t bytes) const {
  algorithms::TuneRequest req;
  req.coll = coll;
  req.bytes = bytes;
  req.nranks = nranks();
  req.nodes = numNodes();
  req.ranksPerNode = ranksPerNode();
  req.sharedMemory = sharedMemory_;
  // Staged copies cost a write into the slot and a read out of it; figures measured
  // on the 2-core test VMs (docs/design.md has the numbers).
  bool sameProcess = nranks() > 1 && peers_[0].sameProcess(peers_[nranks() - 1]);
  req.intra = sameProcess ? algorithms::LinkModel{0.5, 6.0} : algorithms::LinkModel{1.0, 5.0};
  req.net = algorithms::LinkModel{kNetHopUs, netGBps_};
  // Across nodes with more ranks than cores, a hop inside a node waits for the
  // scheduler too (fitted on the 4 x 2 test bed: docs/design.md).
  if (numNodes() > 1 && oversubscribed_) req.intra.latencyUs = kCrowdedHopUs;
  return req;
}

bool Communicator::sendsFlushed() {
  for (Channel& ch : channels_)
    if (ch.toNext && !ch.toNext->flushed()) return false;
  for (auto& [key, c] : linkSend_)
    if (!c->flushed()) return false;
  for (auto& c : meshSend_)
    if (c && !c->flushed()) return false;
  return true;
}

void Communicator::abortConnections() {
  for (Channel& ch : channels_) {
    if (ch.toNext) ch.toNext->abort();
    if (ch.fromPrev) ch.fromPrev->abort();
  }
  for (auto& [key, c] : linkSend_) c->abort();
  for (auto& [key, c] : linkRecv_) c->abort();
  for (auto& c : meshSend_)
    if (c) c->abort();
  for (auto& c : meshRecv_)
    if (c) c->abort();
}

void Communicator::stop(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(stopMutex_);
    if (stopReason_.empty()) stopReason_ = why;
  }
  abortRequested_.store(true);
  stopEpoch_.fetch_add(1);
  abortConnections();
  if (bell_) bell_->ring();  // a rank asleep in a collective wakes and sees the request
}

void Communicator::failIfStopped() const {
  if (abortRequested_.load())
    fail(ncclInvalidUsage, "rank %d: the communicator was stopped: %s", rank_, stopReason().c_str());
}

std::string Communicator::stopReason() const {
  std::lock_guard<std::mutex> lock(stopMutex_);
  return stopReason_;
}

Communicator::~Communicator() {
  // A peer still waiting for this rank now fails fast instead of timing out; a
  // correct program never waits for a rank that finished all its operations.
  abortConnections();
  if (bootstrap_) PostOffice::instance().discard(bootstrap_->magic(), rank_);
}

}  // namespace strata::core
