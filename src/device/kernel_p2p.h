// Point-to-point on the device-driven path: a group's sends and receives on one
// communicator as one kernel on the caller's stream, no host in the loop. All of a
// group's transfers run in one kernel because they may depend on each other (a ring
// exchange: every rank sends to the next and receives from the previous; kernels
// one per transfer would wait on each other in a cycle once a message outgrows the
// slots).
//
// Each ordered pair of ranks (s -> r) has a channel in r's p2p region: kSlots slots
// of kChunk bytes from s. A transfer moves in chunks of kParts parts; a lane (the
// sends to one peer, or the receives from one) runs as 1 to 4 blocks
// (blocksPerLane: as many as the GPU holds at once with the rest of the group), block
// b moving parts b, b + blocks, ... of every chunk. Per part, s counts the chunks it
// has put into r's slots ("ready", in r's region) and r the chunks it has taken out
// ("done", in s's region), so the two ends need not run as many blocks: s writes
// chunk g into slot
// g % kSlots once r's done count reaches g + 1 - kSlots, then raises ready to g + 1;
// r waits for ready to reach g + 1, copies the slot out and raises done; s ends when
// r has taken its last chunk (so nothing is stored into a region after its owner
// finished and may have freed it). The counts
// live in device memory between kernels (graph replays advance them); the sends to
// one peer in a group run in call order, as do the receives from one, matching
// NCCL's rule. Every wait ends on the stop word or the timeout, as in kernel_coll.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/kernel_coll.h"

namespace strata::device {

struct KernelP2p {
  static constexpr int kMaxRanks = KernelColl::kMaxRanks;
  static constexpr int kMaxOps = 4 * kMaxRanks;    // a group's transfers this kernel takes (more: the proxy)
  static constexpr int kMaxLanes = 2 * kMaxRanks;  // sends to and receives from each rank
  static constexpr int kParts = 4;               // parts of a chunk, each with its own counts; at most a block each
  static constexpr int kSlots = 4;
  static constexpr size_t kChunk = 128 << 10;
  // ready[source][part], done[dest][part], then size[source][part][slot] (the
  // bytes of the transfer each chunk in a slot belongs to); slots after.
  static constexpr size_t kFlagBytes = (2 + kSlots) * kMaxRanks * kParts * sizeof(uint64_t);

  struct Op {
    int peer = 0;
    bool send = false;
    char* buf = nullptr;  // const for a send
    size_t bytes = 0;
  };
  int rank = 0, n = 1;
  int ops = 0;
  Op op[kMaxOps];
  int lanes = 0;  // lane l serves (lanePeer[l], laneSend[l])
  int blocksPerLane = kParts;  // 1 to kParts: the kernel's grid is lanes * blocksPerLane
  int lanePeer[kMaxLanes] = {};
  bool laneSend[kMaxLanes] = {};
  char* region[kMaxRanks] = {};  // each rank's p2p region as this rank addresses it
  uint64_t* counts = nullptr;    // device memory: [2][kMaxRanks][kParts]: chunks sent to, taken from each peer
  const volatile uint32_t* stop = nullptr;
  volatile uint32_t* error = nullptr;
  uint64_t timeoutNs = 0;
  bool skipBarrier = false;  // the mutation stage's fault (base/mutation.h): a chunk's flag without the barrier

  static constexpr size_t regionBytes(int n) { return kFlagBytes + static_cast<size_t>(n) * kSlots * kChunk; }
  int blocks() const { return lanes * blocksPerLane; }
  STRATA_KERNEL_FN uint64_t* ready(int owner, int source, int q) const {
    return reinterpret_cast<uint64_t*>(region[owner]) + source * kParts + q;
  }
  STRATA_KERNEL_FN uint64_t* done(int owner, int dest, int q) const {
    return reinterpret_cast<uint64_t*>(region[owner]) + (kMaxRanks + dest) * kParts + q;
  }
  STRATA_KERNEL_FN uint64_t* size(int owner, int source, int q, uint64_t g) const {
    return reinterpret_cast<uint64_t*>(region[owner]) + 2 * kMaxRanks * kParts + (source * kParts + q) * kSlots +
           g % kSlots;
  }
  // Part q's quarter of the slot for its chunk g: each part counts its own chunks (a
  // part with no bytes of a short chunk skips it), so parts may be at different
  // chunks of one slot and must never share its bytes.
  static constexpr size_t kQuarter = kChunk / kParts;
  STRATA_KERNEL_FN char* part(int owner, int source, uint64_t g, int q) const {
    return region[owner] + kFlagBytes + (static_cast<size_t>(source) * kSlots + g % kSlots) * kChunk + q * kQuarter;
  }
  // Part q's bytes [lo, hi) of a chunk: whole 16-byte vectors, empty for some parts of
  // a short chunk (both ends skip those).
  STRATA_KERNEL_FN static void partRange(size_t chunk, int q, size_t* lo, size_t* hi) {
    size_t share = ((chunk + kParts - 1) / kParts + 15) / 16 * 16;  // at most kQuarter
    *lo = q * share < chunk ? q * share : chunk;
    *hi = *lo + share < chunk ? *lo + share : chunk;
  }
  STRATA_KERNEL_FN uint64_t* count(bool send, int peer, int q) const {
    return counts + ((send ? 0 : 1) * kMaxRanks + peer) * kParts + q;
  }
  // Adds a transfer; its lane is made on first use. False when the kernel is full.
  bool add(int peer, bool send, char* buf, size_t bytes) {
    if (ops == kMaxOps || peer < 0 || peer >= n) return false;
    int l = 0;
    while (l < lanes && !(lanePeer[l] == peer && laneSend[l] == send)) ++l;
    if (l == lanes) {
      lanePeer[l] = peer;
      laneSend[l] = send;
      ++lanes;
    }
    op[ops++] = Op{peer, send, buf, bytes};
    return true;
  }
};

namespace kernel {

// Thread 0 waits until *flag reaches `want`; false (in the whole block) on the stop
// word or the timeout, recorded in the error word.
template <class K, class P>
STRATA_KERNEL_INLINE bool awaitCount(const K& k, P& p, const uint64_t* flag, uint64_t want, int peer) {
  uint32_t failed = 0;
  if (p.thread() == 0) {
    uint64_t start = p.now();
    for (uint32_t polls = 1; !failed && p.loadAcquire(flag) < want; ++polls) {
      if (polls % 1024 == 0 && p.loadWord(k.stop)) failed = giveUp(k, p, KernelColl::kStopped, peer);
      else if (polls % 64 == 0 && p.now() - start > k.timeoutNs) failed = giveUp(k, p, KernelColl::kTimedOut, peer);
      else p.pause();
    }
  }
  return !p.barrierOr(failed);
}

// Part q of the chunk [at, at + chunk) of op o, the part's g-th chunk, bytes
// [lo, hi): a sender waits for the slot to be free, fills its quarter and raises
// "ready"; a receiver waits for "ready", checks the sender's size, empties the
// quarter and raises "done".
template <class P>
STRATA_KERNEL_INLINE bool movePart(const KernelP2p& k, P& p, const KernelP2p::Op& o, size_t at, int q, uint64_t g,
                                      size_t lo, size_t hi) {
  const int peer = o.peer;
  if (o.send) {
    if (g + 1 > KernelP2p::kSlots && !awaitCount(k, p, k.done(k.rank, peer, q), g + 1 - KernelP2p::kSlots, peer))
      return false;
    p.copy(k.part(peer, k.rank, g, q), o.buf + at + lo, hi - lo);
    if (!k.skipBarrier) p.barrierOr(0);  // every thread's stores of the slot are made before the flag
    if (p.thread() == 0) {
      p.storeRelease(k.size(peer, k.rank, q, g), o.bytes);  // published by the fence with the data
      p.fenceSystem();
      p.storeRelease(k.ready(peer, k.rank, q), g + 1);
    }
    return true;
  }
  bool ok = awaitCount(k, p, k.ready(k.rank, peer, q), g + 1, peer);
  // A send and its receive of different sizes would leave the two ends' counts apart
  // for good: fail the communicator now, naming the peer (thread 0 reads the size;
  // the block learns it through the barrier).
  uint32_t differ = ok && p.thread() == 0 && p.loadAcquire(k.size(k.rank, peer, q, g)) != o.bytes;
  if (p.barrierOr(differ)) {
    if (p.thread() == 0) giveUp(k, p, KernelColl::kSizeMismatch, peer);
    return false;
  }
  if (!ok) return false;
  p.copy(o.buf + at + lo, k.part(k.rank, peer, g, q), hi - lo);
  p.barrierOr(0);  // every thread's reads of the slot are done before it is handed back
  if (p.thread() == 0) {
    p.fenceSystem();
    p.storeRelease(k.done(peer, k.rank, q), g + 1);
  }
  return true;
}

// Block b of lane l: every transfer of the lane in call order, chunk by chunk, and
// in each chunk the block's parts in order. Both ends go chunk by chunk, so ends
// running different numbers of blocks per lane never wait on each other in a cycle.
template <class P>
STRATA_KERNEL_FN inline void runP2pBlock(const KernelP2p& k, P& p, int blockId) {
  const int l = blockId / k.blocksPerLane, b = blockId % k.blocksPerLane, step = k.blocksPerLane;
  const int peer = k.lanePeer[l];
  const bool send = k.laneSend[l];
  // The block's parts are b, b + step, ...: part j of them is b + j * step. Every index
  // of g is a constant once the loops unroll, so the counts stay in registers.
  uint64_t g[KernelP2p::kParts] = {};
STRATA_UNROLL
  for (int j = 0; j < KernelP2p::kParts; ++j)
    if (b + j * step < KernelP2p::kParts) g[j] = *static_cast<volatile uint64_t*>(k.count(send, peer, b + j * step));
  bool ok = true;
  for (int i = 0; ok && i < k.ops; ++i) {
    const KernelP2p::Op& o = k.op[i];
    if (o.peer != peer || o.send != send) continue;
    for (size_t at = 0; ok && at < o.bytes; at += KernelP2p::kChunk) {
STRATA_UNROLL
      for (int j = 0; j < KernelP2p::kParts; ++j) {
        const int q = b + j * step;
        if (!ok || q >= KernelP2p::kParts) continue;
        size_t lo, hi;
        KernelP2p::partRange(minSize(KernelP2p::kChunk, o.bytes - at), q, &lo, &hi);
        if (lo == hi) continue;  // no bytes of this short chunk: the peer's part skips it too
        if ((ok = movePart(k, p, o, at, q, g[j], lo, hi))) ++g[j];
      }
    }
  }
  // A sender ends only when its peer has taken every chunk: the peer's last "done"
  // store goes into this rank's region, which must not be freed (the communicator
  // destroyed) before it lands.
STRATA_UNROLL
  for (int j = 0; j < KernelP2p::kParts; ++j) {
    const int q = b + j * step;
    if (ok && send && q < KernelP2p::kParts) ok = awaitCount(k, p, k.done(k.rank, peer, q), g[j], peer);
  }
  p.barrierOr(0);
  if (p.thread() == 0) {
STRATA_UNROLL
    for (int j = 0; j < KernelP2p::kParts; ++j)
      if (b + j * step < KernelP2p::kParts) *k.count(send, peer, b + j * step) = g[j];
  }
}

}  // namespace kernel
}  // namespace strata::device
