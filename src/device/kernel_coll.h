// The device-driven collectives: one kernel on the caller's stream moves a
// collective between the GPUs of a node with no host in the loop. Each rank owns a
// region every peer maps (flags, then data slots). The kernel works in rounds of
// at most a slot per source; in each step of a round a rank writes data into the
// peers' slots, raises a flag in each peer's region (release, system scope), waits
// for every peer's flag in its own (acquire), then works from its own slots:
// reductions combine the ranks' inputs in rank order, so every rank gets the same
// bits. One-shot rounds take one step; a two-shot round takes two
// (reduce-scatter: each rank reduces its slice; all-gather: the reduced slices).
// Steps are numbered by a count in device memory, so CUDA graph replays advance
// it, and slots alternate by its parity: a full barrier per step makes that safe
// (a rank in step s heard from every peer in s-1, so every peer finished s-2, the
// last reader of the slots s now writes). Blocks work independently, each on the
// same slot range in every round, so that holds per block.
//
// The protocol is written once, here, over a few primitives that the GPU (PTX:
// ld.acquire.sys, st.release.sys, fences, __syncthreads; volatile accesses to the
// host's stop and error words) and the simulated GPUs (host atomics, a block as one
// thread) each provide, so simulated runs execute this very code. Every wait is bounded: it ends on the communicator's stop word
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
  static constexpr int kMaxBlocks = 32;
  // Flags: [block][source rank] words, at the start of each region; slots after.
  static constexpr size_t kFlagBytes = 4096;
  enum Coll : int { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAllToAll, kGather, kScatter };
  // What the error word holds: why << 8 | the rank waited for.
  enum Why : uint32_t { kStopped = 1, kTimedOut = 2, kSizeMismatch = 3 };

  int coll = kAllReduce;
  int rank = 0, n = 1, root = 0;
  int blocks = 1;
  bool split = false;  // two-shot rounds (all-reduce, broadcast, reduce): a slice per rank, two steps
  ncclDataType_t type = ncclFloat32;
  int es = 4;  // bytes per element
  ReduceOp op;
  const char* send = nullptr;
  char* recv = nullptr;
  size_t count = 0;      // elements of one rank's piece (the all-gather input, the reduce-scatter output,
                         // what an all-to-all sends each rank, ...)
  size_t chunk = 0;      // elements of the piece per round (a whole number of 16-byte vectors)
  size_t slotBytes = 0;  // a multiple of 16, at least a round's share of one source
  char* region[kMaxRanks] = {};  // each rank's region as this rank addresses it
  uint64_t* counter = nullptr;   // device memory: [0] steps completed, [1] blocks done with the current kernel
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
  STRATA_KERNEL_FN bool twoShot() const { return split; }
  // Elements of a slot each source fills per round: the round, or (two-shot) a slice of it.
  STRATA_KERNEL_FN size_t span() const { return twoShot() ? chunk / n : chunk; }
  // Steps (barriers) the kernel takes: what it adds to counter[0].
  STRATA_KERNEL_FN uint64_t steps() const { return chunk ? (count + chunk - 1) / chunk * (twoShot() ? 2 : 1) : 0; }
  // Sets chunk and blocks for count (coll, n, es and slotBytes set): a round is up to
  // a slot of the piece (one-shot) or a slot per rank's slice (two-shot), in whole
  // 16-byte vectors so every block's range stays aligned; a block per `blockBytes`
  // of a slot, 1 to kMaxBlocks and to `maxBlocks` (what the GPUs run at once: a
  // block waits for the same block of its peers, so every block must be running).
  void shapeRounds(size_t blockBytes, int maxBlocks = kMaxBlocks) {
    size_t v = 16 / es, slotElems = slotBytes / es;
    size_t share = twoShot() ? (count + n - 1) / n : count;
    size_t span = (share + v - 1) / v * v;
    if (span > slotElems) span = slotElems;
    chunk = twoShot() ? span * n : span;
    if (chunk == 0) chunk = 16 / es;  // an empty operation: no rounds
    size_t b = (span * es + blockBytes - 1) / blockBytes;
    size_t most = maxBlocks < 1 ? 1 : maxBlocks < kMaxBlocks ? maxBlocks : kMaxBlocks;
    blocks = static_cast<int>(b < 1 ? 1 : b > most ? most : b);
  }
};

namespace kernel {

STRATA_KERNEL_FN inline size_t minSize(size_t a, size_t b) { return a < b ? a : b; }

// This block's part of a slot, [lo, hi) in elements, the same in every round:
// whole 16-byte vectors of the span, clipped to `limit` (a short last round).
STRATA_KERNEL_FN inline void blockRange(const KernelColl& k, int block, size_t limit, size_t* lo, size_t* hi) {
  size_t v = 16 / k.es, per = (k.span() + k.blocks - 1) / k.blocks;
  per = (per + v - 1) / v * v;
  *lo = minSize(block * per, limit);
  *hi = minSize(*lo + per, limit);
}

template <class K, class P>  // K: a kernel's arguments with its error word
STRATA_KERNEL_FN inline uint32_t giveUp(const K& k, P& p, uint32_t why, int peer) {
  if (p.loadWord(k.error) == 0) p.storeWord(k.error, why << 8 | static_cast<uint32_t>(peer));
  return 1;
}

// This thread's stores are out; the block's flag for `seq` goes to every rank, and
// every rank's for this block is awaited. False (in the whole block) when the stop
// word rose or the timeout passed first.
// (The block barrier orders the other threads' stores before thread 0's fence and
// release store, which is cumulative. The stop word is host memory: read every
// 1024 polls, not at each.)
template <class P>
STRATA_KERNEL_FN inline bool barrier(const KernelColl& k, P& p, int block, uint64_t seq) {
  p.barrierOr(0);
  if (p.thread() == 0) {
    p.fenceSystem();
    for (int q = 0; q < k.n; ++q) p.storeRelease(&k.flags(q, block)[k.rank], seq);
  }
  const uint64_t* flags = k.flags(k.rank, block);
  uint32_t failed = 0;
  for (int src = p.thread(); src < k.n && !failed; src += p.threads()) {
    uint64_t start = p.now();
    for (uint32_t polls = 1; !failed && p.loadAcquire(&flags[src]) < seq; ++polls) {
      if (polls % 1024 == 0 && p.loadWord(k.stop)) failed = giveUp(k, p, KernelColl::kStopped, src);
      else if (polls % 64 == 0 && p.now() - start > k.timeoutNs) failed = giveUp(k, p, KernelColl::kTimedOut, src);
      else p.pause();
    }
  }
  return !p.barrierOr(failed);
}

// A one-shot round over the piece's elements [off, off + cnt): this rank's data into
// the slots that need it, the barrier, the result from this rank's own slots.
template <class P>
STRATA_KERNEL_FN inline bool oneShot(const KernelColl& k, P& p, int block, size_t off, size_t cnt, uint64_t seq) {
  size_t lo = 0, hi = 0;
  blockRange(k, block, cnt, &lo, &hi);
  size_t at = lo * k.es, data = (off + lo) * k.es, c = hi - lo, piece = k.count * k.es;
  const bool root = k.rank == k.root;
  for (int q = 0; q < k.n; ++q) {
    char* to = k.slot(q, seq, k.rank) + at;
    switch (k.coll) {
      case KernelColl::kAllReduce: p.prepare(to, k.send + data, c); break;
      case KernelColl::kReduceScatter: p.prepare(to, k.send + q * piece + data, c); break;
      case KernelColl::kAllGather: p.copy(to, k.send + data, c); break;
      case KernelColl::kAllToAll: p.copy(to, k.send + q * piece + data, c); break;
      case KernelColl::kBroadcast:
        if (root) p.copy(to, k.send + data, c);
        break;
      case KernelColl::kScatter:
        if (root) p.copy(to, k.send + q * piece + data, c);
        break;
      case KernelColl::kGather:
        if (q == k.root) p.copy(to, k.send + data, c);
        break;
      default:  // reduce
        if (q == k.root) p.prepare(to, k.send + data, c);
        break;
    }
  }
  if (!barrier(k, p, block, seq)) return false;
  const char* in[KernelColl::kMaxRanks] = {};
  for (int s = 0; s < k.n; ++s) in[s] = k.slot(k.rank, seq, s) + at;
  switch (k.coll) {
    case KernelColl::kGather:
      if (!root) break;
      [[fallthrough]];
    case KernelColl::kAllGather:
    case KernelColl::kAllToAll:
      for (int s = 0; s < k.n; ++s) p.copy(k.recv + s * piece + data, in[s], c);
      break;
    case KernelColl::kBroadcast:
    case KernelColl::kScatter: p.copy(k.recv + data, in[k.root], c); break;
    case KernelColl::kReduce:
      if (root) p.reduce(k.recv + data, in, k.n, c);
      break;
    default: p.reduce(k.recv + data, in, k.n, c); break;
  }
  return true;
}

// A two-shot round over [off, off + cnt), cut into a slice per rank: step 1 puts
// slice q in rank q's slot (every rank's for reductions, the root's for a
// broadcast) and rank q reduces it; step 2 spreads each slice to the ranks that
// want it (all of them; the root only, for a reduce, whose slices are written
// straight into its slot). So each GPU moves about 2 (n - 1) / n of the data
// rather than n - 1 times it, and the root of a broadcast or reduce is no funnel.
template <class P>
STRATA_KERNEL_FN inline bool twoShot(const KernelColl& k, P& p, int block, size_t off, size_t cnt, uint64_t seq) {
  size_t v = 16 / k.es, slice = ((cnt + k.n - 1) / k.n + v - 1) / v * v;
  size_t lo = 0, hi = 0;
  blockRange(k, block, slice, &lo, &hi);
  auto part = [&](int q, size_t* b, size_t* e) {  // slice q's elements of this block, in the round
    *b = minSize(q * slice + lo, cnt);
    *e = minSize(q * slice + hi, cnt);
  };
  const bool bcast = k.coll == KernelColl::kBroadcast, toRoot = k.coll == KernelColl::kReduce;
  size_t b = 0, e = 0;
  for (int q = 0; q < k.n; ++q) {
    part(q, &b, &e);
    if (!bcast) p.prepare(k.slot(q, seq, k.rank) + lo * k.es, k.send + (off + b) * k.es, e - b);
    else if (k.rank == k.root && q != k.root) p.copy(k.slot(q, seq, k.root) + lo * k.es, k.send + (off + b) * k.es, e - b);
  }
  if (!barrier(k, p, block, seq)) return false;
  part(k.rank, &b, &e);
  const char* mine = nullptr;  // this rank's finished slice
  if (bcast) {
    mine = k.rank == k.root ? k.send + (off + b) * k.es : k.slot(k.rank, seq, k.root) + lo * k.es;
  } else {
    const char* in[KernelColl::kMaxRanks] = {};
    for (int s = 0; s < k.n; ++s) in[s] = k.slot(k.rank, seq, s) + lo * k.es;
    char* to = !toRoot || k.rank == k.root ? k.recv + (off + b) * k.es : k.slot(k.root, seq + 1, k.rank) + lo * k.es;
    p.reduce(to, in, k.n, e - b);
    mine = to;
    p.barrierOr(0);  // the block's reduced slice, whole, before it is read back
  }
  for (int q = 0; q < k.n && !toRoot; ++q)
    if (q != k.rank && !(bcast && q == k.root)) p.copy(k.slot(q, seq + 1, k.rank) + lo * k.es, mine, e - b);
  if (bcast && k.rank != k.root) p.copy(k.recv + (off + b) * k.es, mine, e - b);
  if (!barrier(k, p, block, seq + 1)) return false;
  if (toRoot && k.rank != k.root) return true;
  const bool own = bcast && k.rank == k.root;  // the root of a broadcast copies its own input
  for (int q = 0; q < k.n; ++q) {
    if (q == k.rank && !own) continue;
    part(q, &b, &e);
    const char* from = own ? k.send + (off + b) * k.es : k.slot(k.rank, seq + 1, q) + lo * k.es;
    if (!own || k.send != k.recv) p.copy(k.recv + (off + b) * k.es, from, e - b);
  }
  return true;
}

// One block of the kernel: every round, then the step count for the next kernel.
template <class P>
STRATA_KERNEL_FN inline void runBlock(const KernelColl& k, P& p, int block) {
  uint64_t base = *static_cast<volatile uint64_t*>(k.counter), seq = base;
  bool ok = true;
  for (size_t off = 0; ok && off < k.count; off += k.chunk) {
    size_t cnt = minSize(k.chunk, k.count - off);
    ok = k.twoShot() ? twoShot(k, p, block, off, cnt, seq + 1) : oneShot(k, p, block, off, cnt, seq + 1);
    seq += k.twoShot() ? 2 : 1;
  }
  p.barrierOr(0);
  if (p.thread() == 0) {  // the last block done records the steps for the next kernel
    p.fenceDevice();
    if (p.fetchAdd(&k.counter[1], 1) == static_cast<uint64_t>(k.blocks - 1)) {
      k.counter[0] = base + k.steps();
      k.counter[1] = 0;
    }
  }
}

}  // namespace kernel
}  // namespace strata::device
