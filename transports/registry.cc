// Every transport of this build, in priority order: one line each in kTransports.
// The first whose canConnect accepts a pair (and that has the capabilities a
// plan asks for) links it.
#include <strings.h>

#include "base/config.h"
#include "base/error.h"
#include "transports/cuda_ipc/cuda_ipc_transport.h"
#include "transports/loopback/loopback_transport.h"
#include "transports/net/net_transport.h"
#include "transports/net/plugin.h"
#include "transports/shm/shm_transport.h"
#include "transports/socket/socket_transport.h"

namespace strata::transport {

const std::vector<Transport*>& transports() {
  static const std::vector<Transport*> list = [] {
    static loopback::LoopbackTransport loopback;
    static shm::ShmTransport shm;
    static socket::SocketTransport socket;
    static cuda_ipc::CudaIpcTransport cudaIpc;
    static net::NetTransport netPlugin;
    std::vector<Transport*> l{&loopback};
    if (!config().shmDisable) l.push_back(&shm);
    l.push_back(&cudaIpc);
    if (net::pluginNetwork()) l.push_back(&netPlugin);  // an NCCL net plugin, before the built-in TCP
    // NCCL_NET names the one network between nodes; "Socket" is the built-in TCP one.
    if (config().netName.empty() || strcasecmp(config().netName.c_str(), "Socket") == 0) l.push_back(&socket);
    return l;
  }();
  return list;
}

Transport* findTransport(const std::string& name) {
  for (Transport* t : transports())
    if (name == t->name()) return t;
  return nullptr;
}

namespace {

// The transports that need a thread to move their data (capabilities do not
// change once the transports exist): the executor asks them every sweep.
const std::vector<Transport*>& polled() {
  static const std::vector<Transport*> list = [] {
    std::vector<Transport*> l;
    for (Transport* t : transports())
      if (t->has(kNeedsPolling)) l.push_back(t);
    return l;
  }();
  return list;
}

}  // namespace

bool progressBackground() {
  bool any = false;
  for (Transport* t : polled()) any |= t->progress();
  return any;
}

bool needsPolling() {
  for (Transport* t : polled())
    if (t->active()) return true;
  return false;
}

double networkGBps() {
  net::Network* n = net::pluginNetwork();
  return n && n->devices() > 0 ? n->properties(0).speedMbps / 8000.0 : 0;
}

Transport& selectTransport(const PeerInfo& self, const PeerInfo& peer, uint32_t required) {
  for (Transport* t : transports())
    if (t->has(required) && t->canConnect(self, peer)) return *t;
  if (!config().netName.empty() && !self.sameHost(peer))
    fail(ncclInvalidUsage,
         "NCCL_NET=%s: no network of that name is available to connect rank %d (%s) and rank %d (%s) (loaded: %s; "
         "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET says why)",
         config().netName.c_str(), self.rank, self.hostname, peer.rank, peer.hostname,
         net::pluginNetwork() ? net::pluginNetwork()->name().c_str() : "no net plugin");
  fail(ncclInternalError, "no transport with capabilities 0x%x can connect rank %d (%s, pid %d) and rank %d (%s, pid %d)",
       required, self.rank, self.hostname, self.pid, peer.rank, peer.hostname, peer.pid);
}

}  // namespace strata::transport
