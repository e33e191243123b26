// One-shot collectives: every rank sends each peer what that peer's result needs and
// finishes its own result from what arrives, in one hop, over FIFOs (Simple) or over
// flag-tagged words (LL).
#pragma once

#include <memory>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/task.h"
#include "base/doorbell.h"
#include "device/cpu_reduce.h"
#include "nccl.h"

namespace strata::algorithms::one_shot {

// Who sends what to whom in a one-shot collective, per chunk [begin, begin + cnt) of
// the piece (`count` elements: the all-reduce, broadcast and reduce count, the
// reduce-scatter receive count, the all-gather send count). Reductions combine the
// n contributions in rank order, so every rank gets the same bits.
struct Exchange {
  Collective coll = Collective::kAllReduce;
  int rank = 0, n = 1, root = 0;
  size_t count = 0, es = 1;

  bool reduces() const { return traits(coll).reducing; }
  // This rank sends `to` a contribution (all-reduce, reduce-scatter and all-gather send
  // everywhere; a broadcast's root, and a reduce's ranks to the root).
  bool sendsTo(int to) const {
    if (coll == Collective::kBroadcast) return rank == root;
    if (coll == Collective::kReduce) return to == root;
    return true;
  }
  bool getsFrom(int from) const {
    if (coll == Collective::kBroadcast) return from == root;
    if (coll == Collective::kReduce) return rank == root;
    return true;
  }
  // This rank's own contribution is part of its own result.
  bool keepsOwn() const { return getsFrom(rank) && sendsTo(rank); }
  // Where the contribution for rank `to` starts in the send buffer.
  const char* source(const char* send, int to, size_t begin) const {
    size_t piece = coll == Collective::kReduceScatter ? static_cast<size_t>(to) * count : 0;
    return send + (piece + begin) * es;
  }
  // Where the contribution of rank `from` lands (reductions: where their result goes).
  char* target(char* recv, int from, size_t begin) const {
    size_t piece = coll == Collective::kAllGather ? static_cast<size_t>(from) * count : 0;
    return recv + (piece + begin) * es;
  }
  // This rank's result for the chunk: reduce `inputs` (by rank) or place each of them.
  void finish(char* recv, const void* const* inputs, size_t begin, size_t cnt, ncclDataType_t type,
              const device::ReduceOp& op) const;
};

struct OneShotArgs {
  const char* fn;
  Exchange x;
  const char* sendbuff;
  char* recvbuff;
  ncclDataType_t type;
  device::ReduceOp op;
  // Indexed by rank, null for this rank; kept by the communicator's one-shot
  // state, so that planning a call allocates nothing for them.
  const std::vector<transport::SendConnection*>* to;
  const std::vector<transport::RecvConnection*>* from;
  char* scratch;      // one chunk: this rank's prepared contribution to itself
  size_t chunkBytes;  // at most the connections' slot size
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
  std::vector<char> staging;        // (n + 1) x 4 KiB: every rank's contribution this round, and one outgoing
  std::vector<size_t> got;          // words received from each rank this round
  std::vector<const void*> inputs;  // every rank's staged contribution, by rank
  uint64_t round = 0;
};

// The same collectives over the LL protocol: data goes through `ll`; the mesh FIFOs
// in `args` only carry the abort flags (scratch and chunkBytes are unused).
std::unique_ptr<Task> makeLlOneShotTask(OneShotArgs args, LlMesh* ll);

}  // namespace strata::algorithms::one_shot
