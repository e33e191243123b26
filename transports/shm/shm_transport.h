// Processes on one host: staging memory in POSIX shared memory.
#pragma once

#include "transports/transport.h"

namespace strata::transport::shm {

class ShmTransport final : public MemoryTransport {
 public:
  const char* name() const override { return "shm"; }
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override { return self.sameHost(peer); }
  SharedRegion createRegion(const ConnectRequest& req, size_t bytes, std::string* handle) override;
  SharedRegion attachRegion(const ConnectRequest& req, const std::string& handle) override;
};

}  // namespace strata::transport::shm
