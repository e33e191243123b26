// The mesh kernel's LL protocol (KernelPipe::kMeshLL): all-reduce, all-gather and
// reduce-scatter of small messages with no fence, no flag word and no barrier.
//
// Data and flag travel in the same store. A round of a channel moves kUnits units of
// 16 bytes; a unit goes to a peer as two 16-byte lines {w0, f, w1, f} {w2, f, w3, f},
// each written with one 16-byte store whose 8-byte halves land whole (NCCL's LL
// line). A buffer holds every unit's first line, then every unit's second, so a
// warp's 32 stores of a line are 512 contiguous bytes. The receiver polls the unit's lines in its own region until all four flags
// equal the unit's flag, and then holds the data: nothing to fence, nothing to
// acquire, no system-scope release between GPUs (the Simple protocol pays a release
// and an acquire per message).
//
// Every rank sends every peer its unit and receives every peer's (all-reduce: its
// input, pre-multiplied; all-gather: its input; reduce-scatter: piece q to rank q), so
// one round is one trip over NVLink. A unit u of channel c has its buffers in each
// receiver's region, one per sender and parity, and a count of its uses in the
// sender's device memory (kept between kernels: graph replays advance it); use m
// writes parity m % 2 with flag m + 1 (a 32-bit flag that never repeats two uses
// apart and is never 0, which zero-filled buffers hold). The unit's buffers need no
// credit: a sender writes use m + 2 only after it received every peer's use m + 1,
// which each peer wrote only after it had read its use m (a unit is read and written
// by the same thread on every rank, in program order).
//
// Reductions combine the n contributions in rank order, as every path does, so every
// rank gets the same bits. Waits end on the stop word, the poison word or the timeout
// as the Simple protocol's do, and a thread that fails (not one that finds the poison)
// poisons every region. After a failure the use counts of a rank's units differ (a
// unit sent but not received is not counted): the poison is for good, so they are
// never used again.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/kernel_pipe.h"

namespace strata::device {

// 16 bytes of data: what one unit of a round carries.
struct LLUnit {
  uint32_t w[4];
};
// A unit's two lines as they are read: w0 f w1 f w2 f w3 f.
struct LLLines {
  uint32_t v[8];
};

namespace ll {

constexpr int kUnits = 512;                          // units of a channel's round: 8 KiB of data
constexpr size_t kLine = 16;                         // a line: 8 bytes of data, two flags
constexpr size_t kSecond = kUnits * kLine;           // from a unit's first line to its second
constexpr size_t kBufBytes = 2 * kSecond;            // one sender's buffer of one parity: 16 KiB
constexpr int kMaxChannels = 8;

// Bytes of the LL part of a region, and the use counts of a kernel's channels.
STRATA_KERNEL_FN inline size_t regionBytes(int channels, int n) {
  return static_cast<size_t>(channels) * n * 2 * kBufBytes;
}
STRATA_KERNEL_FN inline size_t stateWords(int channels) { return static_cast<size_t>(channels) * kUnits; }

// Unit u's first line in `owner`'s region from `sender`, for use `use` (its second is
// kSecond further on).
STRATA_KERNEL_FN inline char* lines(const KernelPipe& k, int owner, int ch, int sender, uint64_t use, size_t u) {
  return k.region[owner] + k.part + ((static_cast<size_t>(ch) * k.n + sender) * 2 + (use & 1)) * kBufBytes +
         u * kLine;
}
// Use m's flag: m + 1 in 32 bits, 1 where that wraps to 0 (which zeroed buffers hold).
// Two uses of one parity are 2 apart, and never get the same flag.
STRATA_KERNEL_FN inline uint32_t flagOf(uint64_t use) {
  uint32_t f = static_cast<uint32_t>(use) + 1;
  return f ? f : 1;
}

// A peer poisoned this rank's region: the rank that failed first goes in the error
// word. Not passed on: every mesh region was poisoned by the rank that failed (a
// waiting thread each passing it on would be thousands of system-scope stores).
template <class P>
STRATA_KERNEL_FN inline uint32_t poisoned(const KernelPipe& k, P& p) {
  uint64_t x = p.loadAcquire(k.poison(k.rank));
  p.recordWord(k.error, pipe::kPoisoned << 8 | static_cast<uint32_t>(x - 1));
  return 1;
}

// Until unit `at` holds use `flag`'s data (into *v); 1 once the wait gave up.
template <class P>
STRATA_KERNEL_FN inline uint32_t await(const KernelPipe& k, P& p, const char* at, uint32_t flag, int peer, LLUnit* v) {
  uint64_t start = k.timeoutNs ? p.now() : 0;
  for (uint32_t polls = 1;; ++polls) {
    LLLines l = p.loadLines(at, at + kSecond);
    bool whole = l.v[1] == flag && l.v[3] == flag && (k.llOneFlag || (l.v[5] == flag && l.v[7] == flag));
    if (whole) {
      *v = LLUnit{{l.v[0], l.v[2], l.v[4], l.v[6]}};
      return 0;
    }
    if (polls % 64 == 0) {
      if (p.loadRelaxed(k.poison(k.rank))) return poisoned(k, p);
      if (polls % 1024 == 0 && p.loadWord(k.stop)) return pipe::failAll(k, p, KernelColl::kStopped, peer);
      if (k.timeoutNs && p.now() - start > k.timeoutNs) return pipe::failAll(k, p, KernelColl::kTimedOut, peer);
    }
    if (polls % 8 == 0) p.pause();  // NCCL's LL spins; the simulator's threads yield now and then
  }
}

// One unit: `at` is its first element in the channel's part of the piece, `cnt` its
// elements (a whole unit but at the end). False once a wait gave up.
template <class P>
STRATA_KERNEL_FN inline bool unit(const KernelPipe& k, P& p, int ch, size_t u, size_t at, size_t cnt) {
  const int n = k.n, me = k.rank;
  const bool gather = k.coll == KernelColl::kAllGather, scatter = k.coll == KernelColl::kReduceScatter;
  const bool multiply = !gather && k.op.preMultiply;
  const size_t es = static_cast<size_t>(k.es), piece = k.count * es, off = at * es;
  uint64_t* uses = k.state + static_cast<size_t>(ch) * kUnits + u;
  const uint64_t use = *uses;
  const uint32_t flag = flagOf(use);
  // 1. This rank's unit to every peer.
  LLUnit own = p.loadUnit(k.send + (scatter ? me * piece : 0) + off, cnt, multiply);
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    LLUnit out = scatter ? p.loadUnit(k.send + q * piece + off, cnt, multiply) : own;
    char* at = lines(k, q, ch, me, use, u);
    p.storeLines(at, at + kSecond, out, flag);
  }
  // 2. Every peer's, as it arrives: placed (all-gather) or combined in rank order.
  LLUnit acc = own;
  for (int s = 0; s < n; ++s) {
    LLUnit x = own;
    if (s != me && await(k, p, lines(k, me, ch, s, use, u), flag, s, &x)) return false;
    if (gather) {
      char* to = k.recv + s * piece + off;
      if (s != me || to != k.send + off) p.storeUnit(to, x, cnt);
    } else {
      acc = s == 0 ? x : p.combine(acc, x);
    }
  }
  if (!gather) p.storeUnit(k.recv + off, p.finish(acc), cnt);
  *uses = use + 1;
  return true;
}

// One block: its channel's part of the piece, a round of kUnits units at a time, each
// of the block's threads taking every threads()-th unit.
template <class P>
STRATA_KERNEL_FN inline void runBlock(const KernelPipe& k, P& p, int ch) {
  if (p.loadAcquire(k.poison(k.rank))) {  // a peer failed before this kernel: touch nothing
    poisoned(k, p);
    return;
  }
  size_t lo = 0, hi = 0;
  pipe::channelRange(k, ch, k.count, &lo, &hi);
  const size_t v = 16 / static_cast<size_t>(k.es), round = kUnits * v;
  for (size_t base = lo; base < hi; base += round) {
    size_t units = (pipe::minOf(round, hi - base) + v - 1) / v;
    for (size_t u = static_cast<size_t>(p.thread()); u < units; u += static_cast<size_t>(p.threads())) {
      size_t at = base + u * v;
      if (!unit(k, p, ch, u, at, pipe::minOf(v, hi - at))) return;
    }
  }
}

}  // namespace ll
}  // namespace strata::device
