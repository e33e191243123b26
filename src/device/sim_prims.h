// The device-driven protocol's primitives (kernel_coll.h) on the host: host atomics
// for flags and words, a block as one thread, data moved with the CPU functions.
// The simulated GPUs run kernels with them, and the protocol's own tests run them
// without any GPU.
//
// Two ways to be harsher than a plain run:
// - jitter: a quarter of the data moves and fences first pause for up to 200 us, so
//   ranks and blocks interleave in ways plain runs rarely show;
// - weak memory: a block's stores into peers' regions are held back and published,
//   piece by piece in shuffled order, only at a system fence or when the block ends
//   (a GPU may keep them in flight until then; a release store alone publishes
//   nothing here). A protocol that raises a flag before fencing its data then shows
//   peers stale slots. The block's own reads never touch what it held: it reads only
//   its own region and buffers.
#pragma once

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <utility>
#include <vector>

#include "device/cpu_reduce.h"
#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"

namespace strata::device::sim {

class HostPrims {
 public:
  // Point-to-point moves bytes.
  HostPrims(const KernelP2p& k, bool jitter, bool weak)
      : es_(1), type_(ncclUint8), rank_(k.rank), n_(k.n), regionBytes_(KernelP2p::regionBytes(k.n)),
        jitter_(jitter), weak_(weak) {
    for (int q = 0; q < n_; ++q) region_[q] = k.region[q];
  }

  int thread() const { return 0; }
  int threads() const { return 1; }
  uint64_t now() const {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
  }
  void pause() const { sched_yield(); }
  uint64_t loadAcquire(const uint64_t* p) const { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  void storeRelease(uint64_t* p, uint64_t v) const { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
  void fenceSystem() {
    jitter();
    publish();
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  }
  void fenceDevice() const { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
  // The stop and error words: the host reads and writes them as atomics too.
  uint32_t loadWord(const volatile uint32_t* w) const { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
  void storeWord(volatile uint32_t* w, uint32_t v) const { __atomic_store_n(w, v, __ATOMIC_RELEASE); }
  // `v` into `w` unless it holds a value already (the first failure of any block stays).
  void recordWord(volatile uint32_t* w, uint32_t v) const {
    uint32_t none = 0;
    __atomic_compare_exchange_n(w, &none, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
  int barrierOr(uint32_t v) const { return v != 0; }
  uint64_t fetchAdd(uint64_t* p, uint64_t v) const { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }

  void copy(char* dst, const char* src, size_t count) {
    jitter();
    if (char* h = hold(dst, count)) memcpy(h, src, count * es_);
    else memmove(dst, src, count * es_);
  }
  void prepare(char* dst, const char* src, size_t count) {
    jitter();
    char* h = hold(dst, count);
    device::prepare(h ? h : dst, src, count, type_, op_);
  }
  void reduce(char* dst, const char* const* inputs, int n, size_t count) {
    jitter();
    const void* in[KernelColl::kMaxRanks];
    for (int j = 0; j < n; ++j) in[j] = inputs[j];
    char* h = hold(dst, count);
    device::reduceInOrder(h ? h : dst, in, n, count, type_, plain_);
  }

  // Every store still held, in shuffled 4 KiB pieces (weak memory); the block calls
  // it when it ends, as a kernel's end publishes everything.
  void publish() {
    std::vector<std::pair<char*, const char*>> pieces;
    std::vector<size_t> sizes;
    for (Held& h : held_)
      for (size_t at = 0; at < h.bytes.size(); at += kPiece) {
        pieces.emplace_back(h.dst + at, h.bytes.data() + at);
        sizes.push_back(h.bytes.size() - at < kPiece ? h.bytes.size() - at : kPiece);
      }
    for (size_t i = pieces.size(); i > 1; --i) {  // Fisher-Yates
      size_t j = next() % i;
      std::swap(pieces[i - 1], pieces[j]);
      std::swap(sizes[i - 1], sizes[j]);
    }
    for (size_t i = 0; i < pieces.size(); ++i) memcpy(pieces[i].first, pieces[i].second, sizes[i]);
    held_.clear();
  }

 private:
  static constexpr size_t kPiece = 4096;
  struct Held {
    char* dst;
    std::vector<char> bytes;
  };

  uint64_t next() {
    rng_ ^= rng_ << 13, rng_ ^= rng_ >> 7, rng_ ^= rng_ << 17;
    return rng_;
  }
  void jitter() {
    if (!jitter_) return;
    uint64_t x = next();
    if (x % 4 == 0) usleep(static_cast<useconds_t>(x / 4 % 200));
  }
  // Where a store of `count` elements to `dst` goes instead, under weak memory, when
  // dst lies in a peer's region; null: store it now.
  char* hold(char* dst, size_t count) {
    if (!weak_ || count == 0) return nullptr;
    for (int q = 0; q < n_; ++q)
      if (q != rank_ && dst >= region_[q] && dst < region_[q] + regionBytes_) {
        held_.push_back({dst, std::vector<char>(count * es_)});
        return held_.back().bytes.data();
      }
    return nullptr;
  }

  int es_;
  ncclDataType_t type_;
  ReduceOp op_, plain_;
  int rank_, n_;
  char* region_[KernelColl::kMaxRanks] = {};
  size_t regionBytes_;
  bool jitter_, weak_;
  uint64_t rng_ = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(pthread_self());
  std::vector<Held> held_;
};

}  // namespace strata::device::sim
