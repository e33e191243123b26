// Every transport of this build, in priority order: one line each in kTransports.
// The first whose canConnect accepts a pair (and that has the capabilities a
// plan asks for) links it.
#include <strings.h>

#include "base/config.h"
#include "base/error.h"
#include "transports/cuda_ipc/cuda_ipc_transport.h"
#include "transports/ib/ib_network.h"
#include "transports/loopback/loopback_transport.h"
#include "transports/net/net_transport.h"
#include "transports/net/plugin.h"
#include "transports/shm/shm_transport.h"
#include "transports/socket/socket_network.h"

namespace strata::transport {

const std::vector<Transport*>& transports() {
  static const std::vector<Transport*> list = [] {
    static loopback::LoopbackTransport loopback;
    static shm::ShmTransport shm;
    static cuda_ipc::CudaIpcTransport cudaIpc;
    static net::NetTransport netPlugin("net", net::pluginNetwork);
    static net::NetTransport ib("ib", ib::ibNetwork);
    // Last: it reaches every rank the others cannot.
    static net::NetTransport socket("socket", socket::socketNetwork, net::Reach::kEveryPair);
    std::vector<Transport*> l{&loopback};
    if (!config().shmDisable) l.push_back(&shm);
    l.push_back(&cudaIpc);
    // Between nodes, as NCCL: an NCCL net plugin, else InfiniBand/RoCE, else TCP.
    if (net::pluginNetwork()) l.push_back(&netPlugin);
    else if (ib::ibNetwork()) l.push_back(&ib);
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

// The network between nodes in use (a plugin's, else IB's), or null for TCP.
static net::Network* activeNetwork() { return net::pluginNetwork() ? net::pluginNetwork() : ib::ibNetwork(); }

double networkGBps() {
  net::Network* n = activeNetwork();
  if (!n) return 0;
  double mbps = 0;  // a node's rails together
  for (int d = 0; d < n->devices(); ++d) mbps += n->properties(d).speedMbps;
  return mbps / 8000.0;
}

Transport& selectTransport(const PeerInfo& self, const PeerInfo& peer, uint32_t required) {
  for (Transport* t : transports())
    if (t->has(required) && t->canConnect(self, peer)) return *t;
  if (!config().netName.empty() && !self.sameHost(peer))
    fail(ncclInvalidUsage,
         "NCCL_NET=%s: no network of that name is available to connect rank %d (%s) and rank %d (%s) (loaded: %s; "
         "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET says why)",
         config().netName.c_str(), self.rank, self.hostname, peer.rank, peer.hostname,
         activeNetwork() ? activeNetwork()->name().c_str() : "no net plugin, no IB device");
  fail(ncclInternalError, "no transport with capabilities 0x%x can connect rank %d (%s, pid %d) and rank %d (%s, pid %d)",
       required, self.rank, self.hostname, self.pid, peer.rank, peer.hostname, peer.pid);
}

}  // namespace strata::transport
