#include "transports/common/memory_transport.h"

namespace strata::transport {

std::unique_ptr<RecvConnection> MemoryTransport::listen(const ConnectRequest& req, std::string* handle) {
  SharedRegion r = createRegion(req, fifoBytes(req.slotBytes, req.slots), handle);
  fifoInit(r.data, req.slotBytes, req.slots);
  return makeFifoReceiver(r.data, r.keepAlive, r.peerBell, peerMemory(req, static_cast<FifoHeader*>(r.data), false));
}

std::unique_ptr<SendConnection> MemoryTransport::connect(const ConnectRequest& req, const std::string& handle) {
  SharedRegion r = attachRegion(req, handle);
  auto* h = static_cast<FifoHeader*>(r.data);
  return makeFifoSender(r.data, r.keepAlive, r.peerBell, peerMemory(req, h, true));
}

}  // namespace strata::transport
