// The units of work the executor progresses: a ring schedule on one channel,
// or one point-to-point transfer. Neither ever blocks.
#pragma once

#include <memory>
#include <vector>

#include "algorithms/ring_schedule.h"
#include "device/cpu_reduce.h"
#include "transports/transport.h"

namespace strata::core {

class Task {
 public:
  virtual ~Task() = default;
  // Moves as far as possible without waiting; true if anything moved. Throws on a protocol error.
  virtual bool progress() = 0;
  virtual bool done() const = 0;
  // The rank this task waits for, and whether that rank gave up.
  virtual int waitingOn() const = 0;
  virtual bool peerAborted() const = 0;
  // The API call this task belongs to, for messages.
  virtual const char* fn() const = 0;
};

// What a task last waited for: one rank and one connection. Only that
// connection's peer giving up ends the task: a peer that finished its part and
// destroyed its communicator has aborted its connections, but a task that no
// longer needs that peer must not fail for it.
struct Blocker {
  int peer = -1;
  const transport::SendConnection* send = nullptr;
  const transport::RecvConnection* recv = nullptr;
  void on(int p, const transport::SendConnection* c) {
    peer = p;
    send = c;
    recv = nullptr;
  }
  void on(int p, const transport::RecvConnection* c) {
    peer = p;
    recv = c;
    send = nullptr;
  }
  bool aborted() const { return send ? send->peerAborted() : recv && recv->peerAborted(); }
};

struct RingTaskArgs {
  const char* fn;
  int rank;
  int prevRank;
  int nextRank;
  algorithms::RingParams params;
  const char* sendbuff;
  char* recvbuff;
  ncclDataType_t type;
  device::ReduceOp op;
  transport::RecvConnection* fromPrev;  // null with one rank
  transport::SendConnection* toNext;
  bool streamOutput;  // the output is too large to stay cached: write it past the caches
};
std::unique_ptr<Task> makeRingTask(const RingTaskArgs& args);

// A tree on one lane: partial results flow up from the leaves to the root
// (all-reduce, reduce), then the result flows down (all-reduce, broadcast), in
// slot-sized chunks, so going up and going down overlap.
enum class TreeMode { kAllReduce, kReduce, kBroadcast };
struct TreeTaskArgs {
  const char* fn;
  int rank;
  TreeMode mode;
  int parent;  // rank, or -1 at the root
  std::vector<int> children;
  // Connections: toParent/fromParent are null at the root; one per child in the others.
  transport::SendConnection* toParent;
  transport::RecvConnection* fromParent;
  std::vector<transport::SendConnection*> toChildren;
  std::vector<transport::RecvConnection*> fromChildren;
  const char* sendbuff;
  char* recvbuff;
  size_t begin, length;  // the elements this tree carries
  size_t chunk;          // elements per message
  ncclDataType_t type;
  device::ReduceOp op;
};
std::unique_ptr<Task> makeTreeTask(const TreeTaskArgs& args);

// Runs a list of phases over pieces of one operation as a pipeline: phase k of
// piece p starts once phase k-1 of piece p and phase k of piece p-1 are done
// (each phase keeps its own connections, so pieces stay in order on every one).
// tasks[p][k] is piece p's phase k.
std::unique_ptr<Task> makePipelineTask(std::vector<std::vector<std::unique_ptr<Task>>> tasks);

struct P2pTaskArgs {
  const char* fn;
  int rank;
  int peer;
  char* buffer;
  size_t bytes;
  transport::SendConnection* send;  // exactly one of send / recv
  transport::RecvConnection* recv;
};
std::unique_ptr<Task> makeP2pTask(const P2pTaskArgs& args);

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
  const std::vector<transport::SendConnection*>* to;    // indexed by rank; null for this rank
  const std::vector<transport::RecvConnection*>* from;  // indexed by rank; null for this rank
  char* scratch;                                 // one chunk: this rank's prepared input
  size_t chunkBytes;                             // at most the connections' slot size
};
std::unique_ptr<Task> makeOneShotTask(const OneShotArgs& args);

// The LL protocol's state for one communicator: per peer, a region this rank
// reads (written by the peer) and one it writes (in the peer's memory), each
// two slots of 8-byte words, plus a round counter that all ranks advance together.
constexpr size_t kLlWordsPerSlot = 1024;  // 4 KiB of data per round
struct LlMesh {
  std::vector<const uint64_t*> in;  // by rank; null for this rank
  std::vector<uint64_t*> out;
  std::vector<Doorbell*> outBells;  // the peers' doorbells
  std::vector<char> staging;        // n x 4 KiB: every rank's contribution this round
  uint64_t round = 0;
};

// The same all-reduce over the LL protocol: data goes through `ll`; the mesh
// FIFOs in `args` only carry the abort flags (scratch and chunkBytes are unused).
std::unique_ptr<Task> makeLlOneShotTask(const OneShotArgs& args, LlMesh* ll);

}  // namespace strata::core
