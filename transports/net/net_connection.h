// The net transport's connection ends (net_send.cc, net_recv.cc) and what they
// share: the slots in registered memory, the counters, the failure that ends a
// connection, and the put registrations (host memory or a GPU's dma-buf).
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "base/page_buffer.h"
#include "device/gpu.h"
#include "transports/net/bounce_pool.h"
#include "transports/net/nccl_net.h"
#include "transports/net/net_transport.h"

namespace strata::transport::net {

inline void count(std::atomic<uint64_t>& counter, uint64_t n) { counter.fetch_add(n, std::memory_order_relaxed); }
// The network device rank `self` uses (its rail), logged.
int deviceFor(Network& net, const PeerInfo& self);
// Aborts within a second of each other share one window of half a second.
std::chrono::steady_clock::time_point abortWindowEnd();

// What both ends share: the slots in registered memory, the rank's counters, and
// the failure that ends the connection (a network error: the peer is gone). Where
// the network sees each receive's size at the sender (Network::sendSeesReceive),
// a second comm carries one-sided puts: the receiver posts each offer as a receive
// into memory registered with the network, the sender sends each put from such
// memory, and the network moves the bytes between them (over IB: one RDMA write).
// Which memory is one policy, decided at each end on its own (putMemory): the
// caller's, in place, where it is registered already (ncclCommRegister, or a
// transfer in flight); else the library's registered buffers (BouncePool: one copy
// at that end, no registration per operation), host memory through host buffers and
// device memory through device buffers of its GPU (GPUDirect RDMA: dma-bufs); a put
// larger than a pool, or one more than its buffers, is registered for the operation.
class NetConnection {
 public:
  NetConnection(const ConnectRequest& req, Network& net, LiveConnections& live)
      : net_(net), live_(live), puts_(net.sendSeesReceive()), slotBytes_(req.slotBytes), slots_(req.slots),
        memory_(slotBytes_ * slots_), sizes_(slots_), requests_(slots_, nullptr), hostBounce_(hostMemory(), kBounceBytes),
        deviceBounce_(deviceMemory(), kBounceBytes), self_(req.self->rank), peer_(req.peer->rank) {
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
    if (!dynamic_cast<const PeerClosed*>(&e) && failure_.empty()) failure_ = e.what();
    failed_ = true;
    salvage();
  }
  std::string failureText() const {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
    return failure_;
  }
  // Under mu_, once failed: takes what the network completed before the failure
  // (the derived end's; it throws nothing).
  virtual void salvage() {}
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
  // The memory a put moves through: the caller's `p`, registered (in place, or for
  // the operation), or a buffer of the pool (`bounce`; the caller copies).
  struct PutMemory {
    void* mh = nullptr;
    BouncePool::Buffer* bounce = nullptr;
    void* data(void* p) const { return bounce ? bounce->data : p; }
  };
  // The policy (see the class comment); more puts in flight than the pool has
  // buffers register the rest for themselves (nothing waits for a buffer).
  // A pool that cannot be made (memory, the registration limit) is said once, and
  // the put registers its own memory.
  void putMemory(void* comm, void* p, size_t bytes, PutMemory* out) {
    BouncePool* pool = net_.registered(comm, p, bytes) ? nullptr : poolFor(p);
    out->bounce = nullptr;
    if (pool && pool->fits(bytes)) {
      try {
        out->bounce = pool->take(comm, bytes);
      } catch (const Error& e) {
        if (!poolFailed_)
          STRATA_WARN(self_, "net transport (%s): no registered buffers for puts with rank %d (%s): each put "
                      "registers its own memory", net_.name().c_str(), peer_, e.what());
        poolFailed_ = true;
      }
    }
    out->mh = out->bounce ? out->bounce->mh : regPut(comm, p, bytes);
  }
  void releasePut(void* comm, PutMemory* m) {
    if (m->bounce) m->bounce->region->pool->give(comm, m->bounce);
    else if (m->mh) deregPut(comm, m->mh);
    *m = PutMemory{};
  }
  BouncePool::Memory hostMemory() {
    return {[](size_t n) { return allocPages(n); }, [](void* p, size_t n) { freePages(p, n); },
            [](void* d, const void* s, size_t n) { memcpy(d, s, n); },
            [this](void* comm, void* p, size_t n) { return regPut(comm, p, n); },
            [this](void* comm, void* mh) { deregPut(comm, mh); }};
  }
  BouncePool::Memory deviceMemory() {
    return {[this](size_t n) {
              device::OnDevice on(bounceDevice_);
              return device::gpuAlloc(n);
            },
            [this](void* p, size_t) {
              try {
                device::OnDevice on(bounceDevice_);
                device::gpuFree(p);
              } catch (const Error& e) {
                STRATA_INFO(kSubsysNet, self_, "net transport: freeing put buffers: %s", e.what());
              }
            },
            [this](void* d, const void* s, size_t n) {
              device::OnDevice on(bounceDevice_);
              device::copySync(d, s, n);
            },
            [this](void* comm, void* p, size_t n) { return regPut(comm, p, n); },
            [this](void* comm, void* mh) { deregPut(comm, mh); }};
  }
  // The pool for memory at `p`: the host's, or the device pool of the GPU the first
  // device put used (null for another GPU's: registered for the operation).
  BouncePool* poolFor(const void* p) {
    int dev = -1;
    if (!device::isDevicePointer(p, &dev)) return &hostBounce_;
    if (bounceDevice_ < 0) bounceDevice_ = dev;
    return dev == bounceDevice_ ? &deviceBounce_ : nullptr;
  }
  // Into or out of a pool buffer (the pool's copy: memcpy, or the GPU's).
  void bounceCopy(const PutMemory& m, void* dst, const void* src, size_t bytes) {
    m.bounce->region->pool->copy(dst, src, bytes);
    count(live_.moved.bounceBytes, bytes);
  }
  void clearBounce(void* comm) {
    hostBounce_.clear(comm);
    deviceBounce_.clear(comm);
  }
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
  PageBuffer memory_;  // the slots: pages of their own (fork protection covers nothing else)
  std::vector<size_t> sizes_;
  std::vector<void*> requests_;
  void* mh_ = nullptr;
  std::map<void*, int> dmabufFds_;  // put registrations of device memory: their dma-bufs
  // Each end's registered buffers for puts of memory nobody registered, at most this
  // many bytes a pool (allocated as the puts come).
  static constexpr size_t kBounceBytes = 8 << 20;
  BouncePool hostBounce_, deviceBounce_;
  int bounceDevice_ = -1;  // deviceBounce_'s GPU: the first a put used
  bool poolFailed_ = false;  // said once
  std::atomic<bool> failed_{false};  // written under mu_, read by peerAborted() without it
  std::string failure_;              // under mu_: the network's error, when it failed the connection
  std::atomic<bool> wanted_{true};   // needsSweep() as of the last call: lets sweeps skip idle connections
  int self_, peer_;
  std::mutex mu_;
};

// The two ends, in the sweep of `live` once made.
std::unique_ptr<SendConnection> newNetSend(const ConnectRequest& req, Network& net, LiveConnections& live,
                                           const std::string& handle);
std::unique_ptr<RecvConnection> newNetRecv(const ConnectRequest& req, Network& net, LiveConnections& live,
                                           std::string* handle);

}  // namespace strata::transport::net
