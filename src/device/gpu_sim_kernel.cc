// The device-driven collective kernel (kernel_coll.h) on a simulated GPU: the same
// protocol code, with host atomics for the primitives and each block run as one
// thread, blocks one after another (a block waits only for the same block of its
// peers, which run theirs in the same order). Data moves with the CPU functions.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <time.h>

#include <cstring>

#include "base/config.h"
#include "device/cpu_reduce.h"
#include "device/gpu_sim_state.h"
#include "device/kernel_coll.h"

namespace strata::device::sim {
namespace {

// STRATA_GPU_SIM_JITTER: a quarter of the data moves and fences first pause for up
// to 200 us, so that ranks and blocks interleave in ways plain runs rarely show
// (a GPU's blocks are scheduled and delayed independently).
void jitter() {
  if (!config().gpuSimJitter) return;
  thread_local uint64_t x = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(pthread_self());
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  if (x % 4 == 0) usleep(static_cast<useconds_t>(x / 4 % 200));
}

struct HostPrims {
  const KernelColl& k;
  ReduceOp plain;  // the reduction of prepared inputs: no pre-multiplication again

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
  void fenceSystem() const {
    jitter();
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  }
  void fenceDevice() const { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
  // The stop and error words: the host reads and writes them as atomics too.
  uint32_t loadWord(const volatile uint32_t* w) const { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
  void storeWord(volatile uint32_t* w, uint32_t v) const { __atomic_store_n(w, v, __ATOMIC_RELEASE); }
  int barrierOr(uint32_t v) const { return v != 0; }
  uint64_t fetchAdd(uint64_t* p, uint64_t v) const { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }

  void copy(char* dst, const char* src, size_t count) const {
    jitter();
    memmove(dst, src, count * k.es);
  }
  void prepare(char* dst, const char* src, size_t count) const {
    jitter();
    device::prepare(dst, src, count, k.type, k.op);
  }
  void reduce(char* dst, const char* const* inputs, int n, size_t count) const {
    jitter();
    const void* in[KernelColl::kMaxRanks];
    for (int j = 0; j < n; ++j) in[j] = inputs[j];
    device::reduceInOrder(dst, in, n, count, k.type, plain);
  }
};

}  // namespace

void runKernelColl(const KernelColl& given) {
  KernelColl k = given;
  if (k.op.scalarAt) loadScalar(k.op.scalarAt, k.type, &k.op);  // now, as the kernel runs
  HostPrims p{k, k.op};
  p.plain.preMultiply = false;
  for (int b = 0; b < k.blocks; ++b) kernel::runBlock(k, p, b);
}

}  // namespace strata::device::sim
