// Host buffers that other processes of this host can map: ncclMemAlloc's memory
// lives in named shared-memory segments, so a peer that is told (name, offset)
// writes into it with a plain copy, no system call on the data path.
#pragma once

#include <cstddef>
#include <string>

namespace strata {

// A page-aligned, pre-faulted, zeroed buffer in its own segment; null when
// /dev/shm has not room for twice that (the caller uses private memory then).
void* allocateShared(size_t bytes);
// Frees a buffer from allocateShared; false if `p` is not one.
bool freeShared(void* p);

struct SharedBufferRef {
  std::string segment;  // the segment's name, for ShmSegment::open
  size_t offset = 0;    // of the address within the segment
};
// Where [p, p + bytes) lives, when it is inside one buffer from allocateShared.
bool findShared(const void* p, size_t bytes, SharedBufferRef* ref);

}  // namespace strata
