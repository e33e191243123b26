#include "transports/shm/shm_transport.h"

#include <sys/mman.h>

#include "base/shm_segment.h"
#include "transports/common/fifo.h"

namespace strata::transport::shm {

std::unique_ptr<RecvConnection> ShmTransport::listen(const ConnectRequest& req, std::string* handle) {
  auto seg = std::make_shared<ShmSegment>(ShmSegment::create(fifoBytes(req.slotBytes, req.slots)));
  fifoInit(seg->data(), req.slotBytes, req.slots);
  *handle = seg->name();
  void* mem = seg->data();
  return makeFifoReceiver(mem, seg, Doorbell::attach(req.peer->bellName));
}

std::unique_ptr<SendConnection> ShmTransport::connect(const ConnectRequest& req, const std::string& handle) {
  auto seg = std::make_shared<ShmSegment>(ShmSegment::open(handle));
  // Both ends have it mapped now: drop the name so nothing is left behind if either dies.
  shm_unlink(handle.c_str());
  void* mem = seg->data();
  return makeFifoSender(mem, seg, Doorbell::attach(req.peer->bellName));
}

}  // namespace strata::transport::shm
