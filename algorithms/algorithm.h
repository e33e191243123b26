// What an algorithm is, and the one view of the executor it plans through.
//
// An algorithm says which collectives and protocols it serves, where it applies,
// what it costs (for the tuner), and how it runs: its plan names the links each
// rank needs (by peer and purpose) and queues tasks on lanes. It never names a
// transport; the executor opens the links and progresses the tasks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <typeindex>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/rank_layout.h"
#include "algorithms/task.h"
#include "algorithms/tuner.h"
#include "device/cpu_reduce.h"
#include "nccl.h"
#include "transports/transport.h"

namespace strata {
class Doorbell;
}

namespace strata::algorithms {

// One operation as an algorithm runs it: host buffers, counts per NCCL's
// convention for the call, and the reduction already resolved.
struct CollectiveOp {
  enum class Kind { kCollective, kSend, kRecv };
  Kind kind = Kind::kCollective;
  Collective coll = Collective::kAllReduce;
  const char* fn = "";  // API name, for messages
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  int root = 0;         // root of rooted collectives, peer of a send or receive
  device::ReduceOp op;  // for reducing collectives
  size_t bytes = 0;     // nccl-tests' size of the operation (the tuner's input)
};

// A link is one one-way connection to a peer for one purpose. Ids are hashes of
// the purpose's name and an index (linkId("ring", channel)), the same on every
// rank, so no algorithm splits a range of numbers by hand.
struct LinkKey {
  int peer = -1;
  uint64_t id = 0;
  bool operator<(const LinkKey& o) const { return peer != o.peer ? peer < o.peer : id < o.id; }
  bool operator==(const LinkKey& o) const { return peer == o.peer && id == o.id; }
};
constexpr uint64_t linkId(const char* purpose, int index = 0) {  // FNV-1a of the name, then of the index's bytes
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *purpose; ++purpose) h = (h ^ static_cast<unsigned char>(*purpose)) * 0x100000001b3ull;
  for (int b = 0; b < 4; ++b) h = (h ^ ((static_cast<uint32_t>(index) >> (8 * b)) & 0xff)) * 0x100000001b3ull;
  return h;
}

// Staging geometry of a link; zeros mean the communicator's default
// (NCCL_BUFFSIZE split into STRATA_NSLOTS slots).
struct LinkShape {
  size_t slotBytes = 0;
  int slots = 0;
};

// The open links a task works on, handed to task factories.
class Links {
 public:
  virtual ~Links() = default;
  virtual transport::SendConnection& send(const LinkKey& k) = 0;
  virtual transport::RecvConnection& recv(const LinkKey& k) = 0;
  // A shared region pair with a peer (needRegion): the one this rank owns and the
  // peer stores into, and the peer's one that this rank stores into.
  virtual transport::SharedRegion& regionIn(const LinkKey& k) = 0;
  virtual transport::SharedRegion& regionOut(const LinkKey& k) = 0;
  // [base, base + bytes) registered with the transport of receive link `k`, so
  // the peer may write into it (one-sided writes); cached across operations.
  virtual std::shared_ptr<transport::Registration> registration(const LinkKey& k, void* base, size_t bytes) = 0;
};

using TaskFactory = std::function<std::unique_ptr<Task>(Links&)>;

// Lanes: tasks of one lane run in call order (they share connections); lanes
// run side by side. A lane is named like a link.
struct LaneKey {
  uint64_t id = 0;
  int index = 0;
  bool operator<(const LaneKey& o) const { return id != o.id ? id < o.id : index < o.index; }
};

// What a plan may ask of the executor, for one communicator.
class PlanContext {
 public:
  virtual ~PlanContext() = default;
  virtual const RankLayout& layout() const = 0;
  virtual size_t slotBytes() const = 0;
  virtual int slots() const = 0;  // per link, by default (STRATA_NSLOTS)
  // Ring channels this communicator may use, and the fewest a plan should use.
  virtual int maxChannels() const = 0;
  virtual int minChannels() const = 0;
  // True when some transport with every capability in `caps` connects ranks `a` and `b`.
  virtual bool reachable(int a, int b, uint32_t caps) const = 0;
  // The stream device-memory work of this group goes on (the device proxy's); null
  // for host memory.
  virtual void* deviceStream() = 0;
  // What the transport between ranks `a` and `b` can do (transport::Capability
  // bits); every rank answers alike for any pair.
  virtual uint32_t linkCapabilities(int a, int b) const = 0;
  uint32_t linkCapabilities(int peer) const { return linkCapabilities(layout().rank, peer); }
  // Operations of at least this many bytes move their data with one-sided writes
  // where both links allow it (STRATA_PUT_BYTES; 0: never).
  virtual size_t putBytes() const = 0;
  // The operation being planned shares memory with an earlier collective of its group
  // (it runs once that one is done): nothing of it may be copied while it plans.
  virtual bool waitsForEarlier() const = 0;
  // Two words of mapped pinned host memory the communicator owns, for device-side
  // waits: [0] rises when the communicator is stopped (ncclCommAbort, a failure),
  // [1] takes a kernel's first failure (KernelColl::Why << 8 | rank), which the
  // communicator then reports as its asynchronous error.
  virtual uint32_t* deviceWords() = 0;
  // This rank's CUDA device (-1: it drives none).
  virtual int device() const = 0;
  // The communicator's identity, the same on every rank (its bootstrap magic).
  virtual uint64_t commId() const = 0;
  // The doorbell this rank's thread sleeps on while it waits for progress: a task
  // that hands work to a rank of its own process outside the transports rings it.
  virtual std::shared_ptr<Doorbell> doorbell() = 0;
  // Blocks of device-driven kernels (256 threads) every rank's GPU runs at once, the
  // fewest any rank's GPU holds: the grids of kernels that wait for each other must
  // fit in it (0: some rank has no GPU, or no kernel image for it).
  virtual int kernelBlocks() const = 0;
  // Channels (blocks) a pipelined kernel (device/kernel_pipe.h) takes at most on every
  // rank's GPU: the fewest any holds (0: some rank has none).
  virtual int pipeChannels() const = 0;
  // Links opened before any task of the group is made (both ends must ask in the same group).
  virtual void needSend(const LinkKey& k, LinkShape shape = {}) = 0;
  virtual void needRecv(const LinkKey& k, LinkShape shape = {}) = 0;
  // A pair of zero-filled shared regions of `bytes` with the peer (every rank
  // that asks must be asked by the peer too): host memory both ends map, or
  // (`device`) device memory the peer's GPU maps.
  virtual void needRegion(const LinkKey& k, size_t bytes, bool device = false) = 0;
  virtual void addTask(LaneKey lane, TaskFactory make) = 0;
  // A rank's send to itself and its receive from itself meet in call order.
  virtual void selfSend(const char* fn, const void* buf, size_t bytes) = 0;
  virtual void selfRecv(const char* fn, void* buf, size_t bytes) = 0;
  // Memory that lives until the group has run.
  virtual char* scratch(size_t bytes) = 0;
  // The plan did part of the operation as it planned (a small copy made at once, an
  // input copied into scratch): its tasks alone do not repeat the operation, so the
  // same call made again must plan again (core/kept_call.h, Task::reusable).
  virtual void workedWhilePlanning() = 0;
  // State an algorithm keeps per communicator across operations (made on first use).
  template <typename T>
  T& state() {
    std::shared_ptr<void>& slot = stateSlot(std::type_index(typeid(T)));
    if (!slot) slot = std::make_shared<T>();
    return *static_cast<T*>(slot.get());
  }

 protected:
  virtual std::shared_ptr<void>& stateSlot(std::type_index type) = 0;
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // NCCL_ALGO's name: "Ring", "Tree", ... (unique in the registry)
  virtual const char* name() const = 0;
  // NCCL's names it also answers to in NCCL_ALGO (the device ring to "Ring"), so a
  // setting made for NCCL selects the device algorithm that does what NCCL's would.
  virtual std::vector<const char*> aliases() const { return {}; }
  virtual bool serves(Collective c) const = 0;
  virtual std::vector<Protocol> protocols() const { return {Protocol::kSimple}; }
  // False for how point-to-point work is done: not a choice NCCL_ALGO makes.
  virtual bool selectable() const { return true; }
  // Constraints beyond the collective (several nodes of equal size, ...).
  virtual bool applies(const TuneRequest&) const { return true; }
  // Where it applies but is not preferred, the tuner picks it only if NCCL_ALGO
  // leaves nothing else (so forcing it still works).
  virtual bool preferred(const TuneRequest&) const { return true; }
  // True when each rank opens a link to every other rank (a mesh): n - 1 links'
  // memory and setup per rank, where a ring or a tree opens a few. The tuner
  // prefers it only up to kMaxMeshRanks (tuner.h).
  virtual bool linksEveryRank() const { return false; }
  // True for algorithms that work on device memory (the others work on host memory).
  virtual bool deviceMemory() const { return false; }
  // True for device algorithms whose plan only enqueues kernels on the caller's
  // stream (deviceStream() is the caller's): they run on the calling thread with no
  // proxy, so they must not wait on the host for the stream.
  virtual bool streamOrdered() const { return false; }
  // True when the links of warmUp may fail to open: the communicator then goes
  // without this algorithm instead of failing.
  virtual bool optional() const { return false; }
  virtual double costUs(const TuneRequest& r, Protocol p) const = 0;
  virtual void plan(PlanContext& ctx, const CollectiveOp& op, Protocol p) const = 0;
  // Registers the links worth opening when the communicator is made; false when
  // the algorithm cannot run on this communicator at all.
  virtual bool warmUp(PlanContext&) const { return true; }
};

// Every algorithm this build has, in the order ties are broken (registry.cc).
const std::vector<const Algorithm*>& registry();
// The algorithm named `name`, or null.
const Algorithm* findAlgorithm(const char* name);

}  // namespace strata::algorithms
