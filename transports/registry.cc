#include "base/config.h"
#include "base/error.h"
#include "transports/common/fifo.h"
#include "transports/loopback/loopback_transport.h"
#include "transports/shm/shm_transport.h"
#include "transports/socket/socket_transport.h"

namespace strata::transport {

const std::vector<Transport*>& transports() {
  static const std::vector<Transport*> list = [] {
    std::vector<Transport*> l;
    static loopback::LoopbackTransport loopback;
    static shm::ShmTransport shm;
    static socket::SocketTransport socket;
    l.push_back(&loopback);
    if (!config().shmDisable) l.push_back(&shm);
    l.push_back(&socket);
    return l;
  }();
  return list;
}

bool progressBackground() { return socket::progressNetwork(); }
bool needsPolling() { return socket::networkActive(); }

SharedRegion Transport::createRegion(const ConnectRequest&, size_t, std::string*) {
  fail(ncclInternalError, "transport %s cannot share memory regions", name());
}

SharedRegion Transport::attachRegion(const ConnectRequest&, const std::string&) {
  fail(ncclInternalError, "transport %s cannot share memory regions", name());
}

std::unique_ptr<RecvConnection> MemoryTransport::listen(const ConnectRequest& req, std::string* handle) {
  SharedRegion r = createRegion(req, fifoBytes(req.slotBytes, req.slots), handle);
  fifoInit(r.data, req.slotBytes, req.slots);
  return makeFifoReceiver(r.data, r.keepAlive, r.peerBell);
}

std::unique_ptr<SendConnection> MemoryTransport::connect(const ConnectRequest& req, const std::string& handle) {
  SharedRegion r = attachRegion(req, handle);
  return makeFifoSender(r.data, r.keepAlive, r.peerBell);
}

Transport& selectTransport(const PeerInfo& self, const PeerInfo& peer) {
  for (Transport* t : transports())
    if (t->canConnect(self, peer)) return *t;
  fail(ncclInternalError, "no transport can connect rank %d (%s, pid %d) and rank %d (%s, pid %d)", self.rank,
       self.hostname, self.pid, peer.rank, peer.hostname, peer.pid);
}

}  // namespace strata::transport
