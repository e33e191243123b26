// Connections between nodes over a Network (network.h): today an external NCCL
// net plugin (plugin.h). Each connection is a ring of slots on both ends, in
// memory registered with the network; the receiver keeps a receive posted for
// every free slot, the sender sends each posted slot, and the network moves the
// bytes. Progressed by the ranks' threads, like the socket transport.
#pragma once

#include "transports/transport.h"

namespace strata::transport::net {

class NetTransport final : public Transport {
 public:
  const char* name() const override { return "net"; }
  uint32_t capabilities() const override { return kSlots | kNeedsPolling; }
  // Ranks on different hosts, when a network is loaded.
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override;
  std::unique_ptr<RecvConnection> listen(const ConnectRequest& req, std::string* handle) override;
  std::unique_ptr<SendConnection> connect(const ConnectRequest& req, const std::string& handle) override;
  bool progress() override;
  bool active() const override;
};

}  // namespace strata::transport::net
