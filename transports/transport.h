// The only view of a transport that the algorithms and the executor get.
//
// A connection is one-way, from a sender rank to a receiver rank. A transport
// says what its connections can do (capabilities):
//  - two-sided slots (kSlots, every transport): a ring of staging slots the
//    receiver owns; messages of at most slotBytes() go through them in order;
//  - one-sided writes (kPut): the receiver offers where its next messages go
//    (memory it registered), and the sender writes each straight there and
//    signals it: one copy instead of two (CMA or a mapped segment on one host,
//    a plain copy between threads, RDMA write with immediate between nodes);
//  - one-sided reads (kGet): the sender exposes where a message's data is and
//    the receiver copies it out (receivers of one root copy in parallel);
//  - shared regions (kSharedRegions): memory both ends map, for protocols that
//    store data straight into it (the LL protocol's flag-tagged words);
//  - device memory (kDeviceMemory): regions in GPU memory, usable by kernels;
//  - polling (kNeedsPolling): data moves only when the rank's threads progress
//    the transport, and no doorbell is rung.
// Both ends poll without blocking; when neither can move, the executor sleeps on
// its rank's doorbell, which the other end rings after every post or release.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/doorbell.h"
#include "base/peer_info.h"

namespace strata::transport {

enum Capability : uint32_t {
  kSlots = 1u << 0,
  kPut = 1u << 1,
  kSharedRegions = 1u << 2,
  kDeviceMemory = 1u << 3,
  kNeedsPolling = 1u << 4,
  kGet = 1u << 5,
  kDevicePut = 1u << 6,  // kPut from and into device memory too (GPUDirect RDMA)
};

// A range of this rank's memory registered with a transport, so that peers may
// write into it (kPut). Offers must lie inside a live registration; deregister()
// (or the last reference going away) ends it.
class Registration {
 public:
  Registration(void* base, size_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}
  virtual ~Registration() = default;
  void* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  bool live() const { return live_.load(std::memory_order_acquire); }
  // True when [p, p + n) lies inside; an empty range writes nothing, so anywhere.
  bool covers(const void* p, size_t n) const {
    if (n == 0) return true;
    auto* c = static_cast<const char*>(p);
    return c >= base_ && n <= bytes_ && c - base_ <= static_cast<ptrdiff_t>(bytes_ - n);
  }
  virtual void deregister() { live_.store(false, std::memory_order_release); }
  // The user registered this range (ncclCommRegister): the transport may keep what
  // makes writes into it cheap (a network registration) until deregister().
  virtual void persist() {}

 private:
  char* base_;
  size_t bytes_;
  std::atomic<bool> live_{true};
};

// What a one-sided transfer belongs to, for how a transport moves it.
enum class Transfer {
  kChained,      // a ring's step: what the peer sends next may wait on it
  kIndependent,  // point-to-point: nothing the peer sends depends on it
  kBalanced,     // point-to-point where both ends would copy anyway: every rank sends as
                 // much as it receives at once (DirectRead's all-gather), or a root serves
                 // one reader (a 2-rank broadcast); a second copy through the slots then
                 // takes no core that would be idle
};

// The receiver's side of one-sided writes.
class PutReceiver {
 public:
  virtual ~PutReceiver() = default;
  // Where the sender's next put goes (offers are used in order); false while
  // too many offers are outstanding (call again). Throws ncclInvalidUsage
  // unless `reg` is live and covers [dst, dst + bytes). Not kChained: nothing the
  // peer sends depends on this receive completing (a point-to-point receive); the
  // transport may then post it with the independent offers made right after it as
  // one grouped receive, which completes as a whole (Network::irecv), or carry it
  // through its slots, so the caller must keep polling tryPutDone while it waits.
  virtual bool tryOffer(void* dst, size_t bytes, const Registration& reg, Transfer kind) = 0;
  // True once the oldest offer has been written; *bytes gets what was written.
  virtual bool tryPutDone(size_t* bytes) = 0;
};

// The sender's side of one-sided writes.
class PutSender {
 public:
  virtual ~PutSender() = default;
  // Writes `bytes` from `src` into the receiver's oldest unused offer and signals
  // it; false while there is no offer yet (call again). Throws ncclInvalidUsage
  // when `bytes` exceeds the offer. `src` may be reused once putsComplete().
  virtual bool tryPut(const void* src, size_t bytes) = 0;
  virtual bool putsComplete() const { return true; }
};

// The side whose memory is read (kGet): the message's sender.
class GetSender {
 public:
  virtual ~GetSender() = default;
  // Exposes [src, src + bytes) as the next message for the receiver to read; false
  // while too many are outstanding. Throws unless `reg` is live and covers it.
  // `kind`: kIndependent or kBalanced (reads are point-to-point).
  virtual bool tryExpose(const void* src, size_t bytes, const Registration& reg, Transfer kind) = 0;
  // True once the oldest exposure has been read: its memory may change again.
  virtual bool tryGetDone() = 0;
  // Copies one piece of the oldest exposure into the receiver's memory, where the
  // receiver splits a large read between the two ends; true if it did. For a rank
  // with nothing else to do: it lends its core to the read it waits for.
  virtual bool helpRead() { return false; }
};

// The side that reads (kGet): the message's receiver.
class GetReceiver {
 public:
  virtual ~GetReceiver() = default;
  // Copies the oldest exposure into `dst` (throws if it exceeds `bytes`); false
  // while none is exposed yet. *got gets its size.
  virtual bool tryGet(void* dst, size_t bytes, size_t* got) = 0;
};

class SendConnection {
 public:
  virtual ~SendConnection() = default;
  // The next free slot, or nullptr while the receiver still holds them all.
  virtual void* trySlot() = 0;
  // Publishes the slot from trySlot() holding `bytes` bytes.
  virtual void post(size_t bytes) = 0;
  virtual size_t slotBytes() const = 0;
  // Marks the connection failed so that the receiver stops waiting.
  virtual void abort() = 0;
  // True when the receiver marked the connection failed.
  virtual bool peerAborted() const = 0;
  // Why this end's network failed the connection (an error of its own, not the
  // peer closing or aborting it), for the rank's message; empty otherwise.
  virtual std::string failure() const { return {}; }
  // True when every posted message has left this process (or can never leave,
  // because the connection failed). Memory transports are flushed at post().
  virtual bool flushed() { return true; }
  // One-sided writes, where the transport has kPut; null otherwise.
  virtual PutSender* puts() { return nullptr; }
  // One-sided reads of this end's memory, where the transport has kGet; null otherwise.
  virtual GetSender* gets() { return nullptr; }
};

class RecvConnection {
 public:
  virtual ~RecvConnection() = default;
  // The oldest unread message, or nullptr when none has arrived.
  virtual const void* tryData(size_t* bytes) = 0;
  // Frees the message from tryData() for the sender to reuse.
  virtual void release() = 0;
  virtual void abort() = 0;
  virtual bool peerAborted() const = 0;
  virtual std::string failure() const { return {}; }  // as SendConnection's
  // One-sided writes, where the transport has kPut; null otherwise.
  virtual PutReceiver* puts() { return nullptr; }
  // One-sided reads of the sender's memory, where the transport has kGet; null otherwise.
  virtual GetReceiver* gets() { return nullptr; }
};

// What both ends know when they set up a connection.
struct ConnectRequest {
  const PeerInfo* self = nullptr;
  const PeerInfo* peer = nullptr;
  size_t slotBytes = 0;
  int slots = 0;
  uint64_t link = 0;   // regions: the link's id, which names what the region is for
  uint64_t scope = 0;  // regions: this rank's connection pool, unique in the process
};

// Memory the receiver owns and the sender maps, for protocols that store data
// straight into it (the LL protocol's flag-tagged words). Zero-filled.
struct SharedRegion {
  void* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<void> keepAlive;    // the heap block or mapped segment
  std::shared_ptr<Doorbell> peerBell;  // rung after storing into (or reading from) the region
};

// Shared regions, for transports with kSharedRegions or kDeviceMemory.
class RegionProvider {
 public:
  virtual ~RegionProvider() = default;
  // Owner's side: a new region of `bytes`; `handle` is sent to the peer.
  virtual SharedRegion createRegion(const ConnectRequest& req, size_t bytes, std::string* handle) = 0;
  // The peer's side, given the owner's handle.
  virtual SharedRegion attachRegion(const ConnectRequest& req, const std::string& handle) = 0;
};

// What a transport moved in this process, as counters that only grow: the
// executor logs their change over each operation under NCCL_DEBUG_SUBSYS=NET.
// Transports that do not count report zeros.
struct Activity {
  uint64_t messages = 0, bytes = 0;    // through the slots
  uint64_t puts = 0, putBytes = 0;     // one-sided, from the caller's buffer into the peer's
  uint64_t bounceBytes = 0;            // of puts, copied through the library's registered buffers (either end)
  uint64_t registrations = 0;          // buffers registered with the network (for an operation, or kept)
  // The network's own, where it counts them (IB): RDMA writes of data and of FIFO
  // entries, and registrations new with the NIC versus found in its cache.
  bool wire = false;
  uint64_t dataWrites = 0, fifoWrites = 0, nicRegistrations = 0, cacheHits = 0;
  uint64_t dmabufRegistrations = 0, flushes = 0;  // GPUDirect RDMA: device memory registered, flush reads

  Activity since(const Activity& before) const;  // the change from `before`
  bool any() const { return messages || puts || registrations || dataWrites || fifoWrites; }
  std::string str() const;  // "12 messages (1.5 MiB) through the slots, ..."
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual uint32_t capabilities() const = 0;
  bool has(uint32_t caps) const { return (capabilities() & caps) == caps; }
  // True when this transport can link these two ranks.
  virtual bool canConnect(const PeerInfo& self, const PeerInfo& peer) const = 0;
  // False while the configuration switches it off (NCCL_SHM_DISABLE): read at each
  // choice, so a reloaded environment (ncclResetDebugInit) takes effect at the next init.
  virtual bool enabled() const { return true; }
  // kSlots. Receiver side: allocates the staging memory; `handle` is sent to the
  // sender. Called only on transports with kSlots (the others refuse).
  virtual std::unique_ptr<RecvConnection> listen(const ConnectRequest& req, std::string* handle);
  // Sender side, given the receiver's handle.
  virtual std::unique_ptr<SendConnection> connect(const ConnectRequest& req, const std::string& handle);
  // kSharedRegions / kDeviceMemory: the regions; null otherwise.
  virtual RegionProvider* regions() { return nullptr; }
  // kPut: registers [base, base + bytes) for peers to write into; null when the
  // transport has no one-sided writes.
  virtual std::shared_ptr<Registration> registerMemory(void* base, size_t bytes) {
    (void)base;
    (void)bytes;
    return nullptr;
  }
  // False once `peer`'s process is known to have exited. Transports whose
  // connections cannot see that themselves (shared memory) check the process;
  // the others report it through peerAborted() (a socket's end of stream).
  virtual bool peerAlive(const PeerInfo& peer) const {
    (void)peer;
    return true;
  }
  // kNeedsPolling: moves data on this transport's connections; false when it has none.
  virtual bool progress() { return false; }
  // kNeedsPolling: true while connections exist that only progress() moves.
  virtual bool active() const { return false; }
  // What it moved in this process so far.
  virtual Activity activity() const { return {}; }
};

// Every transport of this build in priority order, enabled or not
// (transports/registry.cc: one line each).
const std::vector<Transport*>& transports();
// The enabled transport named `name`, or null (the receiver names its choice in the handle).
Transport* findTransport(const std::string& name);

// Moves data on connections that need the ranks' threads to progress them
// (sockets); returns false when the process has none. Called on every sweep.
bool progressBackground();
// True while such connections exist: a waiting rank must poll, not sleep on its doorbell.
bool needsPolling();

// Each transport's activity(), in priority order.
std::vector<Activity> activity();
// "name: what it did; ..." for the transports whose activity changed since `before`; "" if none.
std::string describeActivity(const std::vector<Activity>& before, const std::vector<Activity>& after);

// The rate (GB/s) of the network between nodes where a transport knows it (an NCCL
// net plugin's devices, IB's ports: a node's rails together); 0 when none does.
// `netName`: the one asked for by name (empty: the first loaded).
double networkGBps(const char* netName);

// The first transport, in priority order, that can connect the pair and has
// every capability in `required`; throws naming both ranks if none can.
Transport& selectTransport(const PeerInfo& self, const PeerInfo& peer, uint32_t required = kSlots);
// Whether any enabled transport with every capability in `caps` can connect the pair.
bool anyTransportLinks(const PeerInfo& self, const PeerInfo& peer, uint32_t caps);

}  // namespace strata::transport
