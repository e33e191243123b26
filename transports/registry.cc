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
    std::vector<Transport*> l{&loopback, &shm, &cudaIpc};
    // Between nodes, as NCCL: an NCCL net plugin, else InfiniBand/RoCE, else TCP; each
    // listed only where this process has that network. A communicator's network name
    // (ncclConfig_t.netName, else NCCL_NET) picks one of them (selectTransport).
    if (net::pluginNetwork()) l.push_back(&netPlugin);
    if (ib::ibNetwork()) l.push_back(&ib);
    l.push_back(&socket);
    return l;
  }();
  return list;
}

Transport* findTransport(const std::string& name) {
  for (Transport* t : transports())
    if (name == t->name()) return t->enabled() ? t : nullptr;
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

namespace {

// The network a net transport runs on, or null for the other transports and for a
// network this process does not have.
net::Network* networkOf(const Transport* t) {
  auto* n = dynamic_cast<const net::NetTransport*>(t);
  return n ? n->network() : nullptr;
}

// A communicator's network by name: its own (ncclConfig_t.netName), else NCCL_NET's.
const char* wantedNetwork(const PeerInfo& self) {
  return self.netName[0] ? self.netName : config().netName.c_str();
}

// A transport this configuration enables, with `caps`, that can link the pair.
bool links(const Transport* t, const PeerInfo& self, const PeerInfo& peer, uint32_t caps) {
  return t->enabled() && t->has(caps) && t->canConnect(self, peer);
}

bool named(const net::Network* n, const char* want) { return n && strcasecmp(n->name().c_str(), want) == 0; }

// The networks this process has, in priority order ("none" when it has none).
std::string loadedNetworks() {
  std::string s;
  for (const Transport* t : transports())
    if (net::Network* n = networkOf(t)) s += (s.empty() ? "" : ", ") + n->name();
  return s.empty() ? "none" : s;
}

}  // namespace

std::vector<Activity> activity() {
  std::vector<Activity> a;
  for (const Transport* t : transports()) a.push_back(t->activity());
  return a;
}

std::string describeActivity(const std::vector<Activity>& before, const std::vector<Activity>& after) {
  std::string s;
  const auto& list = transports();
  for (size_t i = 0; i < list.size() && i < before.size() && i < after.size(); ++i) {
    Activity d = after[i].since(before[i]);
    if (d.any()) s += (s.empty() ? "" : "; ") + std::string(list[i]->name()) + ": " + d.str();
  }
  return s;
}

double networkGBps(const char* netName) {
  // The rate of the network a rank would use between nodes, where it reports one: a
  // plugin's or IB's (TCP's interface speed is the caller's to read: 0 here).
  for (const Transport* t : transports()) {
    net::Network* n = networkOf(t);
    if (!n || named(n, "Socket") || (netName && *netName && !named(n, netName))) continue;
    double mbps = 0;  // a node's rails together
    for (int d = 0; d < n->devices(); ++d) mbps += n->properties(d).speedMbps;
    return mbps / 8000.0;
  }
  return 0;
}

Transport& selectTransport(const PeerInfo& self, const PeerInfo& peer, uint32_t required) {
  const char* want = wantedNetwork(self);
  for (Transport* t : transports()) {
    if (!links(t, self, peer, required)) continue;
    if (*want && dynamic_cast<net::NetTransport*>(t) && !named(networkOf(t), want)) continue;
    return *t;
  }
  if (*want && !self.sameHost(peer))
    fail(ncclInvalidUsage,
         "network \"%s\" (ncclConfig_t.netName or NCCL_NET) is not available to connect rank %d (%s) and rank %d "
         "(%s) (this process has: %s; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET says why)",
         want, self.rank, self.hostname, peer.rank, peer.hostname, loadedNetworks().c_str());
  fail(ncclInternalError, "no transport with capabilities 0x%x can connect rank %d (%s, pid %d) and rank %d (%s, pid %d)",
       required, self.rank, self.hostname, self.pid, peer.rank, peer.hostname, peer.pid);
}

bool anyTransportLinks(const PeerInfo& self, const PeerInfo& peer, uint32_t caps) {
  for (const Transport* t : transports())
    if (links(t, self, peer, caps)) return true;
  return false;
}

}  // namespace strata::transport
