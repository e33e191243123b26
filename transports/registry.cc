#include "base/config.h"
#include "base/error.h"
#include "transports/loopback/loopback_transport.h"
#include "transports/shm/shm_transport.h"

namespace strata::transport {

const std::vector<Transport*>& transports() {
  static const std::vector<Transport*> list = [] {
    std::vector<Transport*> l;
    static loopback::LoopbackTransport loopback;
    static shm::ShmTransport shm;
    l.push_back(&loopback);
    if (!config().shmDisable) l.push_back(&shm);
    return l;
  }();
  return list;
}

Transport& selectTransport(const PeerInfo& self, const PeerInfo& peer) {
  for (Transport* t : transports())
    if (t->canConnect(self, peer)) return *t;
  fail(ncclInvalidUsage,
       "no transport can connect rank %d (%s, pid %d) and rank %d (%s, pid %d): this build has loopback and shm%s; "
       "ranks on different hosts need the network transport, which is not implemented yet",
       self.rank, self.hostname, self.pid, peer.rank, peer.hostname, peer.pid,
       config().shmDisable ? " (shm disabled by NCCL_SHM_DISABLE=1)" : "");
}

}  // namespace strata::transport
