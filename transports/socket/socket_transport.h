// Ranks on different hosts (or processes on one host with NCCL_SHM_DISABLE=1):
// non-blocking TCP streams, NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD per
// connection, progressed by the ranks' threads (no helper threads).
#pragma once

#include "base/socket.h"
#include "transports/transport.h"

namespace strata::transport::socket {

// What a receiving connection sends its sender (the connection handle): where to
// open the streams, the token to present in each StreamHello, and how many.
struct SocketHandle {
  SockAddr addr;
  uint64_t token;
  uint32_t streams;
};

// True while any socket connection exists in this process: waiting ranks must
// then poll rather than sleep on their doorbell, which a socket does not ring.
bool networkActive();
// Moves data on every socket connection of the process; false when there are none.
bool progressNetwork();

class SocketTransport final : public Transport {
 public:
  const char* name() const override { return "socket"; }
  uint32_t capabilities() const override { return kSlots | kNeedsPolling; }
  // Last in priority order: it reaches every rank the others cannot.
  bool canConnect(const PeerInfo&, const PeerInfo&) const override { return true; }
  std::unique_ptr<RecvConnection> listen(const ConnectRequest& req, std::string* handle) override;
  std::unique_ptr<SendConnection> connect(const ConnectRequest& req, const std::string& handle) override;
  bool progress() override { return progressNetwork(); }
  bool active() const override { return networkActive(); }
};


}  // namespace strata::transport::socket
