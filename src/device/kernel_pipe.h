// The device-driven collectives' pipelined engine: one kernel on the caller's stream
// moves a collective between the GPUs of a node with no host in the loop, spread over
// channels (one block each) that never wait for one another.
//
// Connections. Each channel of each ordered pair of ranks (s -> r) that an algorithm
// uses is a FIFO in r's region: `depth` slots of `slotBytes`. s counts the messages it
// has put ("ready", a word in r's region) and r the messages it has consumed ("credit",
// a word in s's region). s writes message m into slot m % depth once r's credit reaches
// m + 1 - depth, then raises ready to m + 1; r waits for ready to reach m + 1, works
// from the slot and raises credit. No barrier rounds: every message is flagged on its
// own, so a sender runs up to `depth` messages ahead of its receiver and the ring's
// ranks form a pipeline. The counts persist in device memory between kernels
// (`state`), so CUDA graph replays advance them.
//
// Algorithms. Ring (any number of ranks; each rank receives from the previous and
// sends to the next, in rank order): all-reduce as reduce-scatter then all-gather in
// 2 (n - 1) steps a loop, each step one slice; all-gather, reduce-scatter in n - 1;
// broadcast and reduce as a chain. A step's work is one pass: read the slot and this
// rank's input, combine, write the next rank's slot and this rank's output at once.
// Mesh (up to kMaxMesh ranks, every pair connected): all-reduce as two-shot (each rank
// sends slice q of its input to rank q; rank q reduces the n contributions in rank
// order and writes the result to its output and to every peer's slot in the same
// pass; the peers copy it out), one-shot broadcast, reduce, all-gather,
// reduce-scatter, and all-to-all, gather and scatter as direct pushes.
//
// Reductions combine in one fixed order per element, so every rank gets the same
// bits: the ring's partial sums travel the ring once and the finished slice is then
// copied around; the mesh's owner reduces in rank order.
//
// The protocol is written once over primitives (P): the GPU's (PTX acquire/release at
// system scope, __syncthreads, 16-byte vector loops) and the simulated GPUs' (host
// atomics, a block as a few host threads with a real barrier). Every wait ends on the
// communicator's stop word, on the poison word a failing rank raised in every
// region, or after the timeout (0: none), recording why in the error word; a kernel
// that finds its region poisoned does nothing at all.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/cpu_reduce.h"
#include "device/kernel_coll.h"

namespace strata::device {

struct KernelPipe {
  static constexpr int kMaxMesh = 8;        // ranks a mesh kernel addresses
  static constexpr int kMaxChannels = 32;   // blocks
  static constexpr int kMaxSources = kMaxMesh + 1;  // inputs one pass combines (two-shot: n slots... and own input)
  static constexpr int kMaxTargets = kMaxMesh;      // outputs one pass writes
  static constexpr size_t kLine = 128;      // flag words each on a line of their own
  // kMeshLL: the mesh's LL protocol (device/kernel_ll.h), for small all-reduces,
  // all-gathers and reduce-scatters.
  enum Algo : int { kRing, kMesh, kMeshLL };
  using Coll = KernelColl::Coll;
  // Region pointers of a ring kernel: its own, its previous rank's, its next rank's.
  enum RingPeer : int { kSelf = 0, kPrev = 1, kNext = 2 };

  int coll = KernelColl::kAllReduce;
  int algo = kRing;
  int rank = 0, n = 1, root = 0;
  int channels = 1;  // channels the regions hold (their layout)
  int blocks = 1;    // channels this kernel runs (its grid): 1 to `channels`
  size_t part = 0;   // where this algorithm's part of every region begins (the poison word is at 0)
  ncclDataType_t type = ncclFloat32;
  int es = 4;
  ReduceOp op;
  const char* send = nullptr;
  char* recv = nullptr;
  size_t count = 0;  // elements of one rank's piece, as KernelColl counts them
  int depth = 4;           // slots per FIFO
  size_t slotBytes = 0;    // a multiple of 16
  int conns = 1;           // connections per channel in every region: ring 1, mesh n
  char* region[kMaxMesh] = {};  // mesh: every rank's region (this rank's at `rank`); ring: RingPeer
  uint64_t* state = nullptr;    // device memory: [2][channels][conns] messages sent, consumed
  const volatile uint32_t* stop = nullptr;  // mapped host memory: nonzero, give up
  volatile uint32_t* error = nullptr;       // mapped host memory: the first failure
  uint64_t timeoutNs = 0;                   // 0: waits end only on the stop or poison word
  bool relaxedFlag = false;                 // the mutation stage's faults (base/mutation.h)
  bool skipBarrier = false;
  bool skipAcquire = false;                 // a wait ends on its relaxed poll, with no acquire
  bool llOneFlag = false;                   // an LL reader checks only a unit's first line

  // Region layout: the poison word at the region's start; at `part`, per channel and
  // connection two lines (ready, credit), then the slots.
  STRATA_KERNEL_FN static size_t flagBytes(int channels, int conns) {
    size_t b = static_cast<size_t>(channels) * conns * 2 * kLine;
    return (b + 4095) / 4096 * 4096;
  }
  // Bytes of one algorithm's part of a region.
  STRATA_KERNEL_FN static size_t regionBytes(int channels, int conns, int depth, size_t slotBytes) {
    return flagBytes(channels, conns) + static_cast<size_t>(channels) * conns * depth * slotBytes;
  }
  STRATA_KERNEL_FN uint64_t* poison(int owner) const { return reinterpret_cast<uint64_t*>(region[owner]); }
  STRATA_KERNEL_FN uint64_t* ready(int owner, int ch, int cn) const {
    return reinterpret_cast<uint64_t*>(region[owner] + part + (static_cast<size_t>(ch) * conns + cn) * 2 * kLine);
  }
  STRATA_KERNEL_FN uint64_t* credit(int owner, int ch, int cn) const {
    return reinterpret_cast<uint64_t*>(region[owner] + part + ((static_cast<size_t>(ch) * conns + cn) * 2 + 1) * kLine);
  }
  STRATA_KERNEL_FN char* slot(int owner, int ch, int cn, uint64_t msg) const {
    return region[owner] + part + flagBytes(channels, conns) +
           ((static_cast<size_t>(ch) * conns + cn) * depth + msg % depth) * slotBytes;
  }
  STRATA_KERNEL_FN uint64_t* sent(int ch, int cn) const { return state + static_cast<size_t>(ch) * conns + cn; }
  STRATA_KERNEL_FN uint64_t* consumed(int ch, int cn) const {
    return state + (static_cast<size_t>(channels) + ch) * conns + cn;
  }
  // Elements of a slot: the most a message carries.
  STRATA_KERNEL_FN size_t slotElems() const { return slotBytes / es; }
  static constexpr size_t stateWords(int channels, int conns) { return 2 * static_cast<size_t>(channels) * conns; }
};

namespace pipe {

STRATA_KERNEL_FN inline size_t minOf(size_t a, size_t b) { return a < b ? a : b; }
STRATA_KERNEL_FN inline size_t roundUp(size_t a, size_t v) { return (a + v - 1) / v * v; }
STRATA_KERNEL_FN inline int mod(int a, int n) { return (a % n + n) % n; }

constexpr uint32_t kPoisoned = KernelColl::kPoisoned;

// Records why (the first failure only) and poisons every region the kernel reaches:
// no rank's later step goes on after a failure. Returns 1 (gave up).
template <class P>
STRATA_KERNEL_FN inline uint32_t failAll(const KernelPipe& k, P& p, uint32_t why, int peer) {
  p.recordWord(k.error, why << 8 | static_cast<uint32_t>(peer));
  int regions = k.algo == KernelPipe::kRing ? 3 : k.n;
  uint64_t culprit = static_cast<uint64_t>(why == kPoisoned ? peer : k.rank) + 1;
  for (int q = 0; q < regions; ++q)
    if (k.region[q]) p.storeRelease(k.poison(q), culprit);
  return 1;
}

// One side of a connection as a block sees it.
struct Link {
  int peer;         // the other rank
  int owner;        // region index of the receiving end (its slots and ready word)
  int cn;           // the connection's index there
  int creditOwner;  // region index of the sending end (its credit word)
  int creditCn;
  uint64_t msg;     // the next message's number
};

// What one data pass reads and writes: sources combined in order (those in `premul`
// multiplied by the op's scalar first: a rank's own input to a reduction), the result
// written to every target. Without `reduce`, one source, copied.
struct Pass {
  const char* src[KernelPipe::kMaxSources];
  char* dst[KernelPipe::kMaxTargets];
  int nsrc, ndst;
  uint32_t premul;
  bool reduce;  // combine the sources with the op
  bool finish;  // apply the op's post-division: the result is complete
  size_t count;
  STRATA_KERNEL_FN void clear(size_t cnt) {
    nsrc = ndst = 0;
    premul = 0;
    reduce = finish = false;
    count = cnt;
  }
  STRATA_KERNEL_FN void from(const char* s, bool multiply) {
    premul |= multiply ? 1u << nsrc : 0u;
    src[nsrc++] = s;
  }
  STRATA_KERNEL_FN void to(char* d) {
    if (d) dst[ndst++] = d;
  }
};

// A block's state, in memory its threads share (P::shared): its links, the lists of
// those a collective receives and sends on, and the pass being made. Kept out of the
// threads' registers and stacks: the GPU would otherwise index arrays in local memory.
struct Block {
  Link in[KernelPipe::kMaxMesh], out[KernelPipe::kMaxMesh];  // mesh: by peer; ring: [0]
  Link* ins[KernelPipe::kMaxMesh];
  Link* outs[KernelPipe::kMaxMesh];
  int nin, nout;
  // The passes in turn: thread 0 describes one while the others may still be working
  // through the previous one (each pass begins with a barrier, so none is two back).
  Pass passes[2];
};

// The engine of one block (channel): waits, posts and data passes, over P.
template <class P>
class Channel {
 public:
  STRATA_KERNEL_FN Channel(const KernelPipe& k, P& p, Block& b, int ch) : k_(k), p_(p), b_(b), ch_(ch) {}

  // Until every receive link listed holds its next message and every send link has a
  // free slot (a thread per link); false, in the whole block, once a wait gave up.
  STRATA_KERNEL_FN bool wait(int nr, int ns) {
    uint32_t gaveUp = 0;
    const uint64_t depth = static_cast<uint64_t>(k_.depth);
    const unsigned first = static_cast<unsigned>(p_.thread()), stride = static_cast<unsigned>(p_.threads());
    for (unsigned i = first; i < static_cast<unsigned>(nr) && !gaveUp; i += stride) {
      const Link& l = *b_.ins[i];
      gaveUp = waitFor(k_.ready(l.owner, ch_, l.cn), l.msg + 1, l.peer);
    }
    for (unsigned i = first; i < static_cast<unsigned>(ns) && !gaveUp; i += stride) {
      const Link& l = *b_.outs[i];
      gaveUp = waitFor(k_.credit(l.creditOwner, ch_, l.creditCn), l.msg + 1 > depth ? l.msg + 1 - depth : 0, l.peer);
    }
    return p_.barrierOr(gaveUp) == 0;
  }

  // After a data pass: the slots read go back to their senders, and the messages
  // written go out; a thread per link, each moving its link to the next message. The
  // barrier orders every thread's writes before the flag, and a release store at
  // system scope is cumulative: it publishes them (PTX: bar.sync, st.release.sys;
  // NCCL's simple protocol has the same order with fence.acq_rel.sys and a relaxed store).
  STRATA_KERNEL_FN void post(int nr, int ns) {
    if (!k_.skipBarrier) p_.barrierOr(0);  // every thread's reads and writes of the pass are done
    const unsigned first = static_cast<unsigned>(p_.thread()), stride = static_cast<unsigned>(p_.threads());
    for (unsigned i = first; i < static_cast<unsigned>(nr); i += stride) {
      Link& l = *b_.ins[i];
      p_.storeRelease(k_.credit(l.creditOwner, ch_, l.creditCn), l.msg + 1);
      ++l.msg;
    }
    for (unsigned i = first; i < static_cast<unsigned>(ns); i += stride) {
      Link& l = *b_.outs[i];
      if (k_.relaxedFlag) p_.storeRelaxed(k_.ready(l.owner, ch_, l.cn), l.msg + 1);
      else p_.storeRelease(k_.ready(l.owner, ch_, l.cn), l.msg + 1);
      ++l.msg;
    }
    p_.barrierOr(0);  // the links' new numbers, seen by every thread
  }

  STRATA_KERNEL_FN char* slot(const Link& l) const { return k_.slot(l.owner, ch_, l.cn, l.msg); }

  // The pass to describe next (by thread 0; the same one on every thread), and its run.
  STRATA_KERNEL_FN Pass& next() { return b_.passes[passes_ & 1]; }
  STRATA_KERNEL_FN void run(Pass& x) {
    p_.pass(x);
    ++passes_;
  }

  // True (in the whole block) when this rank's region was poisoned before the kernel
  // began: it then touches no slot, so no stale or foreign one is read, and passes
  // the poison on to every region it reaches, so that ranks further along the ring
  // stop too instead of waiting for messages that will never come.
  STRATA_KERNEL_FN bool poisoned() {
    uint32_t bad = 0;
    if (p_.thread() == 0) {
      uint64_t v = p_.loadAcquire(k_.poison(self()));
      if (v) bad = giveUp(kPoisoned, static_cast<int>(v - 1));
    }
    return p_.barrierOr(bad) != 0;
  }

 private:
  STRATA_KERNEL_FN int self() const { return k_.algo == KernelPipe::kRing ? KernelPipe::kSelf : k_.rank; }

  STRATA_KERNEL_FN uint32_t giveUp(uint32_t why, int peer) { return failAll(k_, p_, why, peer); }

  STRATA_KERNEL_FN uint32_t waitFor(const uint64_t* word, uint64_t want, int peer) {
    if (want == 0) return 0;
    uint64_t start = k_.timeoutNs ? p_.now() : 0;
    const uint64_t* poison = k_.poison(self());
    // Relaxed polls (an acquire per poll would order every later load behind each
    // one), then one acquire of the value that arrived: it synchronises with the
    // release that raised it (or a later one), so the slot's data is read after.
    for (uint32_t polls = 1; p_.loadRelaxed(word) < want; ++polls) {
      if (polls % 64 == 0) {
        if (uint64_t v = p_.loadAcquire(poison)) return giveUp(kPoisoned, static_cast<int>(v - 1));
        if (polls % 1024 == 0 && p_.loadWord(k_.stop)) return giveUp(KernelColl::kStopped, peer);
        if (k_.timeoutNs && p_.now() - start > k_.timeoutNs) return giveUp(KernelColl::kTimedOut, peer);
      }
      p_.pause();
    }
    if (!k_.skipAcquire) (void)p_.loadAcquire(word);
    return 0;
  }

  const KernelPipe& k_;
  P& p_;
  Block& b_;
  int ch_;
  unsigned passes_ = 0;
};

// The elements [lo, hi) of a piece of `total` that channel `ch` owns (of the
// kernel's `blocks`): whole 16-byte vectors, clipped.
STRATA_KERNEL_FN inline void channelRange(const KernelPipe& k, int ch, size_t total, size_t* lo, size_t* hi) {
  size_t v = 16 / k.es, per = roundUp((total + k.blocks - 1) / k.blocks, v);
  *lo = minOf(static_cast<size_t>(ch) * per, total);
  *hi = minOf(*lo + per, total);
}

// --- Ring -------------------------------------------------------------------

// One step: receive from the previous rank (and combine with this rank's input at
// `local`), send to the next, write `outp`; any may be absent. One pass over the data.
template <class P>
STRATA_KERNEL_FN inline bool ringStep(const KernelPipe& k, P& p, Channel<P>& c, Block& b, bool recv, bool send,
                                      const char* local, bool reduce, char* outp, bool finish, size_t cnt) {
  if (!c.wait(recv, send)) return false;
  Pass& x = c.next();
  if (p.thread() == 0) {
    x.clear(cnt);
    if (recv) x.from(c.slot(*b.ins[0]), false);
    if (local && (reduce || !recv)) x.from(local, reduce && k.op.preMultiply);
    if (send) x.to(c.slot(*b.outs[0]));
    x.to(outp);
    x.reduce = reduce && x.nsrc > 1;
    x.finish = finish;
  }
  c.run(x);
  c.post(recv, send);
  return true;
}

// All-reduce: per loop of n slices, 2 (n - 1) steps: the reduce-scatter (slice pos -
// step, combined with this rank's input), whose last step finishes slice pos + 1 and
// writes it out, then the all-gather passing the finished slices on.
template <class P>
STRATA_KERNEL_FN inline bool ringAllReduce(const KernelPipe& k, P& p, Channel<P>& c, Block& blk, size_t lo,
                                           size_t hi) {
  const int n = k.n, pos = k.rank;
  const size_t v = 16 / k.es, loop = k.slotElems() * n;
  for (size_t base = lo; base < hi; base += loop) {
    size_t len = minOf(loop, hi - base), sl = roundUp((len + n - 1) / n, v);
    for (int step = 0; step < 2 * n - 1; ++step) {
      int j = step < n ? mod(pos - step, n) : mod(pos + 1 - (step - (n - 1)), n);
      size_t b = base + minOf(j * sl, len), e = base + minOf((j + 1) * sl, len);
      const char* local = step < n ? k.send + b * k.es : nullptr;
      char* outp = step >= n - 1 ? k.recv + b * k.es : nullptr;
      if (!ringStep(k, p, c, blk, step > 0, step < 2 * n - 2, local, step < n, outp, step == n - 1, e - b)) return false;
    }
  }
  return true;
}

// All-gather and reduce-scatter: n - 1 steps per loop of up to a slot of the piece.
template <class P>
STRATA_KERNEL_FN inline bool ringSegmented(const KernelPipe& k, P& p, Channel<P>& c, Block& blk, size_t lo,
                                           size_t hi) {
  const int n = k.n, pos = k.rank;
  const bool rs = k.coll == KernelColl::kReduceScatter;
  const size_t slice = k.slotElems(), piece = k.count * k.es;
  for (size_t base = lo; base < hi; base += slice) {
    size_t cnt = minOf(slice, hi - base), at = base * k.es;
    for (int step = 0; step < n; ++step) {
      bool recv = step > 0, send = step < n - 1;
      if (rs) {  // piece pos - 1 - step; the last step ends with this rank's own
        int j = mod(pos - 1 - step, n);
        char* outp = step == n - 1 ? k.recv + at : nullptr;
        if (!ringStep(k, p, c, blk, recv, send, k.send + j * piece + at, true, outp, step == n - 1, cnt)) return false;
      } else {  // piece pos - step, which lands in the output
        int j = mod(pos - step, n);
        const char* local = step == 0 ? k.send + at : nullptr;
        char* outp = k.recv + j * piece + at;
        if (local == outp) outp = nullptr;  // in place: this rank's piece is there
        if (!ringStep(k, p, c, blk, recv, send, local, false, outp, false, cnt)) return false;
      }
    }
  }
  return true;
}

// Broadcast flows out of the root and reduce into it: a chain through the ring.
template <class P>
STRATA_KERNEL_FN inline bool ringChain(const KernelPipe& k, P& p, Channel<P>& c, Block& blk, size_t lo, size_t hi) {
  const int n = k.n;
  const bool reduce = k.coll == KernelColl::kReduce;
  const int q = reduce ? mod(k.rank - k.root - 1, n) : mod(k.rank - k.root, n);
  const size_t slice = k.slotElems();
  for (size_t base = lo; base < hi; base += slice) {
    size_t cnt = minOf(slice, hi - base), at = base * k.es;
    const char* local = reduce || q == 0 ? k.send + at : nullptr;
    char* outp = reduce ? (q == n - 1 ? k.recv + at : nullptr) : k.recv + at;
    if (!reduce && local == outp) outp = nullptr;
    if (!ringStep(k, p, c, blk, q > 0, q < n - 1, local, reduce, outp, reduce && q == n - 1, cnt)) return false;
  }
  return true;
}

// --- Mesh -------------------------------------------------------------------

// A pass from one source to one target (thread 0 describes it, every thread moves it).
template <class P>
STRATA_KERNEL_FN inline void copyPass(P& p, Channel<P>& c, const char* from, bool multiply, char* to, size_t cnt) {
  Pass& x = c.next();
  if (p.thread() == 0) {
    x.clear(cnt);
    x.from(from, multiply);
    x.to(to);
  }
  c.run(x);
}

// Direct pushes: each rank's piece for q goes to q, who places or combines what
// arrives (all-gather, reduce-scatter, broadcast, reduce, all-to-all, gather, scatter).
template <class P>
STRATA_KERNEL_FN inline bool meshDirect(const KernelPipe& k, P& p, Channel<P>& c, Block& b, size_t lo, size_t hi) {
  const int n = k.n, me = k.rank, coll = k.coll;
  const bool reduce = coll == KernelColl::kReduceScatter || coll == KernelColl::kReduce;
  const bool multiply = reduce && k.op.preMultiply;
  const bool wideIn = coll == KernelColl::kReduceScatter || coll == KernelColl::kAllToAll || coll == KernelColl::kScatter;
  const bool wideOut = coll == KernelColl::kAllGather || coll == KernelColl::kAllToAll || coll == KernelColl::kGather;
  const bool rooted = coll == KernelColl::kBroadcast || coll == KernelColl::kScatter || coll == KernelColl::kReduce ||
                      coll == KernelColl::kGather;
  // This rank has a result (a reduce's or gather's root, or everyone), and its own
  // input is part of it (not a broadcast's or scatter's non-root).
  const bool result = !(coll == KernelColl::kReduce || coll == KernelColl::kGather) || me == k.root;
  const bool own = !rooted || me == k.root || coll == KernelColl::kReduce || coll == KernelColl::kGather;
  const size_t slice = k.slotElems(), piece = k.count * k.es;
  for (size_t base = lo; base < hi; base += slice) {
    size_t cnt = minOf(slice, hi - base), at = base * k.es;
    auto input = [&](int q) { return k.send + (wideIn ? q * piece : 0) + at; };
    auto output = [&](int q) { return k.recv + (wideOut ? q * piece : 0) + at; };
    // One input for every peer (all-gather, broadcast, reduce, gather): read once and
    // written to every peer's slot, and to this rank's own output in the same pass when
    // it is aligned as the input is (else a pass of its own, so that the slots' part
    // still moves as 16-byte vectors).
    const bool ownFirst = !wideIn && !reduce && result && own && input(me) != output(me) &&
                          (reinterpret_cast<uintptr_t>(input(me)) - reinterpret_cast<uintptr_t>(output(me))) % 16 == 0;
    if (!c.wait(0, b.nout)) return false;
    if (wideIn) {
      for (int i = 0; i < b.nout; ++i) copyPass(p, c, input(b.outs[i]->peer), multiply, c.slot(*b.outs[i]), cnt);
    } else if (b.nout > 0 || ownFirst) {
      Pass& x = c.next();
      if (p.thread() == 0) {
        x.clear(cnt);
        x.from(input(me), multiply);
        for (int i = 0; i < b.nout; ++i) x.to(c.slot(*b.outs[i]));
        if (ownFirst) x.to(output(me));
      }
      c.run(x);
    }
    c.post(0, b.nout);
    if (!c.wait(b.nin, 0)) return false;
    if (result && reduce) {  // every contribution in rank order
      Pass& x = c.next();
      if (p.thread() == 0) {
        x.clear(cnt);
        for (int s = 0, next = 0; s < n; ++s) {
          if (s == me) x.from(input(me), multiply);
          else x.from(c.slot(*b.ins[next++]), false);
        }
        x.to(k.recv + at);
        x.reduce = x.nsrc > 1;
        x.finish = true;
      }
      c.run(x);
    } else if (result) {  // each piece in its place; this rank's own from its input
      for (int i = 0; i < b.nin; ++i) copyPass(p, c, c.slot(*b.ins[i]), false, output(b.ins[i]->peer), cnt);
      if (own && !ownFirst && input(me) != output(me)) copyPass(p, c, input(me), false, output(me), cnt);
    }
    c.post(b.nin, 0);
  }
  return true;
}

// Two-shot all-reduce: per loop each rank owns a slice; it gathers and reduces every
// rank's contribution to it and hands the result back in the same pass.
template <class P>
STRATA_KERNEL_FN inline bool meshAllReduce(const KernelPipe& k, P& p, Channel<P>& c, Block& blk, size_t lo,
                                           size_t hi) {
  const int n = k.n, me = k.rank;
  const size_t v = 16 / k.es, loop = k.slotElems() * n;
  for (size_t base = lo; base < hi; base += loop) {
    size_t len = minOf(loop, hi - base), sl = roundUp((len + n - 1) / n, v);
    auto b = [&](int j) { return base + minOf(j * sl, len); };
    auto e = [&](int j) { return base + minOf((j + 1) * sl, len); };
    // 1. Slice q of this rank's input, multiplied, to rank q.
    if (!c.wait(0, blk.nout)) return false;
    for (int i = 0; i < blk.nout; ++i) {
      int q = blk.outs[i]->peer;
      copyPass(p, c, k.send + b(q) * k.es, k.op.preMultiply, c.slot(*blk.outs[i]), e(q) - b(q));
    }
    c.post(0, blk.nout);
    // 2. This rank's slice: every contribution in rank order, into its output and into
    // every peer's slot at once.
    if (!c.wait(blk.nin, blk.nout)) return false;
    Pass& x = c.next();
    if (p.thread() == 0) {
      x.clear(e(me) - b(me));
      for (int s = 0, next = 0; s < n; ++s) {
        if (s == me) x.from(k.send + b(me) * k.es, k.op.preMultiply);
        else x.from(c.slot(*blk.ins[next++]), false);
      }
      x.to(k.recv + b(me) * k.es);
      for (int i = 0; i < blk.nout; ++i) x.to(c.slot(*blk.outs[i]));
      x.reduce = x.nsrc > 1;
      x.finish = true;
    }
    c.run(x);
    c.post(blk.nin, blk.nout);
    // 3. The other slices, from their owners.
    if (!c.wait(blk.nin, 0)) return false;
    for (int i = 0; i < blk.nin; ++i) {
      int q = blk.ins[i]->peer;
      copyPass(p, c, c.slot(*blk.ins[i]), false, k.recv + b(q) * k.es, e(q) - b(q));
    }
    c.post(blk.nin, 0);
  }
  return true;
}

// --- The kernel -------------------------------------------------------------

// This block's links, as the counts in device memory left them.
STRATA_KERNEL_FN inline void makeLinks(const KernelPipe& k, int ch, Block* b) {
  b->nin = b->nout = 0;
  if (k.algo == KernelPipe::kRing) {
    b->in[0] = Link{mod(k.rank - 1, k.n), KernelPipe::kSelf, 0, KernelPipe::kPrev, 0, *k.consumed(ch, 0)};
    b->out[0] = Link{mod(k.rank + 1, k.n), KernelPipe::kNext, 0, KernelPipe::kSelf, 0, *k.sent(ch, 0)};
    b->ins[0] = &b->in[0];
    b->outs[0] = &b->out[0];
    return;
  }
  const int coll = k.coll, me = k.rank, root = k.root;
  for (int q = 0; q < k.n; ++q) {
    // from q: this rank's region, inbox q (q's credit word for its outbox here, in q's);
    // to q: q's region, inbox `me` (the credit word in this rank's)
    b->in[q] = Link{q, me, q, q, me, *k.consumed(ch, q)};
    b->out[q] = Link{q, q, me, me, q, *k.sent(ch, q)};
    if (q == me) continue;
    bool sends = true, gets = true;
    if (coll == KernelColl::kBroadcast || coll == KernelColl::kScatter) sends = me == root, gets = q == root;
    if (coll == KernelColl::kReduce || coll == KernelColl::kGather) sends = q == root, gets = me == root;
    if (sends) b->outs[b->nout++] = &b->out[q];
    if (gets) b->ins[b->nin++] = &b->in[q];
  }
}

// One block: its channel of the collective, then its message counts for the next
// kernel. `b` is memory the block's threads share.
template <class P>
STRATA_KERNEL_INLINE void runBlock(const KernelPipe& k, P& p, Block& b, int ch) {
  Channel<P> c(k, p, b, ch);
  if (c.poisoned()) return;
  if (p.thread() == 0) makeLinks(k, ch, &b);
  p.barrierOr(0);
  size_t lo = 0, hi = 0;
  channelRange(k, ch, k.count, &lo, &hi);
  bool ok;
  if (k.algo == KernelPipe::kRing) {
    ok = k.coll == KernelColl::kAllReduce                                              ? ringAllReduce(k, p, c, b, lo, hi)
         : k.coll == KernelColl::kAllGather || k.coll == KernelColl::kReduceScatter ? ringSegmented(k, p, c, b, lo, hi)
                                                                                      : ringChain(k, p, c, b, lo, hi);
  } else {
    ok = k.coll == KernelColl::kAllReduce ? meshAllReduce(k, p, c, b, lo, hi) : meshDirect(k, p, c, b, lo, hi);
  }
  if (!ok || p.thread() != 0) return;
  int links = k.algo == KernelPipe::kRing ? 1 : k.n;
  for (int q = 0; q < links; ++q) {
    *k.consumed(ch, q) = b.in[q].msg;
    *k.sent(ch, q) = b.out[q].msg;
  }
}

}  // namespace pipe
}  // namespace strata::device
