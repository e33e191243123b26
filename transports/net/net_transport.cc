#include "transports/net/net_transport.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "device/gpu.h"
#include "transports/net/nccl_net.h"
#include "transports/net/rail.h"

namespace strata::transport::net {
namespace {

void count(std::atomic<uint64_t>& counter, uint64_t n) { counter.fetch_add(n, std::memory_order_relaxed); }

int deviceFor(Network& net, const PeerInfo& self) {
  std::string why;
  int d = railDevice(net, self, &why);
  STRATA_INFO(kSubsysNet, self.rank, "net transport (%s): rank %d uses device %d (%s): %s", net.name().c_str(),
              self.rank, d, net.properties(d).name.c_str(), why.c_str());
  return d;
}

// Aborts within a second of each other share one window of half a second.
std::chrono::steady_clock::time_point abortWindowEnd() {
  static std::mutex mu;
  static std::chrono::steady_clock::time_point end;
  std::lock_guard<std::mutex> lock(mu);
  auto now = std::chrono::steady_clock::now();
  if (now > end + std::chrono::seconds(1)) end = now + std::chrono::milliseconds(500);
  return end;
}

}  // namespace

// What both ends share: the slots in registered memory, the rank's counters, and
// the failure that ends the connection (a network error: the peer is gone). Where
// the network sees each receive's size at the sender (Network::sendSeesReceive),
// a second comm carries one-sided puts: the receiver posts each offer as a receive
// into its own memory, the sender sends each put from the caller's, and the
// network moves the bytes between them (over IB: one RDMA write). Buffers are
// registered for the operation (the network's cache shares overlapping ones; a
// range the user registered stays registered, see NetRegistration).
class NetConnection {
 public:
  NetConnection(const ConnectRequest& req, Network& net, LiveConnections& live)
      : net_(net), live_(live), puts_(net.sendSeesReceive()), slotBytes_(req.slotBytes), slots_(req.slots),
        memory_(slotBytes_ * slots_), sizes_(slots_), requests_(slots_, nullptr), self_(req.self->rank),
        peer_(req.peer->rank) {
    dev_ = deviceFor(net, *req.self);
  }
  // Into the sweep, once the derived object is whole (a sweep calls its virtuals).
  void enlist() {
    std::lock_guard<std::mutex> lock(live_.mu);
    live_.set.insert(this);
    live_.count.fetch_add(1);
  }
  virtual ~NetConnection() { retire(); }
  // From any rank's sweep: moves what the network allows, unless another thread is
  // at it or there is nothing to move off the rank's own calls (see needsSweep).
  void progressIfFree() {
    if (!wanted_.load(std::memory_order_relaxed)) return;
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock() && needsSweep()) progressLocked();
  }

 protected:
  // Out of the sweep: once this returns no other thread is progressing it (a sweep
  // holds live_.mu throughout). The derived destructors call it before closing.
  void retire() {
    std::lock_guard<std::mutex> lock(live_.mu);
    if (live_.set.erase(this)) live_.count.fetch_sub(1);
  }
  // Every call that changes the connection ends here, so wanted_ stays current.
  void progressLocked() {
    if (!failed_) {
      try {
        step();
      } catch (const Error& e) {
        failWith(e);
      }
    }
    wanted_.store(!failed_ && needsSweep(), std::memory_order_relaxed);
  }
  // A peer that closed between messages is done (or gone: the executor tells which
  // from what it still waits for), so that is no warning.
  void failWith(const Error& e) {
    if (dynamic_cast<const PeerClosed*>(&e))
      STRATA_INFO(kSubsysNet, self_, "net transport (%s): rank %d closed the connection: %s", net_.name().c_str(),
                  peer_, e.what());
    else
      STRATA_WARN(self_, "net transport (%s): connection with rank %d failed: %s", net_.name().c_str(), peer_,
                  e.what());
    failed_ = true;
  }
  // A put's buffer: host memory as itself; device memory (GPUDirect RDMA, kDevicePut)
  // as its dma-buf, whose fd stays open until deregPut.
  void* regPut(void* comm, void* p, size_t bytes) {
    count(live_.moved.registrations, 1);
    if (!device::isDevicePointer(p)) return net_.regMr(comm, p, bytes, abi::kPtrHost);
    int fd = -1;
    uint64_t offset = 0;
    std::string why;
    STRATA_REQUIRE(device::exportDmabuf(p, bytes, &fd, &offset, &why), ncclSystemError,
                   "net transport: rank %d cannot hand device memory at %p to %s: %s", self_, p, net_.name().c_str(),
                   why.c_str());
    void* mh = nullptr;
    try {
      mh = net_.regMrDmaBuf(comm, p, bytes, abi::kPtrCuda, offset, fd);
    } catch (...) {
      close(fd);
      throw;
    }
    dmabufFds_[mh] = fd;
    return mh;
  }
  bool onDevice(void* mh) const { return dmabufFds_.count(mh) != 0; }
  void deregPut(void* comm, void* mh) {
    try {
      net_.deregMr(comm, mh);
    } catch (const Error& e) {
      STRATA_INFO(kSubsysNet, self_, "net transport: deregistering a put buffer (rank %d): %s", peer_, e.what());
    }
    auto it = dmabufFds_.find(mh);
    if (it == dmabufFds_.end()) return;
    close(it->second);
    dmabufFds_.erase(it);
  }
  virtual void step() = 0;
  // Under mu_: true while the connection is coming up, or has sends the network has
  // not taken or finished. A receive is moved by the rank that waits on it (tryData)
  // and reposted by release(), as the socket transport does: polling idle receives
  // from every sweep would cost a network call each.
  virtual bool needsSweep() const = 0;
  char* slot(uint64_t m) { return memory_.data() + (m % slots_) * slotBytes_; }
  // Deregisters and closes, ignoring errors (the peer may be gone).
  // `mh`: the slots' registration on it, if any.
  void closeComm(void* comm, void (Network::*close)(void*), void** mh) {
    if (!comm) return;
    try {
      if (mh && *mh) net_.deregMr(comm, *mh);
      (net_.*close)(comm);
    } catch (const Error& e) {
      STRATA_INFO(kSubsysNet, self_, "net transport: closing the connection with rank %d: %s", peer_, e.what());
    }
    if (mh) *mh = nullptr;
  }

  Network& net_;
  LiveConnections& live_;
  bool puts_;  // a second comm carries one-sided puts
  int dev_ = 0;
  size_t slotBytes_;
  int slots_;
  std::vector<char> memory_;
  std::vector<size_t> sizes_;
  std::vector<void*> requests_;
  void* mh_ = nullptr;
  std::map<void*, int> dmabufFds_;  // put registrations of device memory: their dma-bufs
  std::atomic<bool> failed_{false};  // written under mu_, read by peerAborted() without it
  std::atomic<bool> wanted_{true};   // needsSweep() as of the last call: lets sweeps skip idle connections
  int self_, peer_;
  std::mutex mu_;
};

namespace {

class NetSend final : public NetConnection, public SendConnection, public PutSender {
 public:
  NetSend(const ConnectRequest& req, Network& net, LiveConnections& live, const std::string& handle)
      : NetConnection(req, net, live) {
    size_t want = (puts_ ? 2 : 1) * kHandleBytes;
    STRATA_REQUIRE(handle.size() == want, ncclInternalError, "net transport: a handle of %zu bytes, not %zu",
                   handle.size(), want);
    memcpy(handle_, handle.data(), kHandleBytes);
    if (puts_) memcpy(putHandle_, handle.data() + kHandleBytes, kHandleBytes);
  }
  ~NetSend() override {
    retire();
    closeAll();
  }

  void* trySlot() override {
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    return head_ - done_ < static_cast<uint64_t>(slots_) ? slot(head_) : nullptr;
  }
  void post(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[head_ % slots_] = bytes;
    ++head_;
    progressLocked();
  }
  size_t slotBytes() const override { return slotBytes_; }
  // The receiver learns of it from its network, when the connection ends: one not
  // up yet is brought up first, so that there is one to end. The connections that
  // abort together share half a second for that (a stopped receiver never answers).
  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    auto deadline = abortWindowEnd();
    while (!comm_ && std::chrono::steady_clock::now() < deadline) {
      try {
        comm_ = net_.connect(dev_, handle_);
      } catch (const Error&) {
        break;  // the receiver is gone already
      }
      if (!comm_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    closeAll();
  }
  bool peerAborted() const override { return failed_; }
  bool flushed() override {
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    return failed_ || (done_ == head_ && inFlight_.empty());
  }
  PutSender* puts() override { return puts_ ? this : nullptr; }

  // PutSender. The source is registered once per put (kept while the network has
  // no offer yet, so that retries do not register again).
  bool tryPut(const void* src, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    if (!putError_.empty() && !failed_) failWith(Error(ncclRemoteError, putError_));
    if (failed_ || !putComm_) return false;
    try {
      if (!pendingMh_ || pendingSrc_ != src || pendingBytes_ != bytes) {
        if (pendingMh_) deregPut(putComm_, pendingMh_);
        pendingMh_ = nullptr;
        pendingMh_ = regPut(putComm_, const_cast<void*>(src), bytes);
        pendingSrc_ = src;
        pendingBytes_ = bytes;
      }
      void* r = net_.isend(putComm_, const_cast<void*>(src), bytes, 0, pendingMh_);
      if (!r) return false;  // no offer yet
      inFlight_.push_back({r, pendingMh_});
      count(live_.moved.puts, 1);
      count(live_.moved.putBytes, bytes);
      pendingMh_ = nullptr;
      wanted_.store(true, std::memory_order_relaxed);  // sweeps now move it
      return true;
    } catch (const Error& e) {
      if (e.code() == ncclInvalidUsage) throw;  // the caller's mistake (larger than the offer): theirs to see
      failWith(e);
      return false;
    }
  }
  // Progresses the puts in flight (the network may move data only when asked).
  bool putsComplete() const override {
    auto* self = const_cast<NetSend*>(this);
    std::lock_guard<std::mutex> lock(self->mu_);
    self->progressLocked();
    return failed_ || inFlight_.empty();
  }

 private:
  struct InFlight {
    void* request;
    void* mh;
  };
  void closeAll() {
    if (!comm_) net_.cancelConnect(handle_);
    closeComm(comm_, &Network::closeSend, &mh_);
    comm_ = nullptr;
    if (!puts_) return;
    if (!putComm_) net_.cancelConnect(putHandle_);
    if (putComm_) {
      if (pendingMh_) deregPut(putComm_, pendingMh_);
      for (InFlight& f : inFlight_) deregPut(putComm_, f.mh);
      closeComm(putComm_, &Network::closeSend, nullptr);
    }
    pendingMh_ = nullptr;
    inFlight_.clear();
    putComm_ = nullptr;
  }
  bool needsSweep() const override {
    return !comm_ || done_ < head_ || (puts_ && ((!putComm_ && putError_.empty()) || !inFlight_.empty()));
  }
  void step() override {
    if (puts_ && !putComm_ && putError_.empty()) {
      try {
        putComm_ = net_.connect(dev_, putHandle_);
      } catch (const Error& e) {  // the slots still work (a peer that is done may have closed): only puts fail
        putError_ = e.what();
        STRATA_INFO(kSubsysNet, self_, "net transport: no puts to rank %d: %s", peer_, e.what());
      }
    }
    while (!inFlight_.empty() && net_.test(inFlight_.front().request, nullptr)) {
      deregPut(putComm_, inFlight_.front().mh);
      inFlight_.pop_front();
    }
    if (!comm_) {
      comm_ = net_.connect(dev_, handle_);  // the plugin may keep its progress in the handle
      if (!comm_) return;
      mh_ = net_.regMr(comm_, memory_.data(), memory_.size(), abi::kPtrHost);
      count(live_.moved.registrations, 1);
    }
    for (; sent_ < head_; ++sent_) {
      void* r = net_.isend(comm_, slot(sent_), sizes_[sent_ % slots_], 0, mh_);
      if (!r) break;  // the receiver has no receive posted yet
      requests_[sent_ % slots_] = r;
      count(live_.moved.messages, 1);
      count(live_.moved.bytes, sizes_[sent_ % slots_]);
    }
    for (; done_ < sent_; ++done_)
      if (!net_.test(requests_[done_ % slots_], nullptr)) break;
  }

  char handle_[kHandleBytes];
  char putHandle_[kHandleBytes] = {};
  void* comm_ = nullptr;
  void* putComm_ = nullptr;
  uint64_t head_ = 0, sent_ = 0, done_ = 0;  // posted by the rank, handed to the network, completed
  const void* pendingSrc_ = nullptr;  // a put registered, waiting for its offer
  size_t pendingBytes_ = 0;
  void* pendingMh_ = nullptr;
  std::deque<InFlight> inFlight_;  // puts the network took, not yet complete
  std::string putError_;  // why the put comm could not come up
};

class NetRecv final : public NetConnection, public RecvConnection, public PutReceiver {
 public:
  NetRecv(const ConnectRequest& req, Network& net, LiveConnections& live, std::string* handle)
      : NetConnection(req, net, live) {
    char h[kHandleBytes] = {};
    listen_ = net.listen(dev_, h);
    handle->assign(h, kHandleBytes);
    if (!puts_) return;
    memset(h, 0, kHandleBytes);
    putListen_ = net.listen(dev_, h);
    handle->append(h, kHandleBytes);
  }
  ~NetRecv() override {
    retire();
    closeAll();
  }
  PutReceiver* puts() override { return puts_ ? this : nullptr; }

  // PutReceiver: each offer is a receive into the caller's memory, registered for it.
  bool tryOffer(void* dst, size_t bytes, const Registration& reg) override {
    STRATA_REQUIRE(reg.live() && reg.covers(dst, bytes), ncclInvalidUsage,
                   "net transport: rank %d offered %zu bytes at %p outside a live registration", self_, bytes, dst);
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    if (!putError_.empty() && !failed_) failWith(Error(ncclRemoteError, putError_));
    if (failed_ || !putComm_ || offers_.size() >= kMaxOffers) return false;
    void* mh = nullptr;
    try {
      mh = regPut(putComm_, dst, bytes);
      if (void* r = net_.irecv(putComm_, dst, bytes, 0, mh)) {
        offers_.push_back({r, mh, dst, bytes});
        return true;
      }
    } catch (const Error& e) {
      if (mh) deregPut(putComm_, mh);
      if (e.code() == ncclInvalidUsage) throw;
      failWith(e);
      return false;
    }
    deregPut(putComm_, mh);
    return false;
  }
  bool tryPutDone(size_t* bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    if (failed_ || offers_.empty()) return false;
    Offer& o = offers_.front();
    try {
      if (!o.arrived && !net_.test(o.request, &o.got)) return false;
      o.arrived = true;
      // Into device memory: the NIC's writes are made visible to the GPU first.
      if (onDevice(o.mh) && !o.flushed) {
        if (!o.flush && !net_.iflush(putComm_, o.dst, o.got, o.mh, &o.flush)) return false;
        if (o.flush && !net_.test(o.flush, nullptr)) return false;
        o.flushed = true;
      }
    } catch (const Error& e) {
      failWith(e);
      return false;
    }
    *bytes = o.got;
    deregPut(putComm_, o.mh);
    offers_.pop_front();
    return true;
  }

  const void* tryData(size_t* bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    if (arrived_ == consumed_) return nullptr;
    *bytes = sizes_[consumed_ % slots_];
    return slot(consumed_);
  }
  void release() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++consumed_;
    progressLocked();
  }
  // The sender learns of it from its network: the connection, or the listener, closes.
  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    aborted_ = true;
    closeAll();
  }
  // Once the connection failed and the rank has taken every message that came before
  // (a sender that is done closes after its last one; that one is still delivered).
  bool peerAborted() const override {
    if (!failed_) return false;
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
    return aborted_ || arrived_ == consumed_;
  }

 private:
  static constexpr size_t kMaxOffers = 8;
  struct Offer {
    void* request;
    void* mh;
    void* dst;
    size_t bytes;
    size_t got = 0;
    bool arrived = false, flushed = false;
    void* flush = nullptr;  // the network's flush request, once asked
  };
  void closeAll() {
    closeComm(comm_, &Network::closeRecv, &mh_);
    comm_ = nullptr;
    closeListener(&listen_);
    if (putComm_) {
      for (Offer& o : offers_) deregPut(putComm_, o.mh);
      closeComm(putComm_, &Network::closeRecv, nullptr);
    }
    offers_.clear();
    putComm_ = nullptr;
    closeListener(&putListen_);
  }
  void closeListener(void** listener) {
    if (!*listener) return;
    try {
      net_.closeListen(*listener);
    } catch (const Error& e) {
      STRATA_INFO(kSubsysNet, self_, "net transport: closing the listener for rank %d: %s", peer_, e.what());
    }
    *listener = nullptr;
  }
  bool needsSweep() const override { return (!comm_ && listen_) || (!putComm_ && putListen_); }
  void step() override {
    if (!putComm_ && putListen_) {
      try {
        putComm_ = net_.accept(putListen_);
      } catch (const Error& e) {  // the slots still work (a sender that is done may have closed): only puts fail
        putError_ = e.what();
        STRATA_INFO(kSubsysNet, self_, "net transport: no puts from rank %d: %s", peer_, e.what());
        closeListener(&putListen_);
      }
    }
    if (!comm_) {
      if (!listen_) return;
      comm_ = net_.accept(listen_);
      if (!comm_) return;
      mh_ = net_.regMr(comm_, memory_.data(), memory_.size(), abi::kPtrHost);
      count(live_.moved.registrations, 1);
    }
    // What arrived first: a network that has failed since refuses new receives, and
    // what came before the failure must still reach the rank.
    for (; arrived_ < posted_; ++arrived_) {
      size_t n = 0;
      if (!net_.test(requests_[arrived_ % slots_], &n)) break;
      STRATA_REQUIRE(n <= slotBytes_, ncclSystemError, "net transport: %zu bytes arrived in a slot of %zu", n,
                     slotBytes_);
      sizes_[arrived_ % slots_] = n;
    }
    for (; posted_ < consumed_ + slots_; ++posted_) {
      void* r = net_.irecv(comm_, slot(posted_), slotBytes_, 0, mh_);
      if (!r) break;
      requests_[posted_ % slots_] = r;
    }
  }

  void* listen_ = nullptr;
  void* comm_ = nullptr;
  void* putListen_ = nullptr;
  void* putComm_ = nullptr;
  std::deque<Offer> offers_;  // posted, oldest first
  std::string putError_;  // why the put comm could not come up
  uint64_t posted_ = 0, arrived_ = 0, consumed_ = 0;  // receives posted, completed, released by the rank
  bool aborted_ = false;  // by this rank
};

// A range the receiver offers puts into. Offers register for the operation; a
// persisted one (ncclCommRegister) is pinned with the network until deregistered.
class NetRegistration final : public Registration {
 public:
  NetRegistration(void* base, size_t bytes, Network& net) : Registration(base, bytes), net_(net) {}
  ~NetRegistration() override { unpin(); }
  void persist() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pin_) pin_ = net_.pinMemory(base(), bytes());
  }
  void deregister() override {
    unpin();
    Registration::deregister();
  }

 private:
  void unpin() {
    std::lock_guard<std::mutex> lock(mu_);
    if (pin_) net_.unpinMemory(pin_);
    pin_ = nullptr;
  }
  Network& net_;
  std::mutex mu_;
  void* pin_ = nullptr;
};

}  // namespace

uint32_t NetTransport::capabilities() const {
  Network* n = network();
  uint32_t caps = kSlots | kNeedsPolling;
  if (!n || !n->sendSeesReceive()) return caps;
  caps |= kPut;
  // GPUDirect RDMA: the network registers dma-bufs and a GPU here exports them (asked once).
  std::call_once(gdrOnce_, [&] {
    constexpr int kGdr = abi::kPtrCuda | abi::kPtrDmabuf;
    gdr_ = n->devices() > 0 && device::gpuCount() > 0;
    for (int d = 0; d < n->devices(); ++d) gdr_ = gdr_ && (n->properties(d).ptrSupport & kGdr) == kGdr;  // any may be a rail
  });
  return gdr_ ? caps | kDevicePut : caps;
}

std::shared_ptr<Registration> NetTransport::registerMemory(void* base, size_t bytes) {
  Network* n = network();
  if (!n || !n->sendSeesReceive()) return nullptr;
  return std::make_shared<NetRegistration>(base, bytes, *n);
}

bool NetTransport::canConnect(const PeerInfo& self, const PeerInfo& peer) const {
  return (reach_ == Reach::kEveryPair || !self.sameHost(peer)) && network() != nullptr;
}

std::unique_ptr<RecvConnection> NetTransport::listen(const ConnectRequest& req, std::string* handle) {
  auto c = std::make_unique<NetRecv>(req, *network(), live_, handle);
  c->enlist();
  return c;
}

std::unique_ptr<SendConnection> NetTransport::connect(const ConnectRequest& req, const std::string& handle) {
  auto c = std::make_unique<NetSend>(req, *network(), live_, handle);
  c->enlist();
  return c;
}

bool NetTransport::progress() {
  if (live_.count.load(std::memory_order_relaxed) == 0) return false;
  std::unique_lock<std::mutex> lock(live_.mu, std::try_to_lock);
  if (!lock.owns_lock()) return true;  // another rank thread is sweeping every connection right now
  for (NetConnection* c : live_.set) c->progressIfFree();
  return !live_.set.empty();
}

Activity NetTransport::activity() const {
  Activity a;
  const NetCounters& m = live_.moved;
  a.messages = m.messages.load(std::memory_order_relaxed);
  a.bytes = m.bytes.load(std::memory_order_relaxed);
  a.puts = m.puts.load(std::memory_order_relaxed);
  a.putBytes = m.putBytes.load(std::memory_order_relaxed);
  a.registrations = m.registrations.load(std::memory_order_relaxed);
  WireCounters w;
  Network* n = network();
  if (n && n->wireCounters(&w)) {
    a.wire = true;
    a.dataWrites = w.dataWrites;
    a.fifoWrites = w.fifoWrites;
    a.nicRegistrations = w.registrations;
    a.cacheHits = w.cacheHits;
    a.dmabufRegistrations = w.dmabufRegistrations;
    a.flushes = w.flushes;
  }
  return a;
}

bool NetTransport::active() const { return live_.count.load(std::memory_order_relaxed) > 0; }

}  // namespace strata::transport::net
