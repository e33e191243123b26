// Connections between nodes over a Network (network.h): an external NCCL net
// plugin (plugin.h), Strata's IB network (transports/ib) or its TCP network
// (transports/socket), one instance each. Each connection is a ring of slots on
// both ends, in memory registered with the network; the receiver keeps a receive
// posted for every free slot, the sender sends each posted slot, and the network
// moves the bytes. Progressed by the ranks' threads: no helper thread.
#pragma once

#include <atomic>
#include <mutex>
#include <set>

#include "transports/net/network.h"
#include "transports/transport.h"

namespace strata::transport::net {

class NetConnection;

// What the connections of one NetTransport moved (transport.h Activity).
struct NetCounters {
  std::atomic<uint64_t> messages{0}, bytes{0}, puts{0}, putBytes{0}, registrations{0};
  std::atomic<uint64_t> bounceBytes{0};  // of puts, copied through the library's registered buffers (either end)
};

// The connections of one NetTransport that its progress() sweeps, and their counters.
struct LiveConnections {
  std::mutex mu;
  std::set<NetConnection*> set;
  std::atomic<int> count{0};
  NetCounters moved;
};



// Which pairs of ranks a network links.
enum class Reach {
  kOtherHosts,  // ranks on different hosts (what a network between nodes is for)
  kEveryPair,   // any two ranks, on one host too (TCP: processes with NCCL_SHM_DISABLE=1)
};

class NetTransport final : public Transport {
 public:
  // `network` returns the network (null when this process has none); called on every use.
  NetTransport(const char* name, Network* (*network)(), Reach reach = Reach::kOtherHosts)
      : name_(name), network_(network), reach_(reach) {}
  const char* name() const override { return name_; }
  Network* network() const { return network_(); }
  // Slots always; one-sided puts where the network sees each receive's size.
  uint32_t capabilities() const override;
  // Ranks on different hosts (any two, as `reach` says), when a network is loaded.
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override;
  std::unique_ptr<RecvConnection> listen(const ConnectRequest& req, std::string* handle) override;
  std::unique_ptr<SendConnection> connect(const ConnectRequest& req, const std::string& handle) override;
  bool progress() override;
  bool active() const override;
  // A range peers may put into (kPut); persist() keeps it registered with the network.
  std::shared_ptr<Registration> registerMemory(void* base, size_t bytes) override;
  Activity activity() const override;

 private:
  const char* name_;
  Network* (*network_)();
  Reach reach_;
  LiveConnections live_;
  mutable std::once_flag gdrOnce_;
  mutable bool gdr_ = false;
};

}  // namespace strata::transport::net
