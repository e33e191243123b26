// Memory the library owns, registered once with one comm, for one-sided puts whose
// user memory nobody registered: the sender copies the data into a buffer before
// the write, the receiver out of one after it, as NCCL copies through its own
// buffers. One pool holds host memory, another device memory of one GPU (the copies
// are then the GPU's). The buffers of one region share a size, a power of two that
// fits the largest put so far, and are made together in one registration (so how
// many puts happen to be in flight decides nothing): up to 16 (two grouped
// receives' worth) within 2 MiB, or one buffer for a larger put, up to `limit`
// bytes (NCCL keeps 1-4 MiB a peer for point-to-point). A larger put makes a new
// region; the old one goes when its last buffer comes back. Regions are kept for
// the next operation: a steady loop registers nothing after its first.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace strata::transport::net {

class BouncePool {
 public:
  // Where regions come from, and how a put's bytes move in and out of them.
  struct Memory {
    std::function<void*(size_t bytes)> alloc;
    std::function<void(void* p, size_t bytes)> free;              // throws nothing
    std::function<void(void* dst, const void* src, size_t bytes)> copy;
    std::function<void*(void* comm, void* p, size_t bytes)> reg;  // its registration with `comm`
    std::function<void(void* comm, void* mh)> dereg;             // throws nothing
  };
  struct Region;
  struct Buffer {
    char* data;
    void* mh;  // the region's registration
    Region* region;
    bool busy = false;
  };
  struct Region {
    BouncePool* pool;
    void* mem = nullptr;
    size_t bytes = 0, capacity = 0;
    void* mh = nullptr;
    std::vector<Buffer> bufs;
    size_t busy = 0;
  };
  BouncePool(Memory memory, size_t limit) : m_(std::move(memory)), limit_(limit) {}
  ~BouncePool();  // clear(comm) first, while the comm is open (else the regions are freed unregistered)
  BouncePool(const BouncePool&) = delete;
  BouncePool& operator=(const BouncePool&) = delete;

  // Whether a put of `bytes` may go through the pool at all.
  bool fits(size_t bytes) const { return bytes <= limit_; }
  // A free buffer of at least `bytes` (fits(bytes)), registered with `comm`, now
  // busy; null when every buffer of the current region is busy (more puts in flight
  // than it has: the caller registers the put's own memory). Throws what the
  // allocation or the registration throws.
  Buffer* take(void* comm, size_t bytes);
  void give(void* comm, Buffer* b);
  void copy(void* dst, const void* src, size_t bytes) const { m_.copy(dst, src, bytes); }
  // Deregisters and frees every region; call before `comm` closes.
  void clear(void* comm);

 private:
  static constexpr size_t kMaxBuffers = 16;
  static constexpr size_t kRegionBytes = 2 << 20;  // buffers a region holds: as many as fit, at least one
  void drop(void* comm, Region* r);
  Memory m_;
  size_t limit_;
  std::vector<std::unique_ptr<Region>> regions_;  // the current one last
};

}  // namespace strata::transport::net
