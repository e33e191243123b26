// Copy and reduce kernels for every NCCL type and op. Each thread moves 16 bytes
// per input per step (one vector load), combining the inputs in order and
// rounding to the storage type after every combine, exactly as the CPU path does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "device/combine.h"
#include "device/gpu.h"
#include "device/gpu_format.cuh"
#include "device/gpu_kernels.h"

namespace strata::device::cuda {
namespace {

constexpr int kMaxInputs = 8;  // per launch; more are folded in later launches
constexpr int kThreads = 512;
static_assert(kMaxInputs == kMaxReduceOutputs, "gpu.h promises in-place safety up to this many inputs");

template <typename T>
struct Params {
  const T* in[kMaxInputs];
  T* out[kMaxReduceOutputs];
  int n;
  int nOut;
  ReduceKind kind;
  bool scale;  // multiply by `scalar` (pre-multiplied sum): gpuPrepare only
  typename DevFormat<T>::C scalar;
  const T* scalarAt;  // ncclScalarDevice: the scalar is read here as the kernel runs
  int divide;  // > 1: divide the result (avg)
};

// The in-order combination of x[0..N) (N known at compile time: the loops unroll
// and every value stays in a register).
template <typename T, int N>
__device__ T element(const Params<T>& p, const T (&x)[N]) {
  using F = DevFormat<T>;
  using C = typename F::C;
  if (p.scale) return F::store(combine<typename F::C>(F::load(x[0]), p.scalar, ReduceKind::kProd));  // integers wrap
  T acc = x[0];
#pragma unroll
  for (int j = 1; j < N; ++j) acc = F::store(combine<C>(F::load(acc), F::load(x[j]), p.kind));
  if (p.divide > 1) acc = F::store(F::load(acc) / static_cast<C>(p.divide));
  return acc;
}

// A sum of half or bf16 vectors on packed pairs (add.rn.f16x2 / bf16x2): one
// rounding of the exact sum per step, which for two values of these types is what
// the float path gives (float's 24 bits hold their exact sum, or round away only
// what the 16-bit rounding would); so the same bits as element(), in half the
// instructions (bf16 reached 88% of the copy rate through float on an H200).
template <typename T>
constexpr bool kPackedSum = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <typename T, int N>
__device__ uint4 packedSum(const uint4 (&raw)[N]) {
  using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  uint4 out = raw[0];
  T2* acc = reinterpret_cast<T2*>(&out);
#pragma unroll
  for (int j = 1; j < N; ++j) {
    const T2* x = reinterpret_cast<const T2*>(&raw[j]);
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[k] = __hadd2(acc[k], x[k]);
  }
  return out;
}

// Every output gets the same value; the unrolled loop keeps the pointers out of a
// local array (a runtime index into the parameters would put them there).
template <typename T, typename V>
__device__ void storeAll(const Params<T>& p, size_t at, V value) {
#pragma unroll
  for (int m = 0; m < kMaxReduceOutputs; ++m)
    if (m < p.nOut) {
      if constexpr (std::is_same_v<V, uint4>) {
        __stcs(reinterpret_cast<uint4*>(p.out[m]) + at, value);
      } else {
        p.out[m][at] = value;
      }
    }
}

// Grid-stride over 16-byte vectors when every pointer is 16-byte aligned, then the
// tail element by element. Each thread loads its element of every input before it
// stores that element of any output, so an output may be an input (in place). Specialised on the input count N, so that the inputs'
// vectors live in registers (a runtime count kept them in a local array: a stack
// frame and local loads and stores per element); loads and stores stream (the
// data is read once), leaving the cache to what is reused.
template <typename T, int N>
__global__ void reduceKernel(Params<T> p, size_t count, bool vectors) {
  constexpr int V = 16 / sizeof(T);
  if (p.scalarAt) p.scalar = DevFormat<T>::load(*p.scalarAt);
  [[maybe_unused]] const bool packed = N > 1 && p.kind == ReduceKind::kSum && !p.scale && p.divide <= 1;
  size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t done = 0;
  if (vectors) {
    size_t nvec = count / V;
    for (size_t v = tid; v < nvec; v += stride) {
      uint4 raw[N];
#pragma unroll
      for (int j = 0; j < N; ++j) raw[j] = __ldcs(reinterpret_cast<const uint4*>(p.in[j]) + v);
      uint4 out;
      if constexpr (kPackedSum<T>) {
        if (packed) {
          storeAll(p, v, packedSum<T, N>(raw));
          continue;
        }
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        T x[N];
#pragma unroll
        for (int j = 0; j < N; ++j) x[j] = reinterpret_cast<const T*>(&raw[j])[k];
        reinterpret_cast<T*>(&out)[k] = element<T, N>(p, x);
      }
      storeAll(p, v, out);
    }
    done = nvec * V;
  }
  for (size_t i = done + tid; i < count; i += stride) {
    T x[N];
#pragma unroll
    for (int j = 0; j < N; ++j) x[j] = p.in[j][i];
    storeAll(p, i, element<T, N>(p, x));
  }
}

__global__ void copyKernel(uint4* dst, const uint4* src, size_t n) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}
__global__ void copyBytesKernel(char* dst, const char* src, size_t n) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

// Polls a word of pinned host memory that the host raises; the sleep keeps the
// PCIe reads down to one every few microseconds.
__global__ void waitFlagKernel(const volatile uint64_t* flag, uint64_t value) {
  while (*flag < value) __nanosleep(2000);
}

int blocksFor(size_t work) {
  static int sms = [] {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n > 0 ? n : 80;
  }();
  size_t want = (work + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(want, static_cast<size_t>(sms) * 4)));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// reduceKernel<T, n> for a count n known only at run time (1 to kMaxInputs).
template <typename T, int... I>
void launchFor(int n, int blocks, cudaStream_t s, const Params<T>& p, size_t count, bool vectors,
               std::integer_sequence<int, I...>) {
  ((n == I + 1 ? (reduceKernel<T, I + 1><<<blocks, kThreads, 0, s>>>(p, count, vectors), 0) : 0), ...);
}

template <typename T>
void launch(void* const* outputs, int nOut, const void* const* inputs, int n, size_t count, const ReduceOp& op,
            bool scale, int divide, cudaStream_t s) {
  using C = typename DevFormat<T>::C;
  Params<T> p{};
  p.n = n;
  p.nOut = nOut;
  p.kind = op.kind;
  p.scale = scale;
  p.divide = divide;
  if constexpr (std::is_integral_v<C>) {
    p.scalar = static_cast<C>(op.scalarI);
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    p.scalar = static_cast<C>(op.scalarF);
  } else {  // rounded to the storage type first, as a scalar of that type would be (cpu_reduce.cc)
    p.scalar = static_cast<float>(T(static_cast<float>(op.scalarF)));
  }
  if (scale) p.scalarAt = static_cast<const T*>(op.scalarAt);
  bool vectors = true;
  for (int m = 0; m < nOut; ++m) {
    p.out[m] = static_cast<T*>(outputs[m]);
    vectors = vectors && aligned16(outputs[m]);
  }
  for (int j = 0; j < n; ++j) {
    p.in[j] = static_cast<const T*>(inputs[j]);
    vectors = vectors && aligned16(inputs[j]);
  }
  size_t work = vectors ? count / (16 / sizeof(T)) + 1 : count;
  launchFor<T>(n, blocksFor(work), s, p, count, vectors, std::make_integer_sequence<int, kMaxInputs>{});
  checkCuda(cudaGetLastError(), "reduce kernel launch");
}

size_t elementSize(ncclDataType_t type) {
  size_t bytes = 0;
  withDevType(type, [&](auto tag) { bytes = sizeof(tag); });
  return bytes;
}

}  // namespace

void reduceInOrder(void* const* outputs, int nOut, const void* const* inputs, int n, size_t count,
                   ncclDataType_t type, const ReduceOp& op, void* stream) {
  if (count == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  withDevType(type, [&](auto tag) {
    using T = decltype(tag);
    // Up to 8 inputs per launch; each later launch folds 7 more into outputs[0],
    // keeping the order; the last one writes every output.
    int first = std::min(n, kMaxInputs);
    launch<T>(outputs, first == n ? nOut : 1, inputs, first, count, op, false, first == n ? op.postDivide : 0, s);
    for (int done = first; done < n;) {
      const void* next[kMaxInputs] = {outputs[0]};
      int k = std::min(n - done, kMaxInputs - 1);
      for (int j = 0; j < k; ++j) next[j + 1] = inputs[done + j];
      done += k;
      launch<T>(outputs, done == n ? nOut : 1, next, k + 1, count, op, false, done == n ? op.postDivide : 0, s);
    }
  });
}

void prepare(void* dst, const void* src, size_t count, ncclDataType_t type, const ReduceOp& op, void* stream) {
  if (count == 0) return;
  if (!op.preMultiply) return copy(dst, src, count * elementSize(type), stream);
  const void* in[1] = {src};
  void* out[1] = {dst};
  withDevType(type, [&](auto tag) {
    launch<decltype(tag)>(out, 1, in, 1, count, op, true, 0, static_cast<cudaStream_t>(stream));
  });
}

void waitHostFlag(void* stream, const uint64_t* flag, uint64_t value) {
  void* onDevice = nullptr;
  checkCuda(cudaHostGetDevicePointer(&onDevice, const_cast<uint64_t*>(flag), 0), "cudaHostGetDevicePointer");
  waitFlagKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const volatile uint64_t*>(onDevice), value);
  checkCuda(cudaGetLastError(), "wait kernel launch");
}

void copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (aligned16(dst) && aligned16(src)) {
    size_t n = bytes / 16;
    if (n) copyKernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), n);
    size_t tail = bytes - n * 16;
    if (tail)
      copyBytesKernel<<<1, 32, 0, s>>>(static_cast<char*>(dst) + n * 16, static_cast<const char*>(src) + n * 16, tail);
  } else {  // off 16-byte boundaries: the copy engine, not one byte per thread
    checkCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "cudaMemcpyAsync (an unaligned copy)");
    return;
  }
  checkCuda(cudaGetLastError(), "copy kernel launch");
}

}  // namespace strata::device::cuda
