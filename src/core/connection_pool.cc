#include "core/connection_pool.h"

#include <atomic>

#include "base/error.h"
#include "base/log.h"

namespace strata::core {
namespace {

uint64_t nextScope() {
  static std::atomic<uint64_t> next{0};
  return ++next;
}

}  // namespace

ConnectionPool::ConnectionPool(int rank, const std::vector<PeerInfo>* peers, Bootstrap* bootstrap, LinkShape defaults,
                               WaitCheck stopped)
    : rank_(rank), scope_(nextScope()), peers_(peers), bootstrap_(bootstrap), defaults_(defaults), stopped_(std::move(stopped)) {}

ConnectionPool::~ConnectionPool() {
  // A peer still waiting for this rank now fails fast instead of timing out; a
  // correct program never waits for a rank that finished all its operations.
  abortAll();
}

LinkShape ConnectionPool::shapeOf(LinkShape s) const {
  if (s.slotBytes == 0) s.slotBytes = defaults_.slotBytes;
  if (s.slots == 0) s.slots = defaults_.slots;
  return s;
}

std::vector<int> ConnectionPool::deviceSharers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {deviceSharers_.begin(), deviceSharers_.end()};
}

void ConnectionPool::unmapPeerRegions() {
  std::map<LinkKey, transport::SharedRegion> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone.swap(regionsOut_);
  }
}

void ConnectionPool::keepDeviceRegions() {
  std::lock_guard<std::mutex> lock(mu_);
  static auto* kept = new std::vector<std::shared_ptr<void>>;  // never freed, on purpose
  static std::mutex keptMutex;
  std::lock_guard<std::mutex> keptLock(keptMutex);
  for (const LinkKey& k : deviceRegionsIn_) kept->push_back(regionsIn_[k].keepAlive);
}

namespace {

// A region the owner could not make still gets a handle, so its peer fails at
// once (with the owner's reason) instead of waiting for it until the timeout. The
// first byte says which: handles are binary (a process hash first), so without it
// one in 256 good handles read as a failure with garbage for a reason.
constexpr char kRegionFailed = 'F', kRegionMade = 'R';

uint32_t regionCapability(const RegionSpec& spec) {
  return spec.device ? transport::kDeviceMemory : transport::kSharedRegions;
}

}  // namespace

void ConnectionPool::listen(const LinkNeeds& recvs, const RegionNeeds& regions) {
  const PeerInfo& self = (*peers_)[rank_];
  int fresh = 0;
  for (const auto& [k, shape] : recvs) {
    if (recvs_.count(k)) continue;  // reads need no lock on the one thread that writes (header)
    const PeerInfo& peer = (*peers_)[k.peer];
    transport::Transport& t = transport::selectTransport(self, peer);
    LinkShape s = shapeOf(shape);
    transport::ConnectRequest req{&self, &peer, s.slotBytes, s.slots};
    std::string handle;
    auto conn = t.listen(req, &handle);
    bootstrap_->send(k.peer, MsgKind::kConnect, k.id, std::string(t.name()) + '\0' + handle);
    std::lock_guard<std::mutex> lock(mu_);
    recvs_[k] = std::move(conn);
    ++fresh;
  }
  for (const auto& [k, spec] : regions) {
    if (regionsIn_.count(k)) continue;  // reads need no lock on the one thread that writes (header)
    const PeerInfo& peer = (*peers_)[k.peer];
    transport::ConnectRequest req{&self, &peer, 0, 0, k.id, scope_};
    std::string handle;
    transport::SharedRegion r;
    try {
      r = transport::selectTransport(self, peer, regionCapability(spec)).regions()->createRegion(req, spec.bytes, &handle);
    } catch (const Error& e) {
      bootstrap_->send(k.peer, MsgKind::kRegion, k.id, kRegionFailed + std::string(e.what()));
      throw;
    }
    bootstrap_->send(k.peer, MsgKind::kRegion, k.id, kRegionMade + handle);
    std::lock_guard<std::mutex> lock(mu_);
    regionsIn_[k] = std::move(r);
    if (spec.device) deviceRegionsIn_.insert(k);
    if (spec.device && !self.sameProcess(peer)) deviceSharers_.insert(k.peer);
  }
  if (fresh) STRATA_INFO(kSubsysP2p, rank_, "links: receiving on %d new link(s)", fresh);
}

void ConnectionPool::connect(const LinkNeeds& sends, const RegionNeeds& regions) {
  const PeerInfo& self = (*peers_)[rank_];
  int fresh = 0;
  for (const auto& [k, shape] : sends) {
    if (sends_.count(k)) continue;  // reads need no lock on the one thread that writes (header)
    std::string msg = bootstrap_->recv(k.peer, MsgKind::kConnect, k.id, stopped_);
    size_t zero = msg.find('\0');
    STRATA_REQUIRE(zero != std::string::npos, ncclInternalError, "rank %d: malformed connection handle from rank %d",
                   rank_, k.peer);
    std::string name = msg.substr(0, zero);
    transport::Transport* chosen = transport::findTransport(name);
    STRATA_REQUIRE(chosen, ncclInvalidUsage,
                   "rank %d: rank %d chose transport '%s', which this rank has disabled (check NCCL_SHM_DISABLE "
                   "is the same on every rank)",
                   rank_, k.peer, name.c_str());
    LinkShape s = shapeOf(shape);
    transport::ConnectRequest req{&self, &(*peers_)[k.peer], s.slotBytes, s.slots};
    auto conn = chosen->connect(req, msg.substr(zero + 1));
    std::lock_guard<std::mutex> lock(mu_);
    sends_[k] = std::move(conn);
    ++fresh;
  }
  for (const auto& [k, spec] : regions) {
    if (regionsOut_.count(k)) continue;  // reads need no lock on the one thread that writes (header)
    const PeerInfo& peer = (*peers_)[k.peer];
    transport::ConnectRequest req{&self, &peer, 0, 0, k.id, scope_};
    std::string handle = bootstrap_->recv(k.peer, MsgKind::kRegion, k.id, stopped_);
    STRATA_REQUIRE(handle.empty() || handle[0] != kRegionFailed, ncclRemoteError, "rank %d: rank %d could not share "
                   "its memory: %s", rank_, k.peer, handle.c_str() + 1);
    STRATA_REQUIRE(!handle.empty() && handle[0] == kRegionMade, ncclInternalError,
                   "rank %d: malformed region handle from rank %d", rank_, k.peer);
    handle.erase(0, 1);
    transport::SharedRegion r =
        transport::selectTransport(self, peer, regionCapability(spec)).regions()->attachRegion(req, handle);
    STRATA_REQUIRE(r.bytes >= spec.bytes, ncclInternalError, "rank %d: rank %d's region is %zu bytes, not %zu", rank_,
                   k.peer, r.bytes, spec.bytes);
    std::lock_guard<std::mutex> lock(mu_);
    regionsOut_[k] = std::move(r);
    if (spec.device && !self.sameProcess(peer)) deviceSharers_.insert(k.peer);
  }
  if (fresh) STRATA_INFO(kSubsysP2p, rank_, "links: sending on %d new link(s)", fresh);
}

namespace {

template <typename Map>
auto& lookup(Map& m, const LinkKey& k, const char* what) {
  auto it = m.find(k);
  STRATA_REQUIRE(it != m.end(), ncclInternalError, "no %s to rank %d for link %016llx (it was never opened)", what,
                 k.peer, static_cast<unsigned long long>(k.id));
  return it->second;
}

}  // namespace

transport::SendConnection& ConnectionPool::send(const LinkKey& k) { return *lookup(sends_, k, "send link"); }
transport::RecvConnection& ConnectionPool::recv(const LinkKey& k) { return *lookup(recvs_, k, "receive link"); }
transport::SharedRegion& ConnectionPool::regionIn(const LinkKey& k) { return lookup(regionsIn_, k, "region"); }
transport::SharedRegion& ConnectionPool::regionOut(const LinkKey& k) { return lookup(regionsOut_, k, "region"); }

std::shared_ptr<transport::Registration> ConnectionPool::registration(const LinkKey& k, void* base, size_t bytes) {
  constexpr size_t kRegistrationCache = 64;
  const transport::Transport& t = transport::selectTransport((*peers_)[rank_], (*peers_)[k.peer]);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [handle, regs] : pinned_)
    for (CachedRegistration& c : regs)
      if (c.transport == &t && c.reg->covers(base, bytes)) return c.reg;
  for (auto it = registrations_.begin(); it != registrations_.end(); ++it)
    if (it->transport == &t && it->reg->live() && it->reg->covers(base, bytes)) {
      CachedRegistration hit = *it;  // most recently used moves to the back
      registrations_.erase(it);
      registrations_.push_back(hit);
      return hit.reg;
    }
  auto reg = const_cast<transport::Transport&>(t).registerMemory(base, bytes);
  STRATA_REQUIRE(reg, ncclInternalError, "transport %s has no one-sided writes to register memory for", t.name());
  ++registrationsMade_;
  if (registrations_.size() == kRegistrationCache) registrations_.erase(registrations_.begin());
  registrations_.push_back({&t, base, bytes, reg});
  return reg;
}

void* ConnectionPool::registerBuffer(void* base, size_t bytes) {
  std::vector<CachedRegistration> regs;
  for (size_t p = 0; p < peers_->size(); ++p) {
    if (static_cast<int>(p) == rank_) continue;
    transport::Transport& t = transport::selectTransport((*peers_)[rank_], (*peers_)[p]);
    bool known = false;
    for (const CachedRegistration& c : regs) known |= c.transport == &t;
    if (known || !t.has(transport::kPut)) continue;
    regs.push_back({&t, base, bytes, t.registerMemory(base, bytes)});
    regs.back().reg->persist();
    ++registrationsMade_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  void* handle = reinterpret_cast<void*>(nextHandle_++);
  pinned_[handle] = std::move(regs);
  return handle;
}

void ConnectionPool::deregisterBuffer(void* handle, const char* fn) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pinned_.find(handle);
  STRATA_REQUIRE(it != pinned_.end(), ncclInvalidArgument,
                 "%s: rank %d: handle %p was not registered on this communicator (or was already deregistered)", fn,
                 rank_, handle);
  for (CachedRegistration& c : it->second) c.reg->deregister();
  pinned_.erase(it);
}

bool ConnectionPool::flushed() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [k, c] : sends_)
    if (!c->flushed()) return false;
  return true;
}

void ConnectionPool::abortAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [k, c] : sends_) c->abort();
  for (auto& [k, c] : recvs_) c->abort();
}

const char* ConnectionPool::transportTo(int peer, uint32_t caps) const {
  return transport::selectTransport((*peers_)[rank_], (*peers_)[peer], caps).name();
}

}  // namespace strata::core
