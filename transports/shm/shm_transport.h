// Processes on one host: staging memory in POSIX shared memory. One-sided
// writes go straight into the receiver's memory: a plain copy into a segment
// both map (buffers from ncclMemAlloc), else Cross Memory Attach
// (process_vm_writev), probed per connection; one-sided reads likewise
// (process_vm_readv); where Yama or a container forbids it (or STRATA_CMA=0),
// through the slots.
#pragma once

#include "base/config.h"
#include "transports/common/memory_transport.h"

namespace strata::transport::shm {

// Whether a one-sided transfer of `bytes` into or out of `o` moves directly (a
// plain copy into a segment both map, or Cross Memory Attach) rather than through
// the slots; bulkBytes is Config::bulkBytes().
bool directWorthIt(const FifoOffer& o, size_t bytes, size_t bulkBytes);

class ShmTransport final : public MemoryTransport {
 public:
  const char* name() const override { return "shm"; }
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override { return self.sameHost(peer); }
  bool enabled() const override { return !config().shmDisable; }
  // Shared memory cannot tell that its other end died: its process can (zombies included).
  bool peerAlive(const PeerInfo& peer) const override { return processAlive(peer.pid); }
  SharedRegion createRegion(const ConnectRequest& req, size_t bytes, std::string* handle) override;
  SharedRegion attachRegion(const ConnectRequest& req, const std::string& handle) override;

 protected:
  std::unique_ptr<PeerMemory> peerMemory(const ConnectRequest& req, FifoHeader* h, bool ofReceiver) override;
};

}  // namespace strata::transport::shm
