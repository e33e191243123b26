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

// True when this process may reach process `pid` with CMA: reads the word the
// other end left in the FIFO header back through its own address for it.
bool probeCma(pid_t pid, uint64_t probeAddr, uint64_t probe, std::string* why) {
  if (!config().cma) {
    *why = "STRATA_CMA=0";
    return false;
  }
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(probeAddr), sizeof got};
  ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (n != static_cast<ssize_t>(sizeof got)) {
    *why = std::string("process_vm_readv: ") + (n < 0 ? strerror(errno) : "short read") +
           " (Yama ptrace_scope, or a container without CAP_SYS_PTRACE?)";
    return false;
  }
  if (got != probe) *why = "process_vm_readv read another value (a different address space?)";
  return got == probe;
}

// Below this, a Cross Memory Attach transfer (a system call that pins the pages)
// takes longer than the two copies through the slots: a process_vm_writev after the
// receiver's offer took 1.5-3.8x as long as the slots up to 256 KiB on a 2-core VM,
// and a first version at 256 KiB was no faster than CMA at 128 KiB pieces
// (docs/perf.md, "One-sided transfers below 128 KiB").
constexpr size_t kCmaWorthBytes = 128 << 10;

// The other end's memory: a plain copy into or out of a segment both map
// (ncclMemAlloc's buffers), else Cross Memory Attach, probed at first use (the
// sender's half of the header is filled only when it connects).
class CmaPeer final : public PeerMemory {
 public:
  CmaPeer(const ConnectRequest& req, const FifoHeader* h, bool ofReceiver)
      : h_(h), ofReceiver_(ofReceiver), self_(req.self->rank), peer_(req.peer->rank) {}

  bool write(const FifoOffer& to, size_t offset, const void* src, size_t bytes) override {
    if (char* base = mapped(to)) {
      memcpy(base + to.segmentOffset + offset, src, bytes);
      return true;
    }
    return cma(true, reinterpret_cast<char*>(to.addr) + offset, const_cast<void*>(src), bytes);
  }
  bool read(const FifoOffer& from, size_t offset, void* dst, size_t bytes) override {
    if (char* base = mapped(from)) {
      memcpy(dst, base + from.segmentOffset + offset, bytes);
      return true;
    }
    return cma(false, reinterpret_cast<char*>(from.addr) + offset, dst, bytes);
  }
  bool worthIt(const FifoOffer& o, size_t bytes) const override { return directWorthIt(o, bytes, bulkBytes_); }

 private:
  bool usable() {
    if (probed_) return cma_;
    probed_ = true;
    pid_ = ofReceiver_ ? h_->receiverPid : h_->senderPid;
    std::string why;
    cma_ = probeCma(pid_, ofReceiver_ ? h_->probeAddr : h_->senderProbeAddr,
                    ofReceiver_ ? h_->probe : h_->senderProbe, &why);
    STRATA_INFO(kSubsysShm, self_, "shm: one-sided %s rank %d %s%s", ofReceiver_ ? "writes to" : "reads from", peer_,
                cma_ ? "by Cross Memory Attach" : "only with mapped buffers, else through the slots: ", why.c_str());
    return cma_;
  }
  // Moves `bytes` between `local` and the peer's `remote` (writes into it, or reads out of it).
  bool cma(bool writing, void* remote, void* local, size_t bytes) {
    if (!usable()) return false;
    size_t done = 0;
    while (done < bytes) {
      iovec l{static_cast<char*>(local) + done, bytes - done};
      iovec r{static_cast<char*>(remote) + done, bytes - done};
      ssize_t n = writing ? process_vm_writev(pid_, &l, 1, &r, 1, 0) : process_vm_readv(pid_, &l, 1, &r, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // the peer exited, or its memory moved: its health check reports it
        STRATA_WARN(self_, "shm: %s pid %d failed: %s; going through the slots",
                    writing ? "process_vm_writev into" : "process_vm_readv from", pid_,
                    n < 0 ? strerror(errno) : "no progress");
        cma_ = false;
        return false;
      }
      done += static_cast<size_t>(n);
    }
    return true;
  }
  // The peer's ncclMemAlloc segment, mapped once per connection (null if none, or gone).
  char* mapped(const FifoOffer& o) {
    if (!o.segment[0]) return nullptr;
    auto it = segments_.find(o.segment);
    if (it == segments_.end()) {
      try {
        it = segments_.emplace(o.segment, ShmSegment::open(o.segment)).first;
      } catch (const Error&) {
        return nullptr;
      }
    }
    return static_cast<char*>(it->second.data());
  }

  const FifoHeader* h_;
  size_t bulkBytes_ = config().bulkBytes();
  bool ofReceiver_;
  int self_, peer_;
  pid_t pid_ = 0;
  bool probed_ = false, cma_ = false;
  std::map<std::string, ShmSegment> segments_;
};

}  // namespace

// A segment both map: always (a plain copy). Else Cross Memory Attach from 128 KiB,
// except where both ends copy anyway and the transfer's registration has
// Config::bulkBytes (256 KiB) or more: a ring's write (its output) and a balanced read
// (DirectRead's input, all-gather's or a 2-rank broadcast's) go through the slots.
// The kernel's page-by-page copy runs at 0.29-0.59x memcpy's rate (docs/perf.md, the
// CMA model), in the caches or not; with two copies through the slots, one on each side at once, an all-reduce took
// 0.54-0.96x its time at 256 KiB-16 MiB, DirectRead's all-gather 0.5-0.75x from 4 MiB
// (4 ranks) or 8 MiB (2 ranks) and 0.87-1.05x below (docs/perf.md, "Exchanges through
// the slots from 256 KiB"). Other point-to-point transfers keep it: a gather's root
// would make every second copy itself (0.66-0.78x at 128 MiB through the slots;
// docs/perf.md, "Large ring writes through the slots").
bool directWorthIt(const FifoOffer& o, size_t bytes, size_t bulkBytes) {
  if (o.segment[0] || bytes == 0) return true;
  return bytes >= kCmaWorthBytes && !(o.bothCopy() && o.region >= bulkBytes);
}

SharedRegion ShmTransport::createRegion(const ConnectRequest& req, size_t bytes, std::string* handle) {
  auto seg = std::make_shared<ShmSegment>(ShmSegment::create(bytes));
  *handle = seg->name();
  return SharedRegion{seg->data(), seg->size(), seg, Doorbell::attach(req.peer->bellName)};
}

SharedRegion ShmTransport::attachRegion(const ConnectRequest& req, const std::string& handle) {
  std::shared_ptr<ShmSegment> seg;
  try {
    seg = std::make_shared<ShmSegment>(ShmSegment::open(handle));
  } catch (const Error& e) {
    // The peer made it and removes it when its communicator closes: it is gone.
    fail(ncclRemoteError,
         "rank %d (pid %d) closed its end of the connection before this rank attached to it (it destroyed or "
         "aborted its communicator, or exited): %s",
         req.peer->rank, req.peer->pid, e.what());
  }
  // Both ends have it mapped now: drop the name so nothing is left behind if either dies.
  shm_unlink(handle.c_str());
  return SharedRegion{seg->data(), seg->size(), seg, Doorbell::attach(req.peer->bellName)};
}

std::unique_ptr<PeerMemory> ShmTransport::peerMemory(const ConnectRequest& req, FifoHeader* h, bool ofReceiver) {
  return std::make_unique<CmaPeer>(req, h, ofReceiver);
}

}  // namespace strata::transport::shm
