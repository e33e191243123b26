// The device-driven collectives: one kernel on the caller's stream moves a small
// collective between the GPUs of a node with no host in the loop. Each rank owns a
// region every peer maps (flags, then data slots); a rank's kernel writes its data
// into the peers' slots, raises a flag in each peer's region (release, system
// scope), waits for every peer's flag in its own (acquire), then finishes from its
// own slots: reductions combine the ranks' inputs in rank order, so every rank
// gets the same bits. The operation count lives in device memory, so CUDA graph
// replays advance it, and slots alternate by its parity: one barrier per operation
// makes that safe (a rank in operation s heard from every peer in s-1, so every
// peer finished s-2, the last reader of the slots s now writes).
//
// The protocol is written once, here, over a few primitives that the GPU (PTX:
// ld.acquire.sys, st.release.sys, fences, __syncthreads) and the simulated GPUs
// (host atomics, a block as one thread) each provide, so simulated runs execute
// this very code. Every wait is bounded: it ends on the communicator's stop word
// (ncclCommAbort) or after the timeout, recording why in the error word.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/cpu_reduce.h"

#ifdef __CUDACC__
#define STRATA_KERNEL_FN __host__ __device__
#else
#define STRATA_KERNEL_FN
#endif

namespace strata::device {

struct KernelColl {
  static constexpr int kMaxRanks = 8;
  static constexpr int kMaxBlocks = 16;
  // Flags: [block][source rank] words, at the start of each region; slots after.
  static constexpr size_t kFlagBytes = 4096;
  enum Coll : int { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce };
  // What the error word holds: why << 8 | the rank waited for.
  enum Why : uint32_t { kStopped = 1, kTimedOut = 2 };

  int coll = kAllReduce;
  int rank = 0, n = 1, root = 0;
  int blocks = 1;
  ncclDataType_t type = ncclFloat32;
  int es = 4;  // bytes per element
  ReduceOp op;
  const char* send = nullptr;
  char* recv = nullptr;
  size_t count = 0;      // elements of one rank's piece (the all-gather input, the reduce-scatter output, ...)
  size_t slotBytes = 0;  // a multiple of 16
  char* region[kMaxRanks] = {};  // each rank's region as this rank addresses it
  uint64_t* counter = nullptr;   // device memory: [0] operations completed, [1] blocks done with the current one
  const volatile uint32_t* stop = nullptr;  // mapped host memory; nonzero: give up
  volatile uint32_t* error = nullptr;       // mapped host memory; the first failure
  uint64_t timeoutNs = 0;

  STRATA_KERNEL_FN uint64_t* flags(int owner, int block) const {
    return reinterpret_cast<uint64_t*>(region[owner]) + block * kMaxRanks;
  }
  STRATA_KERNEL_FN char* slot(int owner, uint64_t seq, int source) const {
    return region[owner] + kFlagBytes + ((seq & 1) * n + source) * slotBytes;
  }
  // Bytes of the region each rank needs for `n` ranks and slots of `slotBytes`.
  static constexpr size_t regionBytes(int n, size_t slotBytes) { return kFlagBytes + 2 * n * slotBytes; }
};

namespace kernel {

// This block's elements of a piece of `count`: whole 16-byte vectors per block.
STRATA_KERNEL_FN inline void blockRange(const KernelColl& k, int block, size_t* lo, size_t* hi) {
  size_t v = 16 / k.es, per = (k.count + k.blocks - 1) / k.blocks;
  per = (per + v - 1) / v * v;
  *lo = block * per < k.count ? block * per : k.count;
  *hi = *lo + per < k.count ? *lo + per : k.count;
}

STRATA_KERNEL_FN inline uint32_t giveUp(const KernelColl& k, uint32_t why, int peer) {
  if (*k.error == 0) *k.error = why << 8 | static_cast<uint32_t>(peer);
  return 1;
}

// Every peer's flag for this block reaches `seq`; false (everywhere in the block)
// when the stop word rose or the timeout passed first.
template <class P>
STRATA_KERNEL_FN inline bool waitForPeers(const KernelColl& k, P& p, const uint64_t* flags, uint64_t seq) {
  uint32_t failed = 0;
  for (int src = p.thread(); src < k.n && !failed; src += p.threads()) {
    uint64_t start = p.now();
    while (!failed && p.loadAcquire(&flags[src]) < seq) {
      if (*k.stop) failed = giveUp(k, KernelColl::kStopped, src);
      else if (p.now() - start > k.timeoutNs) failed = giveUp(k, KernelColl::kTimedOut, src);
      else p.pause();
    }
  }
  return !p.barrierOr(failed);
}

// Phase 1: this rank's data for [lo, hi) into the slots that need it.
template <class P>
STRATA_KERNEL_FN inline void push(const KernelColl& k, P& p, uint64_t seq, size_t lo, size_t hi) {
  size_t at = lo * k.es, c = hi - lo;
  for (int q = 0; q < k.n; ++q) {
    char* to = k.slot(q, seq, k.rank) + at;
    switch (k.coll) {
      case KernelColl::kAllReduce: p.prepare(to, k.send + at, c); break;
      case KernelColl::kReduceScatter: p.prepare(to, k.send + q * k.count * k.es + at, c); break;
      case KernelColl::kAllGather: p.copy(to, k.send + at, c); break;
      case KernelColl::kBroadcast:
        if (k.rank == k.root) p.copy(to, k.send + at, c);
        break;
      default:
        if (q == k.root) p.prepare(to, k.send + at, c);
        break;
    }
  }
}

// Phase 3: the result for [lo, hi) from this rank's own slots.
template <class P>
STRATA_KERNEL_FN inline void finish(const KernelColl& k, P& p, uint64_t seq, size_t lo, size_t hi) {
  size_t at = lo * k.es, c = hi - lo;
  const char* in[KernelColl::kMaxRanks] = {};
  for (int s = 0; s < k.n; ++s) in[s] = k.slot(k.rank, seq, s) + at;
  switch (k.coll) {
    case KernelColl::kAllGather:
      for (int s = 0; s < k.n; ++s) p.copy(k.recv + s * k.count * k.es + at, in[s], c);
      break;
    case KernelColl::kBroadcast: p.copy(k.recv + at, in[k.root], c); break;
    case KernelColl::kReduce:
      if (k.rank == k.root) p.reduce(k.recv + at, in, k.n, c);
      break;
    default: p.reduce(k.recv + at, in, k.n, c); break;
  }
}

// One block of the kernel.
template <class P>
STRATA_KERNEL_FN inline void runBlock(const KernelColl& k, P& p, int block) {
  uint64_t seq = *static_cast<volatile uint64_t*>(k.counter) + 1;
  size_t lo = 0, hi = 0;
  blockRange(k, block, &lo, &hi);
  push(k, p, seq, lo, hi);
  p.fenceSystem();  // this thread's stores, before the flags
  p.barrierOr(0);
  if (p.thread() == 0)
    for (int q = 0; q < k.n; ++q) p.storeRelease(&k.flags(q, block)[k.rank], seq);
  if (waitForPeers(k, p, k.flags(k.rank, block), seq)) finish(k, p, seq, lo, hi);
  p.barrierOr(0);
  if (p.thread() == 0) {  // the last block done records the operation for the next kernel
    p.fenceDevice();
    if (p.fetchAdd(&k.counter[1], 1) == static_cast<uint64_t>(k.blocks - 1)) {
      k.counter[0] = seq;
      k.counter[1] = 0;
    }
  }
}

}  // namespace kernel
}  // namespace strata::device
