#include "transports/net/net_transport.h"

#include <memory>
#include <mutex>

#include "device/gpu.h"
#include "transports/net/net_connection.h"

namespace strata::transport::net {
namespace {

// A range the receiver offers puts into. Offers register for the operation; a
// persisted one (ncclCommRegister) is pinned with the network until deregistered.
class NetRegistration final : public Registration {
 public:
  NetRegistration(void* base, size_t bytes, Network& net) : Registration(base, bytes), net_(net) {}
  ~NetRegistration() override { unpin(); }
  void persist() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pin_) pin_ = net_.pinMemory(base(), bytes());
  }
  void deregister() override {
    unpin();
    Registration::deregister();
  }

 private:
  void unpin() {
    std::lock_guard<std::mutex> lock(mu_);
    if (pin_) net_.unpinMemory(pin_);
    pin_ = nullptr;
  }
  Network& net_;
  std::mutex mu_;
  void* pin_ = nullptr;
};


}  // namespace

uint32_t NetTransport::capabilities() const {
  Network* n = network();
  uint32_t caps = kSlots | kNeedsPolling;
  if (!n || !n->sendSeesReceive()) return caps;
  caps |= kPut;
  // GPUDirect RDMA: the network registers dma-bufs and a GPU here exports them (asked once).
  std::call_once(gdrOnce_, [&] {
    constexpr int kGdr = abi::kPtrCuda | abi::kPtrDmabuf;
    gdr_ = n->devices() > 0 && device::gpuCount() > 0;
    for (int d = 0; d < n->devices(); ++d) gdr_ = gdr_ && (n->properties(d).ptrSupport & kGdr) == kGdr;  // any may be a rail
  });
  return gdr_ ? caps | kDevicePut : caps;
}

std::shared_ptr<Registration> NetTransport::registerMemory(void* base, size_t bytes) {
  Network* n = network();
  if (!n || !n->sendSeesReceive()) return nullptr;
  return std::make_shared<NetRegistration>(base, bytes, *n);
}

bool NetTransport::canConnect(const PeerInfo& self, const PeerInfo& peer) const {
  return (reach_ == Reach::kEveryPair || !self.sameHost(peer)) && network() != nullptr;
}

std::unique_ptr<RecvConnection> NetTransport::listen(const ConnectRequest& req, std::string* handle) {
  return newNetRecv(req, *network(), live_, handle);
}

std::unique_ptr<SendConnection> NetTransport::connect(const ConnectRequest& req, const std::string& handle) {
  return newNetSend(req, *network(), live_, handle);
}

bool NetTransport::progress() {
  if (live_.count.load(std::memory_order_relaxed) == 0) return false;
  std::unique_lock<std::mutex> lock(live_.mu, std::try_to_lock);
  if (!lock.owns_lock()) return true;  // another rank thread is sweeping every connection right now
  for (NetConnection* c : live_.set) c->progressIfFree();
  return !live_.set.empty();
}

Activity NetTransport::activity() const {
  Activity a;
  const NetCounters& m = live_.moved;
  a.messages = m.messages.load(std::memory_order_relaxed);
  a.bytes = m.bytes.load(std::memory_order_relaxed);
  a.puts = m.puts.load(std::memory_order_relaxed);
  a.putBytes = m.putBytes.load(std::memory_order_relaxed);
  a.bounceBytes = m.bounceBytes.load(std::memory_order_relaxed);
  a.registrations = m.registrations.load(std::memory_order_relaxed);
  WireCounters w;
  Network* n = network();
  if (n && n->wireCounters(&w)) {
    a.wire = true;
    a.dataWrites = w.dataWrites;
    a.fifoWrites = w.fifoWrites;
    a.nicRegistrations = w.registrations;
    a.cacheHits = w.cacheHits;
    a.dmabufRegistrations = w.dmabufRegistrations;
    a.flushes = w.flushes;
  }
  return a;
}

bool NetTransport::active() const { return live_.count.load(std::memory_order_relaxed) > 0; }

}  // namespace strata::transport::net
