// The GPU layer of a build without CUDA: no GPUs, so every buffer is host memory.
#include "base/error.h"
#include "device/gpu.h"

namespace strata::device {

bool gpuBuild() { return false; }
int gpuCount() { return 0; }
std::string gpuUnavailableReason() { return "this build has no CUDA (configure with nvcc on the PATH)"; }
bool isDevicePointer(const void*, int*) { return false; }
int currentDevice() { return -1; }

void* gpuAlloc(size_t) { fail(ncclInvalidUsage, "device memory: %s", gpuUnavailableReason().c_str()); }
void gpuFree(void*) { fail(ncclInvalidUsage, "device memory: %s", gpuUnavailableReason().c_str()); }

void gpuReduceInOrder(void*, const void* const*, int, size_t, ncclDataType_t, const ReduceOp&, void*) {
  fail(ncclInvalidUsage, "device kernels: %s", gpuUnavailableReason().c_str());
}
void gpuPrepare(void*, const void*, size_t, ncclDataType_t, const ReduceOp&, void*) {
  fail(ncclInvalidUsage, "device kernels: %s", gpuUnavailableReason().c_str());
}
void gpuCopy(void*, const void*, size_t, void*) { fail(ncclInvalidUsage, "device kernels: %s", gpuUnavailableReason().c_str()); }

bool streamCapturing(void*) { return false; }
void* pinnedAlloc(size_t) { fail(ncclInvalidUsage, "pinned memory: %s", gpuUnavailableReason().c_str()); }
void pinnedFree(void*) { fail(ncclInvalidUsage, "pinned memory: %s", gpuUnavailableReason().c_str()); }
void copyAsync(void*, const void*, size_t, void*) { fail(ncclInvalidUsage, "copies: %s", gpuUnavailableReason().c_str()); }
void hostCallback(void*, void (*)(void*), void*) { fail(ncclInvalidUsage, "streams: %s", gpuUnavailableReason().c_str()); }
void waitHostFlag(void*, const uint64_t*, uint64_t) { fail(ncclInvalidUsage, "streams: %s", gpuUnavailableReason().c_str()); }
int setCurrentDevice(int) { return -1; }
void* streamCreate() { fail(ncclInvalidUsage, "streams: %s", gpuUnavailableReason().c_str()); }
void streamDestroy(void*) { fail(ncclInvalidUsage, "streams: %s", gpuUnavailableReason().c_str()); }
void streamSynchronize(void*) { fail(ncclInvalidUsage, "streams: %s", gpuUnavailableReason().c_str()); }
void copySync(void*, const void*, size_t) { fail(ncclInvalidUsage, "copies: %s", gpuUnavailableReason().c_str()); }
void memsetSync(void*, int, size_t) { fail(ncclInvalidUsage, "copies: %s", gpuUnavailableReason().c_str()); }

void* ipcAlloc(size_t, std::string*) { fail(ncclInvalidUsage, "CUDA IPC: %s", gpuUnavailableReason().c_str()); }
void ipcFree(void*) { fail(ncclInvalidUsage, "CUDA IPC: %s", gpuUnavailableReason().c_str()); }
void* ipcOpen(const std::string&, std::string* why) {
  *why = gpuUnavailableReason();
  return nullptr;
}
void ipcClose(void*) { fail(ncclInvalidUsage, "CUDA IPC: %s", gpuUnavailableReason().c_str()); }
std::string gpuBusId(int) { return ""; }

}  // namespace strata::device
