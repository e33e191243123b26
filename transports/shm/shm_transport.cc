#include "transports/shm/shm_transport.h"

#include <sys/mman.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "base/shm_segment.h"

namespace strata::transport::shm {
namespace {

// True when this process may write into process `pid` with CMA: reads the word
// the receiver left in the FIFO header back through its own address.
bool probeCma(pid_t pid, const FifoHeader* h, std::string* why) {
  if (!config().cma) {
    *why = "STRATA_CMA=0";
    return false;
  }
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(h->probeAddr), sizeof got};
  ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (n != static_cast<ssize_t>(sizeof got)) {
    *why = std::string("process_vm_readv: ") + (n < 0 ? strerror(errno) : "short read") +
           " (Yama ptrace_scope, or a container without CAP_SYS_PTRACE?)";
    return false;
  }
  if (got != h->probe) *why = "process_vm_readv read another value (a different address space?)";
  return got == h->probe;
}

class CmaWriter final : public PutWriter {
 public:
  CmaWriter(const ConnectRequest& req, const FifoHeader* h) : pid_(h->receiverPid), self_(req.self->rank) {
    std::string why;
    cma_ = probeCma(pid_, h, &why);
    STRATA_INFO(kSubsysShm, self_, "shm: one-sided writes to rank %d %s%s", req.peer->rank,
                cma_ ? "by Cross Memory Attach" : "only into mapped buffers, else through the slots: ", why.c_str());
  }

  bool write(const FifoOffer& to, size_t offset, const void* src, size_t bytes) override {
    if (to.segment[0])
      if (char* base = mapped(to.segment)) {
        memcpy(base + to.segmentOffset + offset, src, bytes);
        return true;
      }
    if (!cma_) return false;
    size_t done = 0;
    while (done < bytes) {
      iovec local{const_cast<char*>(static_cast<const char*>(src)) + done, bytes - done};
      iovec remote{reinterpret_cast<char*>(to.addr) + offset + done, bytes - done};
      ssize_t n = process_vm_writev(pid_, &local, 1, &remote, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // the receiver exited, or its memory moved: its health check reports it
        STRATA_WARN(self_, "shm: process_vm_writev into pid %d failed: %s; sending through the slots", pid_,
                    n < 0 ? strerror(errno) : "no progress");
        cma_ = false;
        return false;
      }
      done += static_cast<size_t>(n);
    }
    return true;
  }

 private:
  // The receiver's ncclMemAlloc segment, mapped once per connection (null if gone).
  char* mapped(const char* name) {
    auto it = segments_.find(name);
    if (it == segments_.end()) {
      try {
        it = segments_.emplace(name, ShmSegment::open(name)).first;
      } catch (const Error&) {
        return nullptr;
      }
    }
    return static_cast<char*>(it->second.data());
  }

  pid_t pid_;
  int self_;
  bool cma_ = false;
  std::map<std::string, ShmSegment> segments_;
};

}  // namespace

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

std::unique_ptr<PutWriter> ShmTransport::makeWriter(const ConnectRequest& req, FifoHeader* h) {
  return std::make_unique<CmaWriter>(req, h);
}

}  // namespace strata::transport::shm
