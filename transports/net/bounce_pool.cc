#include "transports/net/bounce_pool.h"

#include <algorithm>

namespace strata::transport::net {
namespace {

constexpr size_t kMinBuffer = 64 << 10;

size_t roundUp(size_t bytes) {
  size_t n = kMinBuffer;
  while (n < bytes) n *= 2;
  return n;
}

}  // namespace

BouncePool::~BouncePool() {
  for (auto& r : regions_) m_.free(r->mem, r->bytes);  // clear() deregistered them
}

BouncePool::Buffer* BouncePool::take(void* comm, size_t bytes) {
  if (regions_.empty() || bytes > regions_.back()->capacity) {
    auto r = std::make_unique<Region>();
    r->pool = this;
    r->capacity = std::min(roundUp(bytes), std::max(bytes, limit_));
    size_t n = std::max<size_t>(1, std::min(kMaxBuffers, kRegionBytes / r->capacity));
    r->bytes = n * r->capacity;
    r->mem = m_.alloc(r->bytes);
    try {
      r->mh = m_.reg(comm, r->mem, r->bytes);
    } catch (...) {
      m_.free(r->mem, r->bytes);
      throw;
    }
    for (size_t i = 0; i < n; ++i)
      r->bufs.push_back(Buffer{static_cast<char*>(r->mem) + i * r->capacity, r->mh, r.get()});
    Region* old = regions_.empty() ? nullptr : regions_.back().get();
    regions_.push_back(std::move(r));
    if (old && old->busy == 0) drop(comm, old);
  }
  Region& cur = *regions_.back();
  for (Buffer& b : cur.bufs)
    if (!b.busy) {
      b.busy = true;
      ++cur.busy;
      return &b;
    }
  return nullptr;
}

void BouncePool::give(void* comm, Buffer* b) {
  b->busy = false;
  Region* r = b->region;
  if (--r->busy == 0 && r != regions_.back().get()) drop(comm, r);
}

// Out of the list first, so that nothing reaches it again whatever the rest throws.
void BouncePool::drop(void* comm, Region* r) {
  auto it = std::find_if(regions_.begin(), regions_.end(), [r](const auto& p) { return p.get() == r; });
  std::unique_ptr<Region> gone = std::move(*it);
  regions_.erase(it);
  m_.dereg(comm, gone->mh);
  m_.free(gone->mem, gone->bytes);
}

void BouncePool::clear(void* comm) {
  while (!regions_.empty()) drop(comm, regions_.back().get());
}

}  // namespace strata::transport::net
