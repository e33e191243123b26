// What rank 0 enqueues for a whole operation of ranks sharing its GPU.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/device_shared/board.h"

namespace strata::algorithms::device_shared {

// Device memory for the pre-multiplied inputs of ncclRedOpCreatePreMulSum, grown
// on demand, on the communicator's GPU. `forGraph`: memory of one operation a CUDA
// graph captured, which its replays use while the communicator lives: allocated
// without freeing anything first, and never freed when it grows.
class Scratch {
 public:
  explicit Scratch(bool forGraph = false) : forGraph_(forGraph) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
  char* get(size_t bytes);

 private:
  const bool forGraph_;
  void* p_ = nullptr;
  size_t bytes_ = 0;
  std::vector<void*> kept_;  // outgrown, of a graph
};

// Throws ncclInvalidUsage naming the first rank whose call differs from rank 0's
// (collective, count, type, root, reduction, or the CUDA graph capture its stream
// belongs to): each rank's buffers are sized by its own call.
void checkAlike(const std::vector<SharedPost>& posts, const char* fn);

// Enqueues the operation of `posts` (every rank's part, by rank; at most 8 ranks)
// on `stream`: each reduction one kernel over every input in rank order (the same
// bits as the host path) writing every output it has, each copy one kernel reading
// its source once. The caller orders the stream after each rank's ready event.
// `scratch` takes pre-multiplied inputs, `temp` a reduction whose output overlaps
// its inputs otherwise than in place.
void enqueueShared(const std::vector<SharedPost>& posts, void* stream, Scratch& scratch, Scratch& temp);

}  // namespace strata::algorithms::device_shared
