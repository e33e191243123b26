// The GPU layer over the CUDA runtime (linked statically, so the library loads
// on machines without the toolkit; the driver is looked up at first use).
#include <cuda_runtime.h>

#include <cstring>
#include <mutex>

#include "base/error.h"
#include "device/gpu.h"

namespace strata::device {
namespace {

struct Probe {
  int count = 0;
  std::string why;
};

const Probe& probe() {
  static Probe p = [] {
    Probe r;
    cudaError_t e = cudaGetDeviceCount(&r.count);
    if (e != cudaSuccess) {
      r.count = 0;
      r.why = std::string("CUDA reports no usable GPU: ") + cudaGetErrorString(e);
      cudaGetLastError();  // not sticky: clear it for later calls
    } else if (r.count == 0) {
      r.why = "no GPU is visible (CUDA_VISIBLE_DEVICES?)";
    }
    return r;
  }();
  return p;
}

}  // namespace

void checkCuda(int err, const char* what) {
  if (err != cudaSuccess)
    fail(ncclUnhandledCudaError, "%s: %s", what, cudaGetErrorString(static_cast<cudaError_t>(err)));
}

bool gpuBuild() { return true; }
int gpuCount() { return probe().count; }
std::string gpuUnavailableReason() { return probe().why; }

bool isDevicePointer(const void* p, int* device) {
  if (!p || gpuCount() == 0) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  bool onDevice = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  if (onDevice && device) *device = a.device;
  return onDevice;
}

int currentDevice() {
  int d = -1;
  if (gpuCount() == 0 || cudaGetDevice(&d) != cudaSuccess) return -1;
  return d;
}

void* gpuAlloc(size_t bytes) {
  STRATA_REQUIRE(gpuCount() > 0, ncclInvalidUsage, "device memory: %s", gpuUnavailableReason().c_str());
  void* p = nullptr;
  checkCuda(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void gpuFree(void* p) { checkCuda(cudaFree(p), "cudaFree"); }

bool streamCapturing(void* stream) {
  if (gpuCount() == 0) return false;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  checkCuda(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &st), "cudaStreamIsCapturing");
  return st != cudaStreamCaptureStatusNone;
}

void* pinnedAlloc(size_t bytes) {
  void* p = nullptr;
  checkCuda(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
  return p;
}

void pinnedFree(void* p) { checkCuda(cudaFreeHost(p), "cudaFreeHost"); }

void copyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  checkCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)), "cudaMemcpyAsync");
}

void hostCallback(void* stream, void (*fn)(void*), void* arg) {
  checkCuda(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), fn, arg), "cudaLaunchHostFunc");
}

void* streamCreate() {
  cudaStream_t s = nullptr;
  checkCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return s;
}
void streamDestroy(void* stream) { checkCuda(cudaStreamDestroy(static_cast<cudaStream_t>(stream)), "cudaStreamDestroy"); }
void streamSynchronize(void* stream) {
  checkCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}
// Not on the legacy default stream: that one waits for every blocking stream of the
// device, including a user's stream held by the device path for this very thread.
cudaStream_t threadStream() {
  thread_local cudaStream_t s = static_cast<cudaStream_t>(streamCreate());
  return s;
}
void copySync(void* dst, const void* src, size_t bytes) {
  checkCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, threadStream()), "cudaMemcpyAsync");
  checkCuda(cudaStreamSynchronize(threadStream()), "cudaStreamSynchronize");
}
void memsetSync(void* dst, int value, size_t bytes) {
  checkCuda(cudaMemsetAsync(dst, value, bytes, threadStream()), "cudaMemsetAsync");
  checkCuda(cudaStreamSynchronize(threadStream()), "cudaStreamSynchronize");
}

void* ipcAlloc(size_t bytes, std::string* handle) {
  void* p = gpuAlloc(bytes);
  cudaIpcMemHandle_t h;
  cudaError_t e = cudaIpcGetMemHandle(&h, p);
  if (e != cudaSuccess) {
    cudaFree(p);
    checkCuda(e, "cudaIpcGetMemHandle");
  }
  handle->assign(reinterpret_cast<const char*>(&h), sizeof h);
  return p;
}

void ipcFree(void* p) { checkCuda(cudaFree(p), "cudaFree"); }

void* ipcOpen(const std::string& handle, std::string* why) {
  cudaIpcMemHandle_t h;
  if (handle.size() != sizeof h) {
    *why = "malformed IPC handle";
    return nullptr;
  }
  memcpy(&h, handle.data(), sizeof h);
  void* p = nullptr;
  cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *why = std::string("cudaIpcOpenMemHandle: ") + cudaGetErrorString(e);
    return nullptr;
  }
  return p;
}

void ipcClose(void* p) { checkCuda(cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle"); }

std::string gpuBusId(int device) {
  char id[32] = {};
  if (device < 0 || cudaDeviceGetPCIBusId(id, sizeof id, device) != cudaSuccess) return "";
  std::string s = id;
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  size_t colon = s.find(':');
  return colon != std::string::npos && colon > 4 ? s.substr(colon - 4) : s;
}

int setCurrentDevice(int device) {
  int prev = currentDevice();
  if (device >= 0 && device != prev) checkCuda(cudaSetDevice(device), "cudaSetDevice");
  return prev;
}

}  // namespace strata::device
