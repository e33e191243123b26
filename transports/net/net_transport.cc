#include "transports/net/net_transport.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "transports/net/nccl_net.h"

namespace strata::transport::net {
namespace {

int deviceFor(Network& net, const PeerInfo& self) {
  int n = net.devices();
  STRATA_REQUIRE(n > 0, ncclSystemError, "network %s has no devices", net.name().c_str());
  return self.rail >= 0 ? self.rail % n : 0;  // the rank's rail (its nearest NIC), else the first
}

// What both ends share: the slots in registered memory, the rank's counters, and
// the failure that ends the connection (a network error: the peer is gone).
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

class NetConnection {
 public:
  NetConnection(const ConnectRequest& req, Network& net, LiveConnections& live)
      : net_(net), live_(live), slotBytes_(req.slotBytes), slots_(req.slots), memory_(slotBytes_ * slots_),
        sizes_(slots_), requests_(slots_, nullptr), self_(req.self->rank), peer_(req.peer->rank) {
    dev_ = deviceFor(net, *req.self);
    std::lock_guard<std::mutex> lock(live_.mu);
    live_.set.insert(this);
    live_.count.fetch_add(1);
  }
  virtual ~NetConnection() { retire(); }
  // From any rank's sweep: moves what the network allows, unless another thread is
  // at it or there is nothing to move off the rank's own calls (see needsSweep).
  void progressIfFree() {
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
  void progressLocked() {
    if (failed_) return;
    try {
      step();
    } catch (const Error& e) {
      STRATA_WARN(self_, "net transport (%s): connection with rank %d failed: %s", net_.name().c_str(), peer_,
                  e.what());
      failed_ = true;
    }
  }
  virtual void step() = 0;
  // Under mu_: true while the connection is coming up, or has sends the network has
  // not taken or finished. A receive is moved by the rank that waits on it (tryData)
  // and reposted by release(), as the socket transport does: polling idle receives
  // from every sweep would cost a network call each.
  virtual bool needsSweep() const = 0;
  char* slot(uint64_t m) { return memory_.data() + (m % slots_) * slotBytes_; }
  // Deregisters and closes, ignoring errors (the peer may be gone).
  void closeComm(void* comm, void (Network::*close)(void*)) {
    if (!comm) return;
    try {
      if (mh_) net_.deregMr(comm, mh_);
      (net_.*close)(comm);
    } catch (const Error& e) {
      STRATA_INFO(kSubsysNet, self_, "net transport: closing the connection with rank %d: %s", peer_, e.what());
    }
    mh_ = nullptr;
  }

  Network& net_;
  LiveConnections& live_;
  int dev_ = 0;
  size_t slotBytes_;
  int slots_;
  std::vector<char> memory_;
  std::vector<size_t> sizes_;
  std::vector<void*> requests_;
  void* mh_ = nullptr;
  std::atomic<bool> failed_{false};  // written under mu_, read by peerAborted() without it
  int self_, peer_;
  std::mutex mu_;
};

namespace {

class NetSend final : public NetConnection, public SendConnection {
 public:
  NetSend(const ConnectRequest& req, Network& net, LiveConnections& live, const std::string& handle)
      : NetConnection(req, net, live) {
    STRATA_REQUIRE(handle.size() == kHandleBytes, ncclInternalError, "net transport: a handle of %zu bytes",
                   handle.size());
    memcpy(handle_, handle.data(), kHandleBytes);
  }
  ~NetSend() override {
    retire();
    if (!comm_) net_.cancelConnect(handle_);
    closeComm(comm_, &Network::closeSend);
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
    if (!comm_) net_.cancelConnect(handle_);
    closeComm(comm_, &Network::closeSend);
    comm_ = nullptr;
  }
  bool peerAborted() const override { return failed_; }
  bool flushed() override {
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    return failed_ || done_ == head_;
  }

 private:
  bool needsSweep() const override { return !comm_ || done_ < head_; }
  void step() override {
    if (!comm_) {
      comm_ = net_.connect(dev_, handle_);  // the plugin may keep its progress in the handle
      if (!comm_) return;
      mh_ = net_.regMr(comm_, memory_.data(), memory_.size(), abi::kPtrHost);
    }
    for (; sent_ < head_; ++sent_) {
      void* r = net_.isend(comm_, slot(sent_), sizes_[sent_ % slots_], 0, mh_);
      if (!r) break;  // the receiver has no receive posted yet
      requests_[sent_ % slots_] = r;
    }
    for (; done_ < sent_; ++done_)
      if (!net_.test(requests_[done_ % slots_], nullptr)) break;
  }

  char handle_[kHandleBytes];
  void* comm_ = nullptr;
  uint64_t head_ = 0, sent_ = 0, done_ = 0;  // posted by the rank, handed to the network, completed
};

class NetRecv final : public NetConnection, public RecvConnection {
 public:
  NetRecv(const ConnectRequest& req, Network& net, LiveConnections& live, std::string* handle)
      : NetConnection(req, net, live) {
    char h[kHandleBytes] = {};
    listen_ = net.listen(dev_, h);
    handle->assign(h, kHandleBytes);
  }
  ~NetRecv() override {
    retire();
    closeComm(comm_, &Network::closeRecv);
    closeListener();
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
    closeComm(comm_, &Network::closeRecv);
    comm_ = nullptr;
    closeListener();
  }
  bool peerAborted() const override { return failed_; }

 private:
  void closeListener() {
    if (!listen_) return;
    try {
      net_.closeListen(listen_);
    } catch (const Error& e) {
      STRATA_INFO(kSubsysNet, self_, "net transport: closing the listener for rank %d: %s", peer_, e.what());
    }
    listen_ = nullptr;
  }
  bool needsSweep() const override { return !comm_ && listen_; }
  void step() override {
    if (!comm_) {
      if (!listen_) return;
      comm_ = net_.accept(listen_);
      if (!comm_) return;
      mh_ = net_.regMr(comm_, memory_.data(), memory_.size(), abi::kPtrHost);
    }
    for (; posted_ < consumed_ + slots_; ++posted_) {
      void* r = net_.irecv(comm_, slot(posted_), slotBytes_, 0, mh_);
      if (!r) break;
      requests_[posted_ % slots_] = r;
    }
    for (; arrived_ < posted_; ++arrived_) {
      size_t n = 0;
      if (!net_.test(requests_[arrived_ % slots_], &n)) break;
      STRATA_REQUIRE(n <= slotBytes_, ncclSystemError, "net transport: %zu bytes arrived in a slot of %zu", n,
                     slotBytes_);
      sizes_[arrived_ % slots_] = n;
    }
  }

  void* listen_ = nullptr;
  void* comm_ = nullptr;
  uint64_t posted_ = 0, arrived_ = 0, consumed_ = 0;  // receives posted, completed, released by the rank
};

}  // namespace

bool NetTransport::canConnect(const PeerInfo& self, const PeerInfo& peer) const {
  return !self.sameHost(peer) && network() != nullptr;
}

std::unique_ptr<RecvConnection> NetTransport::listen(const ConnectRequest& req, std::string* handle) {
  return std::make_unique<NetRecv>(req, *network(), live_, handle);
}

std::unique_ptr<SendConnection> NetTransport::connect(const ConnectRequest& req, const std::string& handle) {
  return std::make_unique<NetSend>(req, *network(), live_, handle);
}

bool NetTransport::progress() {
  if (live_.count.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> lock(live_.mu);
  for (NetConnection* c : live_.set) c->progressIfFree();
  return !live_.set.empty();
}

bool NetTransport::active() const { return live_.count.load(std::memory_order_relaxed) > 0; }

}  // namespace strata::transport::net
