// Ranks that are threads of one process: staging memory on the heap, and
// one-sided writes are plain copies into the peer's memory.
#pragma once

#include "transports/common/memory_transport.h"

namespace strata::transport::loopback {

class LoopbackTransport final : public MemoryTransport {
 public:
  const char* name() const override { return "loopback"; }
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override { return self.sameProcess(peer); }
  SharedRegion createRegion(const ConnectRequest& req, size_t bytes, std::string* handle) override;
  SharedRegion attachRegion(const ConnectRequest& req, const std::string& handle) override;

 protected:
  std::unique_ptr<PeerMemory> peerMemory(const ConnectRequest& req, FifoHeader* h, bool ofReceiver) override;
};

}  // namespace strata::transport::loopback
