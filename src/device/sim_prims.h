// The device-driven point-to-point kernel's primitives (kernel_p2p.h) on the host:
// host atomics for flags and words, data moved with memcpy. A block is `threads`
// host threads at once with a real barrier (SimBlock): each copy is split among
// them as a GPU block splits it, so a barrier left out races for real. The simulated
// GPUs run the kernel with them, and the protocol's own tests run them without any GPU.
//
// Two ways to be harsher than a plain run:
// - jitter: a quarter of the copies and fences first pause for up to 200 us, so ranks,
//   blocks and threads interleave in ways plain runs rarely show;
// - weak memory: a block's stores into peers' regions are held back and published,
//   piece by piece in shuffled order, only at a system fence or when the block ends
//   (a release store alone publishes nothing here), and a copy's loads of a region see
//   it as of the thread's last acquire that synchronised with a release
//   (sim_visibility.h). A protocol that raises a flag before fencing its data, or reads
//   a slot without acquiring its flag, then moves stale bytes.
#pragma once

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"
#include "device/sim_barrier.h"
#include "device/sim_visibility.h"

namespace strata::device::sim {

// What a simulated block's threads share.
struct SimBlock {
  explicit SimBlock(int threads) : barrier(threads) {}
  BlockBarrier barrier;
  visibility::HeldStores held;
};

class HostPrims {
 public:
  HostPrims(const KernelP2p& k, SimBlock& b, int thread, bool jitter, bool weak)
      : b_(b), rank_(k.rank), n_(k.n), regionBytes_(KernelP2p::regionBytes(k.n)), thread_(thread), jitter_(jitter),
        weak_(weak), rng_(0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(pthread_self()) ^
                          (static_cast<uint64_t>(thread) << 40)) {
    for (int q = 0; q < n_; ++q) region_[q] = k.region[q];
    if (weak_) visibility::join(&reader_);
  }
  ~HostPrims() {
    if (weak_) visibility::leave(&reader_);
  }
  HostPrims(const HostPrims&) = delete;
  HostPrims& operator=(const HostPrims&) = delete;

  int thread() const { return thread_; }
  int threads() const { return b_.barrier.threads(); }
  uint64_t now() const {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
  }
  void pause() const { sched_yield(); }
  uint64_t loadAcquire(const uint64_t* p) {
    uint64_t v = __atomic_load_n(p, __ATOMIC_ACQUIRE);
    if (weak_) visibility::acquired(&reader_, p, v);
    return v;
  }
  void storeRelease(uint64_t* p, uint64_t v) {
    if (weak_) visibility::released(p);
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
  }
  // Cumulative (fence.sc.sys after bar.sync): publishes what the block held.
  void fenceSystem() {
    jitter();
    publish();
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  }
  // The stop and error words: the host reads and writes them as atomics too.
  uint32_t loadWord(const volatile uint32_t* w) const { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
  void storeWord(volatile uint32_t* w, uint32_t v) const { __atomic_store_n(w, v, __ATOMIC_RELEASE); }
  // `v` into `w` unless it holds a value already (the first failure of any block stays).
  void recordWord(volatile uint32_t* w, uint32_t v) const {
    uint32_t none = 0;
    __atomic_compare_exchange_n(w, &none, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
  // Under weak memory the threads leave with the newest view any of them brought.
  int barrierOr(uint32_t v) {
    if (!weak_) return b_.barrier.arrive(v) != 0;
    b_.barrier.raiseEpoch(reader_.epoch);
    int any = b_.barrier.arrive(v) != 0;
    visibility::raise(&reader_, b_.barrier.epoch());
    return any;
  }

  // This thread's share of the copy: whole 16-byte pieces, as a GPU's threads split one.
  void copy(char* dst, const char* src, size_t count) {
    size_t per = (count + threads() - 1) / threads();
    per = (per + 15) / 16 * 16;
    size_t lo = per * thread_ < count ? per * thread_ : count;
    size_t bytes = lo + per < count ? per : count - lo;
    if (bytes == 0) return;
    jitter();
    const char* from = src + lo;
    if (weak_ && regionOf(from) >= 0) {
      seen_.resize(bytes);
      visibility::read(seen_.data(), from, bytes, reader_);
      from = seen_.data();
    }
    int q = weak_ ? regionOf(dst + lo) : -1;
    if (q >= 0 && q != rank_) b_.held.hold(dst + lo, from, bytes);
    else memmove(dst + lo, from, bytes);
  }

  // Every store the block still holds (weak memory); a block's end publishes all.
  void publish() { b_.held.publish(weak_); }

 private:
  void jitter() {
    if (!jitter_) return;
    uint64_t x = xorshift(&rng_);
    if (x % 4 == 0) usleep(static_cast<useconds_t>(x / 4 % 200));
  }
  int regionOf(const char* p) const {
    for (int q = 0; q < n_; ++q)
      if (region_[q] && p >= region_[q] && p < region_[q] + regionBytes_) return q;
    return -1;
  }

  SimBlock& b_;
  int rank_, n_;
  char* region_[KernelColl::kMaxRanks] = {};
  size_t regionBytes_;
  int thread_;
  bool jitter_, weak_;
  uint64_t rng_;
  visibility::Reader reader_;
  std::vector<char> seen_;
};

}  // namespace strata::device::sim
