// Ranks that are threads of one process: staging memory on the heap.
#pragma once

#include "transports/transport.h"

namespace strata::transport::loopback {

class LoopbackTransport final : public Transport {
 public:
  const char* name() const override { return "loopback"; }
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override { return self.sameProcess(peer); }
  std::unique_ptr<RecvConnection> listen(const ConnectRequest& req, std::string* handle) override;
  std::unique_ptr<SendConnection> connect(const ConnectRequest& req, const std::string& handle) override;
};

}  // namespace strata::transport::loopback
