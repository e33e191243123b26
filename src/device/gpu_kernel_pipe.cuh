// The pipelined collective kernel (kernel_pipe.h) and the LL kernel (kernel_ll.h) on a
// GPU: the protocols' primitives in PTX, and the pipelined kernel's data passes as
// block-wide loops in which every thread keeps kUnroll 16-byte loads of each source in
// flight, combines them (half and bf16 as packed pairs), and stores the result to
// every target. Included by the gpu_kernel_pipe_*.cu files, each instantiating
// launchPipe (both kernels) for a few types, so that the instantiations compile in
// parallel (kernelPipe, in gpu_kernel_pipe.cu, picks one).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "device/combine.h"
#include "device/gpu_format.cuh"
#include "device/gpu_kernels.h"
#include "device/gpu_sync.cuh"
#include "device/kernel_ll.h"
#include "device/kernel_pipe.h"

namespace strata::device::cuda {
namespace {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr bool kBefore90 = true;
#else
constexpr bool kBefore90 = false;
#endif

// 16-byte loads each thread keeps in flight per source: 4 (32 KiB a block of 512);
// 2 for int8, whose sign-extended lanes would not fit the registers otherwise, and 3
// for half and bfloat16 before sm_90 (with 4, sm_80's half kernels spilled 4 bytes).
template <typename T>
constexpr int kUnrollOf = std::is_same_v<T, int8_t> ? 2 : (sizeof(T) == 2 && kBefore90) ? 3 : 4;

__device__ __forceinline__ bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Sources may be slots peers wrote over NVLink: read them from L2 (ld.global.cg),
// never from an L1 line an earlier message left behind.
__device__ __forceinline__ uint4 load16(const char* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ void store16(char* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }

// 16 bytes of T combined lane by lane, in the op's kind; half and bf16 sums and
// products as packed pairs.
template <typename T>
struct Vec {
  using F = DevFormat<T>;
  using C = typename F::C;
  static constexpr int kLanes = 16 / sizeof(T);
  static constexpr bool kPacked = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
  static constexpr bool kBytes = std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>;
  using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;

  __device__ static uint4 combine(uint4 a, uint4 b, ReduceKind kind) {
    if constexpr (kBytes) {  // four lanes per word (vadd4 wraps as the CPU's unsigned sum does)
      unsigned* x = reinterpret_cast<unsigned*>(&a);
      const unsigned* y = reinterpret_cast<const unsigned*>(&b);
      if (kind != ReduceKind::kProd) {
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          constexpr bool kSigned = std::is_signed_v<T>;
          switch (kind) {
            case ReduceKind::kSum: x[w] = __vadd4(x[w], y[w]); break;
            case ReduceKind::kMax: x[w] = kSigned ? __vmaxs4(x[w], y[w]) : __vmaxu4(x[w], y[w]); break;
            default: x[w] = kSigned ? __vmins4(x[w], y[w]) : __vminu4(x[w], y[w]); break;
          }
        }
        return a;
      }
    }
    // Packed sums and products round once from the exact result, as the float path
    // does (float holds a half's or a bfloat16's product exactly); _rn: never fused
    // into an fma. Max and min stay per lane: __hmax2 prefers a number to a NaN and
    // orders -0 before +0, where every other path compares as the CPU does.
    if constexpr (kPacked) {
      if (kind == ReduceKind::kSum || kind == ReduceKind::kProd) {
        T2* x = reinterpret_cast<T2*>(&a);
        const T2* y = reinterpret_cast<const T2*>(&b);
#pragma unroll
        for (int l = 0; l < 4; ++l) x[l] = kind == ReduceKind::kSum ? __hadd2_rn(x[l], y[l]) : __hmul2_rn(x[l], y[l]);
        return a;
      }
    }
    {
      T* x = reinterpret_cast<T*>(&a);
      const T* y = reinterpret_cast<const T*>(&b);
#pragma unroll
      for (int l = 0; l < kLanes; ++l) x[l] = F::store(strata::device::combine<C>(F::load(x[l]), F::load(y[l]), kind));
    }
    return a;
  }
  __device__ static uint4 scale(uint4 a, C s) {
    T* x = reinterpret_cast<T*>(&a);
#pragma unroll
    for (int l = 0; l < kLanes; ++l) x[l] = F::store(strata::device::combine<C>(F::load(x[l]), s, ReduceKind::kProd));
    return a;
  }
  __device__ static uint4 divide(uint4 a, int d) {
    T* x = reinterpret_cast<T*>(&a);
#pragma unroll
    for (int l = 0; l < kLanes; ++l) x[l] = F::store(F::load(x[l]) / static_cast<C>(d));
    return a;
  }
};

template <typename T>
struct PipePrims : GpuSync {
  using F = DevFormat<T>;
  using C = typename F::C;
  const KernelPipe& k;
  C scalar;

  __device__ int threads() const { return blockDim.x; }
  __device__ void pause() const { __nanosleep(32); }
  __device__ int barrierOr(uint32_t v) const { return __syncthreads_or(static_cast<int>(v)); }

  // The data pass thread 0 described (pipe::Pass, in shared memory): every source
  // combined in order, the result to every target. The loops over sources and targets
  // stay loops (their pointers are read from shared memory as they go): one copy of
  // the unrolled vector code, and nothing indexed in a thread's local memory.
  __device__ void pass(const pipe::Pass& xs) const {
    constexpr int kUnroll = kUnrollOf<T>;
    __syncthreads();
    const int nsrc = xs.reduce ? xs.nsrc : 1, ndst = xs.ndst;  // as the simulator reads a pass
    const uint32_t premul = xs.premul;
    const size_t count = xs.count;
    const int divide = xs.finish && k.op.postDivide > 1 ? k.op.postDivide : 0;
    const ReduceKind kind = k.op.kind;
    if (ndst == 0) return;
    bool vec = true;
    for (int s = 0; s < nsrc; ++s) vec = vec && aligned16(xs.src[s]);
    for (int d = 0; d < ndst; ++d) vec = vec && aligned16(xs.dst[d]);
    constexpr int V = Vec<T>::kLanes;
    size_t done = 0;
    if (vec) {
      const size_t nvec = count / V, step = static_cast<size_t>(kUnroll) * blockDim.x;
      for (size_t base = threadIdx.x; base < nvec; base += step) {
        uint4 acc[kUnroll];
        const char* first = xs.src[0];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          size_t i = base + static_cast<size_t>(u) * blockDim.x;
          if (i < nvec) acc[u] = load16(first + 16 * i);
        }
        if (premul & 1)
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) acc[u] = Vec<T>::scale(acc[u], scalar);
#pragma unroll 1
        for (int s = 1; s < nsrc; ++s) {
          const char* from = xs.src[s];
          uint4 x[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            size_t i = base + static_cast<size_t>(u) * blockDim.x;
            if (i < nvec) x[u] = load16(from + 16 * i);
          }
          const bool mul = premul >> s & 1;
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            if (mul) x[u] = Vec<T>::scale(x[u], scalar);
            acc[u] = Vec<T>::combine(acc[u], x[u], kind);
          }
        }
        if (divide)
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) acc[u] = Vec<T>::divide(acc[u], divide);
#pragma unroll 1
        for (int d = 0; d < ndst; ++d) {
          char* to = xs.dst[d];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            size_t i = base + static_cast<size_t>(u) * blockDim.x;
            if (i < nvec) store16(to + 16 * i, acc[u]);
          }
        }
      }
      done = nvec * V;
    }
    for (size_t i = done + threadIdx.x; i < count; i += blockDim.x) {  // the tail, or unaligned buffers
      C acc = F::load(loadOne(xs.src[0], i));
      if (premul & 1) acc = strata::device::combine<C>(acc, scalar, ReduceKind::kProd);
      T a = F::store(acc);
#pragma unroll 1
      for (int s = 1; s < nsrc; ++s) {
        C x = F::load(loadOne(xs.src[s], i));
        if (premul >> s & 1) x = F::load(F::store(strata::device::combine<C>(x, scalar, ReduceKind::kProd)));
        a = F::store(strata::device::combine<C>(F::load(a), x, kind));
      }
      if (divide) a = F::store(F::load(a) / static_cast<C>(divide));
#pragma unroll 1
      for (int d = 0; d < ndst; ++d) reinterpret_cast<T*>(xs.dst[d])[i] = a;
    }
  }

  // The LL protocol's (kernel_ll.h): a unit of 16 bytes, whole or the first `cnt`
  // elements (the rest zero), combined as a pass combines; lines stored and polled
  // with 16-byte volatile accesses, each 8-byte half {data, flag} landing whole.
  __device__ static uint4 bits(const LLUnit& u) { return make_uint4(u.w[0], u.w[1], u.w[2], u.w[3]); }
  __device__ static LLUnit unit(uint4 v) { return LLUnit{{v.x, v.y, v.z, v.w}}; }
  __device__ LLUnit loadUnit(const char* src, size_t cnt, bool multiply) const {
    constexpr int V = Vec<T>::kLanes;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (cnt == V && aligned16(src)) {
      v = load16(src);
    } else {
      T* x = reinterpret_cast<T*>(&v);
#pragma unroll
      for (int l = 0; l < V; ++l)
        if (l < static_cast<int>(cnt)) x[l] = loadOne(src, l);
    }
    return unit(multiply ? Vec<T>::scale(v, scalar) : v);
  }
  __device__ void storeUnit(char* dst, const LLUnit& u, size_t cnt) const {
    constexpr int V = Vec<T>::kLanes;
    uint4 v = bits(u);
    if (cnt == V && aligned16(dst)) {
      store16(dst, v);
      return;
    }
    const T* x = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int l = 0; l < V; ++l)
      if (l < static_cast<int>(cnt)) reinterpret_cast<T*>(dst)[l] = x[l];
  }
  __device__ LLUnit combine(const LLUnit& a, const LLUnit& b) const {
    return unit(Vec<T>::combine(bits(a), bits(b), k.op.kind));
  }
  __device__ LLUnit finish(const LLUnit& a) const {
    return k.op.postDivide > 1 ? unit(Vec<T>::divide(bits(a), k.op.postDivide)) : a;
  }
  __device__ void storeLines(char* first, char* second, const LLUnit& u, uint32_t f) const {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(first), "r"(u.w[0]), "r"(f), "r"(u.w[1]),
                 "r"(f)
                 : "memory");
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(second), "r"(u.w[2]), "r"(f), "r"(u.w[3]),
                 "r"(f)
                 : "memory");
  }
  __device__ LLLines loadLines(const char* first, const char* second) const {
    LLLines l;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(l.v[0]), "=r"(l.v[1]), "=r"(l.v[2]), "=r"(l.v[3])
                 : "l"(first)
                 : "memory");
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(l.v[4]), "=r"(l.v[5]), "=r"(l.v[6]), "=r"(l.v[7])
                 : "l"(second)
                 : "memory");
    return l;
  }

  __device__ static T loadOne(const char* p, size_t i) {
    using Raw = std::conditional_t<sizeof(T) == 1, unsigned char,
                std::conditional_t<sizeof(T) == 2, unsigned short,
                std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>>>;
    Raw raw = __ldcg(reinterpret_cast<const Raw*>(p) + i);
    T v;
    memcpy(&v, &raw, sizeof(T));
    return v;
  }
};

// The op's scalar as the kernel computes with it.
template <typename T>
__device__ typename DevFormat<T>::C scalarOf(const KernelPipe& k) {
  using C = typename DevFormat<T>::C;
  if (k.op.scalarAt) return DevFormat<T>::load(*static_cast<const T*>(k.op.scalarAt));  // ncclScalarDevice: read now
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(k.op.scalarI);
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return static_cast<C>(k.op.scalarF);
  } else {  // rounded to the storage type first, as the CPU does
    return DevFormat<T>::load(DevFormat<T>::store(static_cast<float>(k.op.scalarF)));
  }
}

template <typename T>
__global__ void __launch_bounds__(kPipeThreads, 1) pipeKernel(const __grid_constant__ KernelPipe k) {
  __shared__ pipe::Block block;
  PipePrims<T> p{{}, k, scalarOf<T>(k)};
  pipe::runBlock(k, p, block, blockIdx.x);
}

template <typename T>
__global__ void __launch_bounds__(kPipeThreads, 1) llKernel(const __grid_constant__ KernelPipe k) {
  PipePrims<T> p{{}, k, scalarOf<T>(k)};
  ll::runBlock(k, p, blockIdx.x);
}

}  // namespace

template <typename T>
void launchPipe(const KernelPipe& k, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (k.algo == KernelPipe::kMeshLL) llKernel<T><<<k.blocks, kPipeThreads, 0, s>>>(k);
  else pipeKernel<T><<<k.blocks, kPipeThreads, 0, s>>>(k);
}

}  // namespace strata::device::cuda
