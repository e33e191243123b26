// What the device-driven kernels share: the collectives they run, why a kernel gave
// up (the error word: why << 8 | the rank it waited for), and the function that
// records it. The collective kernel is device/kernel_pipe.h; point-to-point is
// device/kernel_p2p.h. Each protocol is written once over primitives that the GPU
// (PTX) and the simulated GPUs (host atomics) provide, so simulated runs execute
// that very code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/cpu_reduce.h"

#ifdef __CUDACC__
#define STRATA_KERNEL_FN __host__ __device__
#define STRATA_KERNEL_INLINE __host__ __device__ __forceinline__  // no call frame in a kernel's loop
#else
#define STRATA_KERNEL_FN
#define STRATA_KERNEL_INLINE inline
#endif

// nvcc hands host-side copies of __host__ __device__ code to the host compiler,
// which knows only its own spelling.
#if defined(__CUDA_ARCH__)
#define STRATA_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define STRATA_UNROLL  // nvcc's host pass of a .cu file: no host code there runs these loops
#else
#define STRATA_UNROLL _Pragma("GCC unroll 8")
#endif

namespace strata::device {

struct KernelColl {
  static constexpr int kMaxRanks = 8;  // ranks a point-to-point kernel addresses
  enum Coll : int { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAllToAll, kGather, kScatter };
  // What the error word holds: why << 8 | the rank waited for (kPoisoned: the rank
  // that failed first).
  enum Why : uint32_t { kStopped = 1, kTimedOut = 2, kSizeMismatch = 3, kPoisoned = 4 };
};

namespace kernel {

STRATA_KERNEL_FN inline size_t minSize(size_t a, size_t b) { return a < b ? a : b; }

template <class K, class P>  // K: a kernel's arguments with its error word
STRATA_KERNEL_FN inline uint32_t giveUp(const K& k, P& p, uint32_t why, int peer) {
  p.recordWord(k.error, why << 8 | static_cast<uint32_t>(peer));
  return 1;
}

}  // namespace kernel
}  // namespace strata::device
