// The device-driven collective kernel (kernel_coll.h) on a GPU: the protocol's
// primitives in PTX, and its data moves as block-wide loops of 16-byte vectors.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>

#include "device/combine.h"
#include "device/gpu_format.cuh"
#include "device/gpu_kernels.h"
#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"

namespace strata::device::cuda {
namespace {

constexpr int kCollThreads = 256;

__device__ bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Slots are written by peers over NVLink/PCIe: read them from L2 (ld.global.cg), never
// from an L1 line an earlier operation left behind.
template <typename T>
__device__ T loadCg(const T* p) {
  using Raw = std::conditional_t<sizeof(T) == 1, unsigned char,
              std::conditional_t<sizeof(T) == 2, unsigned short,
              std::conditional_t<sizeof(T) == 4, unsigned int,
              std::conditional_t<sizeof(T) == 8, unsigned long long, uint4>>>>;
  Raw raw = __ldcg(reinterpret_cast<const Raw*>(p));
  T v;
  memcpy(&v, &raw, sizeof(T));
  return v;
}

template <typename T>
struct GpuPrims {
  using F = DevFormat<T>;
  using C = typename F::C;
  const KernelColl& k;
  C scalar;

  __device__ int thread() const { return threadIdx.x; }
  __device__ int threads() const { return blockDim.x; }
  __device__ uint64_t now() const {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
  __device__ void pause() const { __nanosleep(100); }
  __device__ uint64_t loadAcquire(const uint64_t* p) const {
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
  }
  __device__ void storeRelease(uint64_t* p, uint64_t v) const {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
  __device__ void fenceSystem() const { __threadfence_system(); }
  __device__ uint32_t loadWord(const volatile uint32_t* w) const { return *w; }
  __device__ void storeWord(volatile uint32_t* w, uint32_t v) const { *w = v; }
  __device__ void fenceDevice() const { __threadfence(); }
  __device__ int barrierOr(uint32_t v) const { return __syncthreads_or(static_cast<int>(v)); }
  __device__ uint64_t fetchAdd(uint64_t* p, uint64_t v) const {
    return atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  }

  __device__ void copy(char* dst, const char* src, size_t count) const {
    size_t bytes = count * sizeof(T), done = 0;
    if (aligned16(dst) && aligned16(src)) {
      for (size_t i = threadIdx.x; i < bytes / 16; i += blockDim.x)
        reinterpret_cast<uint4*>(dst)[i] = loadCg(reinterpret_cast<const uint4*>(src) + i);
      done = bytes / 16 * 16;
    }
    for (size_t i = done / sizeof(T) + threadIdx.x; i < count; i += blockDim.x)
      reinterpret_cast<T*>(dst)[i] = loadCg(reinterpret_cast<const T*>(src) + i);
  }
  __device__ T scaled(T x) const { return F::store(combine<C>(F::load(x), scalar, ReduceKind::kProd)); }
  // A pre-multiplied sum's input times the scalar: 16-byte vectors where both
  // pointers allow, then element by element.
  __device__ void prepare(char* dst, const char* src, size_t count) const {
    if (!k.op.preMultiply) return copy(dst, src, count);
    constexpr int V = 16 / sizeof(T);
    size_t done = 0;
    if (aligned16(dst) && aligned16(src)) {
      for (size_t i = threadIdx.x; i < count / V; i += blockDim.x) {
        uint4 raw = loadCg(reinterpret_cast<const uint4*>(src) + i);
        T* x = reinterpret_cast<T*>(&raw);
#pragma unroll
        for (int l = 0; l < V; ++l) x[l] = scaled(x[l]);
        reinterpret_cast<uint4*>(dst)[i] = raw;
      }
      done = count / V * V;
    }
    for (size_t i = done + threadIdx.x; i < count; i += blockDim.x)
      reinterpret_cast<T*>(dst)[i] = scaled(loadCg(reinterpret_cast<const T*>(src) + i));
  }
  // In rank order, rounding to T after every step; the inputs' pointers stay in
  // registers (the loop over ranks unrolls to kMaxRanks, guarded by n).
  __device__ T combineAt(const T* const (&in)[KernelColl::kMaxRanks], int n, size_t i) const {
    T acc = loadCg(in[0] + i);
#pragma unroll
    for (int j = 1; j < KernelColl::kMaxRanks; ++j)
      if (j < n) acc = F::store(combine<C>(F::load(acc), F::load(loadCg(in[j] + i)), k.op.kind));
    if (k.op.postDivide > 1) acc = F::store(F::load(acc) / static_cast<C>(k.op.postDivide));
    return acc;
  }
  // 16-byte vectors where every pointer allows (slots always do), then element by element.
  __device__ void reduce(char* dst, const char* const* inputs, int n, size_t count) const {
    constexpr int V = 16 / sizeof(T);
    const T* in[KernelColl::kMaxRanks];
    bool vec = aligned16(dst);
#pragma unroll
    for (int j = 0; j < KernelColl::kMaxRanks; ++j) {
      in[j] = reinterpret_cast<const T*>(inputs[j]);
      if (j < n) vec = vec && aligned16(in[j]);
    }
    T* out = reinterpret_cast<T*>(dst);
    size_t done = 0;
    if (vec) {
      for (size_t i = threadIdx.x; i < count / V; i += blockDim.x) {
        uint4 acc = loadCg(reinterpret_cast<const uint4*>(in[0]) + i);
        T* a = reinterpret_cast<T*>(&acc);
#pragma unroll
        for (int j = 1; j < KernelColl::kMaxRanks; ++j) {
          if (j >= n) break;
          uint4 raw = loadCg(reinterpret_cast<const uint4*>(in[j]) + i);
          const T* x = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int l = 0; l < V; ++l) a[l] = F::store(combine<C>(F::load(a[l]), F::load(x[l]), k.op.kind));
        }
        if (k.op.postDivide > 1)
#pragma unroll
          for (int l = 0; l < V; ++l) a[l] = F::store(F::load(a[l]) / static_cast<C>(k.op.postDivide));
        reinterpret_cast<uint4*>(dst)[i] = acc;
      }
      done = count / V * V;
    }
    for (size_t i = done + threadIdx.x; i < count; i += blockDim.x) out[i] = combineAt(in, n, i);
  }
};

template <typename T>
__global__ void __launch_bounds__(kCollThreads) collKernel(const __grid_constant__ KernelColl k) {
  using C = typename DevFormat<T>::C;
  GpuPrims<T> p{k, C{}};
  if (k.op.scalarAt) {  // ncclScalarDevice: read as the kernel runs
    p.scalar = DevFormat<T>::load(*static_cast<const T*>(k.op.scalarAt));
  } else if constexpr (std::is_integral_v<C>) {
    p.scalar = static_cast<C>(k.op.scalarI);
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    p.scalar = static_cast<C>(k.op.scalarF);
  } else {  // rounded to the storage type first, as the CPU does
    p.scalar = DevFormat<T>::load(DevFormat<T>::store(static_cast<float>(k.op.scalarF)));
  }
  kernel::runBlock(k, p, blockIdx.x);
}

// Point-to-point moves bytes: the primitives' copy over unsigned char (16-byte
// vectors where the buffer allows), no reduction.
__global__ void __launch_bounds__(kCollThreads) p2pKernel(const __grid_constant__ KernelP2p k) {
  KernelColl bytes;
  GpuPrims<unsigned char> p{bytes, 0};
  kernel::runP2pBlock(k, p, blockIdx.x);
}

}  // namespace

void kernelColl(const KernelColl& k, void* stream) {
  withDevType(k.type, [&](auto tag) {
    collKernel<decltype(tag)><<<k.blocks, kCollThreads, 0, static_cast<cudaStream_t>(stream)>>>(k);
  });
  checkCuda(cudaGetLastError(), "device-driven collective kernel launch");
}

// The fewest blocks of any device-driven kernel an SM of `device` holds at once
// (registers and threads decide: no shared memory), times its SMs; asked once per
// device (an answer, not a failure, is kept). 0 when CUDA cannot say (no kernel
// image for this GPU): no such kernels then. Leaves the current device as it was
// (switching only when it differs, so no other device's context is made) and
// clears only an error it caused.
int kernelBlocksAtOnce(int device) {
  static std::mutex mu;
  static std::map<int, int> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  int previous = -1, sms = 0, fewest = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) return cudaGetLastError(), 0;
  bool ok = (previous == device || cudaSetDevice(device) == cudaSuccess) &&
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess;
  auto least = [&](const void* fn) {
    int per = 0;
    ok = ok && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, fn, kCollThreads, 0) == cudaSuccess;
    fewest = fewest < 0 || per < fewest ? per : fewest;
  };
  least(reinterpret_cast<const void*>(p2pKernel));
  for (ncclDataType_t t : {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64, ncclFloat16, ncclFloat32,
                           ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2})
    withDevType(t, [&](auto tag) { least(reinterpret_cast<const void*>(collKernel<decltype(tag)>)); });
  if (previous != device) cudaSetDevice(previous);
  if (!ok) {
    cudaGetLastError();  // the failed query's, not the caller's
    return 0;
  }
  return known[device] = sms * fewest;
}

void kernelP2p(const KernelP2p& k, void* stream) {
  p2pKernel<<<k.blocks(), kCollThreads, 0, static_cast<cudaStream_t>(stream)>>>(k);
  checkCuda(cudaGetLastError(), "device-driven point-to-point kernel launch");
}

}  // namespace strata::device::cuda
