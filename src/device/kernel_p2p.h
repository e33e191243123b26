// Point-to-point on the device-driven path: a group's sends and receives on one
// communicator as one kernel on the caller's stream, no host in the loop. All of a
// group's transfers run in one kernel because they may depend on each other (a ring
// exchange: every rank sends to the next and receives from the previous; kernels
// one per transfer would wait on each other in a cycle once a message outgrows the
// slots).
//
// Each ordered pair of ranks (s -> r) has a channel in r's p2p region: kSlots slots
// of kChunk bytes from s. A transfer moves in chunks; block b of a lane (the sends to
// one peer, or the receives from one) handles its share of every chunk. Per block,
// s counts the chunks it has put into r's slots ("ready", in r's region) and r the
// chunks it has taken out ("done", in s's region): s writes chunk g into slot
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
  static constexpr int kBlocks = 4;              // blocks per lane
  static constexpr int kSlots = 4;
  static constexpr size_t kChunk = 128 << 10;
  // ready[source][block], done[dest][block], then size[source][block][slot] (the
  // bytes of the transfer each chunk in a slot belongs to); slots after.
  static constexpr size_t kFlagBytes = (2 + kSlots) * kMaxRanks * kBlocks * sizeof(uint64_t);

  struct Op {
    int peer = 0;
    bool send = false;
    char* buf = nullptr;  // const for a send
    size_t bytes = 0;
  };
  int rank = 0, n = 1;
  int ops = 0;
  Op op[kMaxOps];
  int lanes = 0;  // blocks = lanes * kBlocks; lane l serves (lanePeer[l], laneSend[l])
  int lanePeer[kMaxLanes] = {};
  bool laneSend[kMaxLanes] = {};
  char* region[kMaxRanks] = {};  // each rank's p2p region as this rank addresses it
  uint64_t* counts = nullptr;    // device memory: [2][kMaxRanks][kBlocks]: chunks sent to, taken from each peer
  const volatile uint32_t* stop = nullptr;
  volatile uint32_t* error = nullptr;
  uint64_t timeoutNs = 0;

  static constexpr size_t regionBytes(int n) { return kFlagBytes + static_cast<size_t>(n) * kSlots * kChunk; }
  STRATA_KERNEL_FN uint64_t* ready(int owner, int source, int block) const {
    return reinterpret_cast<uint64_t*>(region[owner]) + source * kBlocks + block;
  }
  STRATA_KERNEL_FN uint64_t* done(int owner, int dest, int block) const {
    return reinterpret_cast<uint64_t*>(region[owner]) + (kMaxRanks + dest) * kBlocks + block;
  }
  STRATA_KERNEL_FN uint64_t* size(int owner, int source, int block, uint64_t g) const {
    return reinterpret_cast<uint64_t*>(region[owner]) + 2 * kMaxRanks * kBlocks +
           (source * kBlocks + block) * kSlots + g % kSlots;
  }
  // Block b's quarter of the slot for its chunk g: each block of a lane counts its own
  // chunks (a block with no part of a short chunk skips it), so blocks may be at
  // different chunks of one slot and must never share its bytes.
  static constexpr size_t kQuarter = kChunk / kBlocks;
  STRATA_KERNEL_FN char* part(int owner, int source, uint64_t g, int block) const {
    return region[owner] + kFlagBytes + (static_cast<size_t>(source) * kSlots + g % kSlots) * kChunk + block * kQuarter;
  }
  STRATA_KERNEL_FN uint64_t* count(bool send, int peer, int block) const {
    return counts + ((send ? 0 : 1) * kMaxRanks + peer) * kBlocks + block;
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
STRATA_KERNEL_FN inline bool awaitCount(const K& k, P& p, const uint64_t* flag, uint64_t want, int peer) {
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

// Block b of lane l: every transfer of the lane in call order, chunk by chunk.
template <class P>
STRATA_KERNEL_FN inline void runP2pBlock(const KernelP2p& k, P& p, int blockId) {
  const int l = blockId / KernelP2p::kBlocks, b = blockId % KernelP2p::kBlocks;
  const int peer = k.lanePeer[l];
  const bool send = k.laneSend[l];
  uint64_t* counter = k.count(send, peer, b);
  uint64_t g = *static_cast<volatile uint64_t*>(counter);
  bool ok = true;
  for (int i = 0; ok && i < k.ops; ++i) {
    const KernelP2p::Op& o = k.op[i];
    if (o.peer != peer || o.send != send) continue;
    for (size_t at = 0; ok && at < o.bytes; at += KernelP2p::kChunk) {
      size_t chunk = minSize(KernelP2p::kChunk, o.bytes - at);
      size_t share = ((chunk + KernelP2p::kBlocks - 1) / KernelP2p::kBlocks + 15) / 16 * 16;  // at most kQuarter
      size_t lo = minSize(b * share, chunk), hi = minSize(lo + share, chunk);
      if (lo == hi) continue;  // this block has no part of a short chunk: the peer's block skips it too
      if (send) {
        if (g + 1 > KernelP2p::kSlots) ok = awaitCount(k, p, k.done(k.rank, peer, b), g + 1 - KernelP2p::kSlots, peer);
        if (!ok) break;
        p.copy(k.part(peer, k.rank, g, b), o.buf + at + lo, hi - lo);
        p.barrierOr(0);
        if (p.thread() == 0) {
          p.storeRelease(k.size(peer, k.rank, b, g), o.bytes);  // published by the fence with the data
          p.fenceSystem();
          p.storeRelease(k.ready(peer, k.rank, b), g + 1);
        }
      } else {
        ok = awaitCount(k, p, k.ready(k.rank, peer, b), g + 1, peer);
        // A send and its receive of different sizes would leave the two ends' counts
        // apart for good: fail the communicator now, naming the peer (thread 0 reads
        // the size; the block learns it through the barrier).
        uint32_t differ = ok && p.thread() == 0 && p.loadAcquire(k.size(k.rank, peer, b, g)) != o.bytes;
        if (p.barrierOr(differ)) {
          if (p.thread() == 0) giveUp(k, p, KernelColl::kSizeMismatch, peer);
          ok = false;
        }
        if (!ok) break;
        p.copy(o.buf + at + lo, k.part(k.rank, peer, g, b), hi - lo);
        p.barrierOr(0);  // every thread's reads of the slot are done before it is handed back
        if (p.thread() == 0) {
          p.fenceSystem();
          p.storeRelease(k.done(peer, k.rank, b), g + 1);
        }
      }
      ++g;
    }
  }
  // A sender ends only when its peer has taken every chunk: the peer's last "done"
  // store goes into this rank's region, which must not be freed (the communicator
  // destroyed) before it lands.
  if (ok && send) ok = awaitCount(k, p, k.done(k.rank, peer, b), g, peer);
  p.barrierOr(0);
  if (p.thread() == 0) *counter = g;
}

}  // namespace kernel
}  // namespace strata::device
