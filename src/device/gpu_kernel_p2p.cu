// The device-driven point-to-point kernel (kernel_p2p.h) on a GPU: the protocol's
// primitives in PTX, and its data moves as block-wide loops of 16-byte vectors.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "device/gpu_kernels.h"
#include "device/gpu_sync.cuh"
#include "device/kernel_p2p.h"

namespace strata::device::cuda {
namespace {

constexpr int kP2pThreads = 256;
// Four blocks an SM at least: the register budget that leaves (64 each) is also where
// ptxas keeps the kernel free of a stack frame and spills (at 255 it kept 16 bytes).
constexpr int kP2pBlocksPerSm = 4;

__device__ bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

struct P2pPrims : GpuSync {
  const KernelP2p& k;

  __device__ void pause() const { __nanosleep(100); }
  __device__ void fenceSystem() const { __threadfence_system(); }
  __device__ int barrierOr(uint32_t v) const { return __syncthreads_or(static_cast<int>(v)); }
  // Bytes: 16-byte vectors where both pointers allow (slots read from L2: a peer
  // wrote them over NVLink), then byte by byte.
  __device__ void copy(char* dst, const char* src, size_t bytes) const {
    size_t done = 0;
    if (aligned16(dst) && aligned16(src)) {
      for (size_t i = threadIdx.x; i < bytes / 16; i += blockDim.x)
        reinterpret_cast<uint4*>(dst)[i] = __ldcg(reinterpret_cast<const uint4*>(src) + i);
      done = bytes / 16 * 16;
    }
    for (size_t i = done + threadIdx.x; i < bytes; i += blockDim.x)
      dst[i] = static_cast<char>(__ldcg(reinterpret_cast<const unsigned char*>(src) + i));
  }
};

__global__ void __launch_bounds__(kP2pThreads, kP2pBlocksPerSm) p2pKernel(const __grid_constant__ KernelP2p k) {
  P2pPrims p{{}, k};
  kernel::runP2pBlock(k, p, blockIdx.x);
}

}  // namespace

// The blocks of the point-to-point kernel an SM of `device` holds at once (registers
// and threads decide: no shared memory), times its SMs; asked once per device (an
// answer, not a failure, is kept). 0 when CUDA cannot say (no kernel image for this
// GPU). Leaves the current device as it was (switching only when it differs, so no
// other device's context is made) and clears only an error it caused.
int kernelBlocksAtOnce(int device) {
  static std::mutex mu;
  static std::map<int, int> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  int previous = -1, sms = 0, per = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return cudaGetLastError(), 0;
  bool ok = (previous == device || cudaSetDevice(device) == cudaSuccess) &&
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, reinterpret_cast<const void*>(p2pKernel), kP2pThreads,
                                                          0) == cudaSuccess;
  if (previous != device) cudaSetDevice(previous);
  if (!ok) {
    cudaGetLastError();  // the failed query's, not the caller's
    return 0;
  }
  return known[device] = sms * per;
}

void kernelP2p(const KernelP2p& k, void* stream) {
  p2pKernel<<<k.blocks(), kP2pThreads, 0, static_cast<cudaStream_t>(stream)>>>(k);
  checkCuda(cudaGetLastError(), "device-driven point-to-point kernel launch");
}

}  // namespace strata::device::cuda
