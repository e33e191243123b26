#include "core/comm_plan.h"

#include <cstring>

#include "base/config.h"
#include "base/error.h"
#include "device/gpu.h"

namespace strata::core {

void CommPlan::reset(void* deviceStream) {
  deviceStream_ = deviceStream;
  sends_.clear();
  recvs_.clear();
  regions_.clear();
  pending_.clear();
  op_ = -1;
  worked_ = false;
  order_.clear();
  selfSends_.clear();
  selfRecvs_.clear();
  scratch_.recycle();
}

int CommPlan::minChannels() const { return config().minChannels; }

uint32_t CommPlan::linkCapabilities(int a, int b) const {
  return transport::selectTransport(comm_.peer(a), comm_.peer(b)).capabilities();
}

size_t CommPlan::putBytes() const { return comm_.putBytes(); }

bool CommPlan::reachable(int a, int b, uint32_t caps) const {
  return transport::anyTransportLinks(comm_.peer(a), comm_.peer(b), caps);
}

void* CommPlan::deviceStream() {
  STRATA_REQUIRE(deviceStream_, ncclInternalError, "rank %d: a device-memory plan outside the device proxy",
                 comm_.rank());
  return deviceStream_;
}

void CommPlan::addTask(algorithms::LaneKey lane, algorithms::TaskFactory make) {
  pending_.push_back({lane, std::move(make), op_});
}

void CommPlan::selfSend(const char* fn, const void* buf, size_t bytes) {
  selfSends_.push_back({fn, const_cast<char*>(static_cast<const char*>(buf)), bytes});
}

void CommPlan::selfRecv(const char* fn, void* buf, size_t bytes) {
  selfRecvs_.push_back({fn, static_cast<char*>(buf), bytes});
}

char* CommPlan::scratch(size_t bytes) { return scratch_.take(bytes); }

void CommPlan::matchSelfCopies() {
  size_t pairs = std::min(selfSends_.size(), selfRecvs_.size());
  for (size_t i = 0; i < pairs; ++i) {
    const SelfCopy &s = selfSends_[i], &r = selfRecvs_[i];
    STRATA_REQUIRE(s.bytes == r.bytes, ncclInvalidUsage,
                   "%s: rank %d sends %zu bytes to itself but its matching receive expects %zu", s.fn, comm_.rank(),
                   s.bytes, r.bytes);
    if (s.ptr == r.ptr || s.bytes == 0) continue;
    // Device buffers of a stream-ordered group: a copy on its stream (captured with it,
    // ordered with its kernels); host buffers, staged ones included: at once.
    if (deviceStream_ && device::isDevicePointer(r.ptr) && device::isDevicePointer(s.ptr))
      device::copyAsync(r.ptr, s.ptr, s.bytes, deviceStream_);
    else
      memmove(r.ptr, s.ptr, s.bytes);
  }
  bool extraRecv = selfRecvs_.size() > pairs;
  STRATA_REQUIRE(selfSends_.size() == selfRecvs_.size(), ncclInvalidUsage,
                 "%s: rank %d has a %s to itself with no matching %s in the same group",
                 (extraRecv ? selfRecvs_ : selfSends_)[pairs].fn, comm_.rank(), extraRecv ? "ncclRecv" : "ncclSend",
                 extraRecv ? "ncclSend" : "ncclRecv");
}

}  // namespace strata::core
