// Every link a communicator has opened, keyed by (peer, purpose id): the ring
// channels, tree edges, one-shot meshes, point-to-point links and shared regions
// alike. Links open in two phases so one thread can set up several
// communicators and no pattern deadlocks: every receiver first publishes its
// handles (listen), then every sender picks them up (connect). Aborting is safe
// from any thread while another opens or uses links.
//
// Threads: one thread at a time opens and uses links (the thread running the
// communicator's operations: its caller's, or the device proxy's once the caller
// has drained it), so its own lookups need no lock; what it adds to the maps, it
// adds under `mu_`, which abortAll (any thread) holds while it walks them.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <vector>

#include "algorithms/algorithm.h"
#include "base/peer_info.h"
#include "core/bootstrap.h"
#include "transports/transport.h"

namespace strata::core {

using algorithms::LinkKey;
using algorithms::LinkShape;

// A region pair: its size, and whether it is device memory.
struct RegionSpec {
  size_t bytes = 0;
  bool device = false;
};

// What a plan needs opened, sorted by key, each key once.
using LinkNeeds = std::vector<std::pair<LinkKey, LinkShape>>;
using RegionNeeds = std::vector<std::pair<LinkKey, RegionSpec>>;

class ConnectionPool {
 public:
  // `stopped` is consulted while waiting for a peer's handle (throws to give up).
  ConnectionPool(int rank, const std::vector<PeerInfo>* peers, Bootstrap* bootstrap, LinkShape defaults,
                 WaitCheck stopped);
  ~ConnectionPool();

  // Phase 1: receive ends and this rank's halves of region pairs, handles sent.
  // Phase 2: send ends and the peers' halves. Keys already open are skipped.
  void listen(const LinkNeeds& recvs, const RegionNeeds& regions);
  void connect(const LinkNeeds& sends, const RegionNeeds& regions);

  transport::SendConnection& send(const LinkKey& k);
  transport::RecvConnection& recv(const LinkKey& k);
  transport::SharedRegion& regionIn(const LinkKey& k);
  transport::SharedRegion& regionOut(const LinkKey& k);

  // Memory registered with the transport of receive link `k`: the last few are
  // kept, so a loop over the same buffers registers nothing after its first pass.
  std::shared_ptr<transport::Registration> registration(const LinkKey& k, void* base, size_t bytes);
  // ncclCommRegister: [base, base + bytes) registered with every transport with
  // one-sided writes that links this rank to a peer, kept until deregistered
  // (registration() finds them first). Returns the handle.
  void* registerBuffer(void* base, size_t bytes);
  // Throws ncclInvalidArgument for a handle this pool did not hand out.
  void deregisterBuffer(void* handle, const char* fn);
  // Registrations made (not found in the cache), for the NET debug counters.
  uint64_t registrationsMade() const { return registrationsMade_; }

  // True when every send end has pushed out what was posted to it.
  bool flushed();
  // Marks every link failed so that peers waiting on them stop too.
  void abortAll();
  // Teardown of device memory shared with other processes, which must not be freed
  // while a peer may still map it (CUDA IPC). The ranks of other processes with a
  // device region of this rank's, or mapping one of theirs:
  std::vector<int> deviceSharers() const;
  // Unmaps every region of a peer's (this rank's work on them done).
  void unmapPeerRegions();
  // Keeps this rank's device regions past the pool for good: a peer that could not
  // confirm it is done with them may still write into them.
  void keepDeviceRegions();

  // The transport that links this rank to `peer` (with these capabilities).
  const char* transportTo(int peer, uint32_t caps = transport::kSlots) const;

 private:
  LinkShape shapeOf(LinkShape s) const;

  int rank_;
  uint64_t scope_;  // this pool, unique in the process (regions are shared per pool)
  const std::vector<PeerInfo>* peers_;
  Bootstrap* bootstrap_;
  LinkShape defaults_;
  WaitCheck stopped_;
  mutable std::mutex mu_;  // held to change the maps, and by abortAll (any thread) to walk them
  std::map<LinkKey, std::unique_ptr<transport::SendConnection>> sends_;
  std::map<LinkKey, std::unique_ptr<transport::RecvConnection>> recvs_;
  std::map<LinkKey, transport::SharedRegion> regionsIn_, regionsOut_;
  std::set<int> deviceSharers_;
  std::set<LinkKey> deviceRegionsIn_;
  struct CachedRegistration {
    const transport::Transport* transport;
    void* base;
    size_t bytes;
    std::shared_ptr<transport::Registration> reg;
  };
  std::vector<CachedRegistration> registrations_;  // most recent last, at most kRegistrationCache
  std::map<void*, std::vector<CachedRegistration>> pinned_;  // ncclCommRegister's, by handle
  uintptr_t nextHandle_ = 1;
  uint64_t registrationsMade_ = 0;
};

}  // namespace strata::core
