// The one-shot all-reduce, on FIFOs (Simple) and on flag-tagged words (LL).
#pragma once

#include <memory>
#include <vector>

#include "algorithms/task.h"
#include "base/doorbell.h"
#include "device/cpu_reduce.h"
#include "nccl.h"

namespace strata::algorithms::one_shot {

// One-shot all-reduce: every rank sends its (pre-multiplied) input to every peer
// and reduces all n contributions itself, in rank order, so all ranks get the
// same bits. One hop instead of a ring's 2(n-1): the small-message algorithm.
struct OneShotArgs {
  const char* fn;
  int rank;
  const char* sendbuff;
  char* recvbuff;
  size_t count;
  ncclDataType_t type;
  device::ReduceOp op;
  // Indexed by rank, null for this rank; kept by the communicator's one-shot
  // state, so that planning a call allocates nothing for them.
  const std::vector<transport::SendConnection*>* to;
  const std::vector<transport::RecvConnection*>* from;
  char* scratch;                                 // one chunk: this rank's prepared input
  size_t chunkBytes;                             // at most the connections' slot size
};
std::unique_ptr<Task> makeOneShotTask(OneShotArgs args);

// The LL protocol's state for one communicator: per peer, a region this rank
// reads (written by the peer) and one it writes (in the peer's memory), each
// two slots of 8-byte words, plus a round counter that all ranks advance together.
constexpr size_t kLlWordsPerSlot = 1024;  // 4 KiB of data per round
struct LlMesh {
  std::vector<const uint64_t*> in;  // by rank; null for this rank
  std::vector<uint64_t*> out;
  std::vector<Doorbell*> outBells;  // the peers' doorbells
  std::vector<char> staging;        // n x 4 KiB: every rank's contribution this round
  std::vector<size_t> got;          // words received from each rank this round
  std::vector<const void*> inputs;  // every rank's staged contribution, by rank
  uint64_t round = 0;
};

// The same all-reduce over the LL protocol: data goes through `ll`; the mesh
// FIFOs in `args` only carry the abort flags (scratch and chunkBytes are unused).
std::unique_ptr<Task> makeLlOneShotTask(OneShotArgs args, LlMesh* ll);

}  // namespace strata::algorithms::one_shot
