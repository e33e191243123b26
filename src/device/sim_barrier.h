// A simulated block's barrier (__syncthreads_or): every one of `threads` host threads
// arrives, and all leave with the OR of what they brought. Reusable at once: a
// generation count tells one round from the next.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

namespace strata::device::sim {

// The simulator's random numbers (pauses, the order held stores land in): xorshift64.
inline uint64_t xorshift(uint64_t* s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

class BlockBarrier {
 public:
  explicit BlockBarrier(int threads) : threads_(threads) {}
  int threads() const { return threads_; }
  uint32_t arrive(uint32_t v) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (v) or_[g & 1].fetch_or(v, std::memory_order_acq_rel);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_) {
      arrived_.store(0, std::memory_order_relaxed);
      or_[(g + 1) & 1].store(0, std::memory_order_relaxed);
      generation_.store(g + 1, std::memory_order_release);
    } else {
      while (generation_.load(std::memory_order_acquire) == g) sched_yield();
    }
    return or_[g & 1].load(std::memory_order_acquire);
  }
  // The newest view (sim_visibility.h) any thread brought to a barrier so far: a
  // thread raises it before it arrives and takes it after it leaves.
  void raiseEpoch(uint64_t e) {
    uint64_t was = epoch_.load(std::memory_order_relaxed);
    while (was < e && !epoch_.compare_exchange_weak(was, e, std::memory_order_acq_rel)) {
    }
  }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

 private:
  int threads_;
  std::atomic<int> arrived_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint32_t> or_[2] = {{0}, {0}};
  std::atomic<uint64_t> epoch_{0};
};

}  // namespace strata::device::sim
