#include "transports/loopback/loopback_transport.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "base/error.h"

namespace strata::transport::loopback {
namespace {

// Regions created by createRegion() and not yet picked up by attachRegion(), by token.
std::mutex gMutex;
std::map<uint64_t, std::pair<std::shared_ptr<void>, size_t>> gPending;  // memory, bytes
uint64_t gNextToken = 1;

std::shared_ptr<void> allocateRegion(size_t bytes) {
  void* mem = aligned_alloc(4096, (bytes + 4095) & ~size_t{4095});
  if (!mem) fail(ncclSystemError, "out of host memory allocating %zu bytes of loopback staging", bytes);
  memset(mem, 0, bytes);  // touch every page now rather than on the data path
  return std::shared_ptr<void>(mem, free);
}

// One address space: the other end's addresses are this process's.
class SameProcess final : public PeerMemory {
 public:
  bool write(const FifoOffer& to, size_t offset, const void* src, size_t bytes) override {
    memcpy(reinterpret_cast<char*>(to.addr) + offset, src, bytes);
    return true;
  }
  bool read(const FifoOffer& from, size_t offset, void* dst, size_t bytes) override {
    memcpy(dst, reinterpret_cast<const char*>(from.addr) + offset, bytes);
    return true;
  }
};

}  // namespace

std::unique_ptr<PeerMemory> LoopbackTransport::peerMemory(const ConnectRequest&, FifoHeader*, bool) {
  return std::make_unique<SameProcess>();
}

SharedRegion LoopbackTransport::createRegion(const ConnectRequest& req, size_t bytes, std::string* handle) {
  auto mem = allocateRegion(bytes);
  uint64_t token;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    token = gNextToken++;
    gPending[token] = {mem, bytes};
  }
  *handle = std::to_string(token);
  return SharedRegion{mem.get(), bytes, mem, Doorbell::attach(req.peer->bellName)};
}

SharedRegion LoopbackTransport::attachRegion(const ConnectRequest& req, const std::string& handle) {
  std::shared_ptr<void> mem;
  size_t bytes;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    auto it = gPending.find(std::stoull(handle));
    STRATA_REQUIRE(it != gPending.end(), ncclInternalError,
                   "loopback: no staging buffer for handle %s from rank %d", handle.c_str(), req.peer->rank);
    mem = std::move(it->second.first);
    bytes = it->second.second;
    gPending.erase(it);
  }
  return SharedRegion{mem.get(), bytes, mem, Doorbell::attach(req.peer->bellName)};
}

}  // namespace strata::transport::loopback
