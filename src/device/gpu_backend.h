// What gpu.h's functions are served by: CUDA (gpu_cuda.cc), simulated GPUs in host
// memory for testing the device path without one (gpu_sim.cc, STRATA_GPU_SIM), or
// none (gpu.cc). Chosen once per process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "device/cpu_reduce.h"
#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"
#include "device/kernel_pipe.h"

namespace strata::device {

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  virtual int count() = 0;
  virtual std::string unavailableReason() = 0;
  virtual bool isDevicePointer(const void* p, int* device) = 0;
  virtual int currentDevice() = 0;
  virtual int setCurrentDevice(int device) = 0;
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  // gpuReduceInOrder (gpu.h), its contract included.
  virtual void reduceInOrder(void* const* outputs, int nOut, const void* const* inputs, int n, size_t count,
                             ncclDataType_t type, const ReduceOp& op, void* stream) = 0;
  virtual void prepare(void* dst, const void* src, size_t count, ncclDataType_t type, const ReduceOp& op,
                       void* stream) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes, void* stream) = 0;
  // cudaStreamGetCaptureInfo: the capture sequence `stream` belongs to, 0 when none.
  virtual uint64_t captureId(void* stream) = 0;
  virtual void* pinnedAlloc(size_t bytes) = 0;
  virtual void pinnedFree(void* p) = 0;
  virtual void copyAsync(void* dst, const void* src, size_t bytes, void* stream) = 0;
  virtual void hostCallback(void* stream, void (*fn)(void*), void* arg) = 0;
  virtual void waitHostFlag(void* stream, const uint64_t* flag, uint64_t value) = 0;
  virtual void* streamCreate() = 0;
  virtual void streamDestroy(void* stream) = 0;
  virtual void streamSynchronize(void* stream) = 0;
  virtual bool streamIdle(void* stream) = 0;
  // The device a created stream belongs to (-1: the legacy or per-thread default stream, or unknown).
  virtual int streamDevice(void* stream) = 0;
  virtual void copySync(void* dst, const void* src, size_t bytes) = 0;
  virtual void memsetSync(void* dst, int value, size_t bytes) = 0;
  virtual void* ipcAlloc(size_t bytes, std::string* handle) = 0;
  virtual void ipcFree(void* p) = 0;
  virtual void* ipcOpen(const std::string& handle, std::string* why) = 0;
  virtual void ipcClose(void* p) = 0;
  virtual std::string busId(int device) = 0;
  virtual bool canAccessPeer(int device, int peer) = 0;
  // cudaThreadExchangeStreamCaptureMode: sets the calling thread's mode (0 global, 1
  // thread-local, 2 relaxed, as cudaStreamCaptureMode) and returns the previous one.
  virtual int exchangeCaptureMode(int mode) = 0;
  // Simulated GPUs only: the calling thread begins (or ends) capturing `stream` in
  // global mode; ending returns false when the capture was invalidated.
  virtual bool simulateCapture(void* stream, bool begin) {
    (void)stream, (void)begin;
    return false;
  }
  // Simulated GPUs only: reduce and pre-multiply kernels launched with a pointer that
  // is not 16-byte aligned (see device::simulatedUnalignedKernels).
  virtual uint64_t unalignedKernels() { return 0; }
  virtual bool enablePeerAccess(int peer, std::string* why) = 0;
  // The device-driven point-to-point kernel (kernel_p2p.h) on `stream`.
  virtual void kernelP2p(const KernelP2p& k, void* stream) = 0;
  // The pipelined collective kernel (kernel_pipe.h) on `stream`.
  virtual void kernelPipe(const KernelPipe& k, void* stream) = 0;
  // The most channels (blocks) a pipelined kernel takes on `device` (0: none).
  virtual int pipeChannels(int device) = 0;
  // Blocks of the device-driven kernels `device` runs at once (0: none).
  virtual int kernelBlocksAtOnce(int device) = 0;
  // The address kernels use for pinned host memory from pinnedAlloc.
  virtual void* mappedPointer(void* pinned) = 0;
  // CUDA graphs: capture `stream` (global mode) from graphBegin to graphEnd, which
  // returns the instantiated graph (null with *why when the capture failed).
  virtual void* eventCreate() = 0;
  virtual void eventDestroy(void* event) = 0;
  virtual void eventRecord(void* event, void* stream) = 0;
  virtual void streamWaitEvent(void* stream, void* event) = 0;
  // cudaEventQuery: whether the event's last mark was reached (errors throw).
  virtual bool eventDone(void* event) = 0;
  virtual void graphBegin(void* stream) = 0;
  virtual void* graphEnd(void* stream, std::string* why) = 0;
  virtual void graphLaunch(void* graph, void* stream) = 0;
  virtual void graphDestroy(void* graph) = 0;
  virtual bool exportDmabuf(const void* p, size_t bytes, int* fd, uint64_t* offset, std::string* why) {
    (void)p, (void)bytes, (void)fd, (void)offset;
    *why = "no GPU to export device memory from";
    return false;
  }
};

// The CUDA backend, or null in a build without CUDA.
GpuBackend* cudaGpus();
// `n` GPUs simulated in host memory: streams are worker threads, kernels the CPU
// functions, CUDA IPC shared-memory segments. For tests of the device path.
// Memory knows its device; a kernel reaching another device's memory without peer
// access, or launched into another device's stream, fails as on a GPU. `strict`:
// CUDA calls on a thread that never set its device fail too.
std::unique_ptr<GpuBackend> simulatedGpus(int n, bool strict);

}  // namespace strata::device
