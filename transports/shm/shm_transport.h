// Processes on one host: staging memory in POSIX shared memory.
#pragma once

#include "transports/transport.h"

namespace strata::transport::shm {

class ShmTransport final : public Transport {
 public:
  const char* name() const override { return "shm"; }
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override { return self.sameHost(peer); }
  std::unique_ptr<RecvConnection> listen(const ConnectRequest& req, std::string* handle) override;
  std::unique_ptr<SendConnection> connect(const ConnectRequest& req, const std::string& handle) override;
};

}  // namespace strata::transport::shm
