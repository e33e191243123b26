#include "core/scratch_arena.h"

#include <algorithm>

namespace strata::core {

char* ScratchArena::take(size_t bytes) {
  Buffer* best = nullptr;
  for (Buffer& b : kept_)
    if (!b.taken && b.bytes >= bytes && (!best || b.bytes < best->bytes)) best = &b;
  if (!best) {
    // The free buffers are all too small: given back, so what is kept stays bounded by
    // what one round takes at once.
    kept_.erase(std::remove_if(kept_.begin(), kept_.end(), [](const Buffer& b) { return !b.taken; }), kept_.end());
    kept_.push_back({std::unique_ptr<char[]>(new char[bytes > 0 ? bytes : 1]), bytes, false});
    best = &kept_.back();
  }
  best->taken = true;
  return best->mem.get();
}

void ScratchArena::recycle() {
  for (Buffer& b : kept_) b.taken = false;
}

size_t ScratchArena::keptBytes() const {
  size_t sum = 0;
  for (const Buffer& b : kept_) sum += b.bytes;
  return sum;
}

}  // namespace strata::core
