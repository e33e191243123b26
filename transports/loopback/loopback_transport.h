// Ranks that are threads of one process: staging memory on the heap.
#pragma once

#include "transports/transport.h"

namespace strata::transport::loopback {

class LoopbackTransport final : public MemoryTransport {
 public:
  const char* name() const override { return "loopback"; }
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override { return self.sameProcess(peer); }
  SharedRegion createRegion(const ConnectRequest& req, size_t bytes, std::string* handle) override;
  SharedRegion attachRegion(const ConnectRequest& req, const std::string& handle) override;
};

}  // namespace strata::transport::loopback
