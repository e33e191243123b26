// The pipelined collective kernel (kernel_pipe.h) on a simulated GPU: each block runs
// as `threads` host threads at once, with a real barrier between them, and every
// block of the grid at once, as a GPU runs them. So a pass whose barrier is missing
// races for real (a thread posts while another still writes), and blocks interleave.
//
// Harsher modes, as for the barrier-round kernel (sim_prims.h): jitter (random pauses
// in data passes and release stores) and weak memory (a block's stores into peers'
// regions are held back and published, shuffled, only at a release store or when the
// block ends; a relaxed store publishes nothing; a pass's loads of what other blocks
// published see it as of the thread's last acquire of a release: sim_visibility.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "device/kernel_ll.h"
#include "device/kernel_pipe.h"
#include "device/sim_barrier.h"
#include "device/sim_visibility.h"

namespace strata::device::sim {

// What a block's threads share: the barrier, the block's state (pipe::Block), the
// stores held back under weak memory.
class PipeBlock {
 public:
  explicit PipeBlock(int threads) : barrier_(threads) {}
  int threads() const { return barrier_.threads(); }
  // Every thread arrives; all get the OR of what they brought.
  uint32_t barrier(uint32_t v) { return barrier_.arrive(v); }
  pipe::Block& state() { return state_; }
  // Keeps a store of `bytes` from `src` to `dst` back (weak memory: dst in a peer's
  // region); false when it is to be stored now.
  bool hold(char* dst, const void* src, size_t bytes);
  // Keeps an LL line's 8-byte half back (weak memory); false when it is to be stored now.
  bool holdWord(uint64_t* dst, uint64_t v);
  // Every held store, in shuffled 4 KiB pieces, and every held LL word.
  void publish();
  // The region `p` lies in (this rank's too), or -1.
  int regionOf(const char* p) const;
  // The largest epoch a thread brought to the barriers so far (weak memory).
  void raiseEpoch(uint64_t e) { barrier_.raiseEpoch(e); }
  uint64_t epoch() const { return barrier_.epoch(); }
  // A random part of the held LL words, in shuffled order (a GPU's stores land
  // eventually, in any order: a waiting thread lets some land).
  void publishSomeWords();

 private:
  BlockBarrier barrier_;
  pipe::Block state_{};
  visibility::HeldStores held_;
  std::mutex heldMutex_;  // the LL words'
  std::vector<std::pair<uint64_t*, uint64_t>> heldWords_;
  // Under heldMutex_: the held LL words, shuffled, all but `keep` of them stored.
  void landWords(size_t keep);
  uint64_t rng_ = 0x9e3779b97f4a7c15ull;

  friend class PipePrims;
  const KernelPipe* k_ = nullptr;
  bool weak_ = false;
};

// The primitives of one thread of a simulated block.
class PipePrims {
 public:
  PipePrims(const KernelPipe& k, PipeBlock& b, int thread, bool jitter, bool weak);
  ~PipePrims();
  PipePrims(const PipePrims&) = delete;
  PipePrims& operator=(const PipePrims&) = delete;
  int thread() const { return thread_; }
  int threads() const { return b_.threads(); }
  uint64_t now() const;
  void pause() const;
  // Under weak memory the thread's view rises to the release that raised the word.
  uint64_t loadAcquire(const uint64_t* p);
  uint64_t loadRelaxed(const uint64_t* p) const { return __atomic_load_n(p, __ATOMIC_RELAXED); }
  // Cumulative, as PTX's: publishes the block's held stores (the barrier before it
  // ordered them), then the word. A relaxed store publishes nothing.
  void storeRelease(uint64_t* p, uint64_t v);
  void storeRelaxed(uint64_t* p, uint64_t v) const { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
  uint32_t loadWord(const volatile uint32_t* w) const { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
  void storeWord(volatile uint32_t* w, uint32_t v) const { __atomic_store_n(w, v, __ATOMIC_RELEASE); }
  // `v` into `w` unless it holds a value already (the first failure of any block stays).
  void recordWord(volatile uint32_t* w, uint32_t v) const {
    uint32_t none = 0;
    __atomic_compare_exchange_n(w, &none, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
  // Under weak memory the threads leave with the newest view any of them brought.
  int barrierOr(uint32_t v);
  // This thread's share of the pass: whole 16-byte vectors of it, as a GPU's threads split one.
  void pass(const pipe::Pass& x);

  // The LL protocol's (kernel_ll.h), with the CPU's arithmetic; a line's 8-byte halves
  // are host atomics (held back and let land in pieces under weak memory).
  LLUnit loadUnit(const char* src, size_t cnt, bool multiply);
  void storeUnit(char* dst, const LLUnit& u, size_t cnt) const { memcpy(dst, u.w, cnt * static_cast<size_t>(k_.es)); }
  LLUnit combine(const LLUnit& a, const LLUnit& b) const;
  LLUnit finish(const LLUnit& a) const;
  void storeLines(char* first, char* second, const LLUnit& u, uint32_t flag);
  LLLines loadLines(const char* first, const char* second);

 private:
  void jitter();
  // A source of a pass: where it is read from (under weak memory, a copy as this
  // thread sees it when it lies in a region).
  const char* source(const char* src, size_t bytes, int s);
  const KernelPipe& k_;
  PipeBlock& b_;
  int thread_;
  bool jitter_, weak_;
  visibility::Reader reader_;
  std::vector<char> seen_;
  uint64_t rng_;
  std::vector<char> scratch_, scaled_;
};

// One block of either kernel (the pipelined engine, or LL's), as thread `p` of it.
void runBlock(const KernelPipe& k, PipePrims& p, PipeBlock& b, int ch);

// Runs every block of the kernel at once, `threads` host threads each, and returns
// when all have ended (the stream's thread calls it).
void runKernelPipe(const KernelPipe& k, int device);

}  // namespace strata::device::sim
