// The synchronisation primitives every device-driven protocol uses on a GPU, in PTX
// at system scope: a peer's region is another GPU's memory (NVLink or PCIe), and the
// stop and error words are mapped host memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::device::cuda {

struct GpuSync {
  __device__ int thread() const { return threadIdx.x; }
  __device__ uint64_t now() const {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
  __device__ uint64_t loadAcquire(const uint64_t* p) const {
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
  }
  __device__ uint64_t loadRelaxed(const uint64_t* p) const {
    uint64_t v;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
  }
  __device__ void storeRelease(uint64_t* p, uint64_t v) const {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
  __device__ void storeRelaxed(uint64_t* p, uint64_t v) const {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
  __device__ uint32_t loadWord(const volatile uint32_t* w) const { return *w; }
  __device__ void storeWord(volatile uint32_t* w, uint32_t v) const { *w = v; }
  // `v` into `w` unless it holds a value already: the first failure of any block
  // stays. A device-scope atomic: only this GPU's blocks race on the word (atomics
  // on mapped host memory are atomic for the device, not for the host, which
  // reads the word and clears it only between kernels).
  __device__ void recordWord(volatile uint32_t* w, uint32_t v) const {
    atomicCAS(const_cast<unsigned int*>(reinterpret_cast<volatile unsigned int*>(w)), 0u, v);
  }
};

}  // namespace strata::device::cuda
