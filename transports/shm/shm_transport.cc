#include "transports/shm/shm_transport.h"

#include <sys/mman.h>

#include "base/shm_segment.h"

namespace strata::transport::shm {

SharedRegion ShmTransport::createRegion(const ConnectRequest& req, size_t bytes, std::string* handle) {
  auto seg = std::make_shared<ShmSegment>(ShmSegment::create(bytes));
  *handle = seg->name();
  return SharedRegion{seg->data(), seg->size(), seg, Doorbell::attach(req.peer->bellName)};
}

SharedRegion ShmTransport::attachRegion(const ConnectRequest& req, const std::string& handle) {
  auto seg = std::make_shared<ShmSegment>(ShmSegment::open(handle));
  // Both ends have it mapped now: drop the name so nothing is left behind if either dies.
  shm_unlink(handle.c_str());
  return SharedRegion{seg->data(), seg->size(), seg, Doorbell::attach(req.peer->bellName)};
}

}  // namespace strata::transport::shm
