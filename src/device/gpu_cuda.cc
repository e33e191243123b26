// The CUDA backend (linked statically, so the library loads on machines without
// the toolkit; the driver is looked up at first use).
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

#include "base/error.h"
#include "device/gpu_backend.h"
#include "device/gpu_kernels.h"

namespace strata::device {
namespace cuda {

void checkCuda(int err, const char* what) {
  if (err != cudaSuccess)
    fail(ncclUnhandledCudaError, "%s: %s", what, cudaGetErrorString(static_cast<cudaError_t>(err)));
}

}  // namespace cuda

namespace {

using cuda::checkCuda;

cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }

class CudaGpus final : public GpuBackend {
 public:
  CudaGpus() {
    cudaError_t e = cudaGetDeviceCount(&count_);
    if (e != cudaSuccess) {
      count_ = 0;
      why_ = std::string("CUDA reports no usable GPU: ") + cudaGetErrorString(e);
      cudaGetLastError();  // not sticky: clear it for later calls
    } else if (count_ == 0) {
      why_ = "no GPU is visible (CUDA_VISIBLE_DEVICES?)";
    }
  }
  int count() override { return count_; }
  std::string unavailableReason() override { return why_; }
  bool isDevicePointer(const void* p, int* device) override {
    if (count_ == 0) return false;
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    bool onDevice = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
    if (onDevice && device) *device = a.device;
    return onDevice;
  }
  int currentDevice() override {
    int d = -1;
    return count_ > 0 && cudaGetDevice(&d) == cudaSuccess ? d : -1;
  }
  int setCurrentDevice(int device) override {
    int prev = currentDevice();
    if (device >= 0 && device != prev) checkCuda(cudaSetDevice(device), "cudaSetDevice");
    return prev;
  }
  void* alloc(size_t bytes) override {
    STRATA_REQUIRE(count_ > 0, ncclInvalidUsage, "device memory: %s", why_.c_str());
    void* p = nullptr;
    checkCuda(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void free(void* p) override { checkCuda(cudaFree(p), "cudaFree"); }
  void reduceInOrder(void* const* outputs, int nOut, const void* const* inputs, int n, size_t count,
                     ncclDataType_t type, const ReduceOp& op, void* stream) override {
    cuda::reduceInOrder(outputs, nOut, inputs, n, count, type, op, stream);
  }
  void prepare(void* dst, const void* src, size_t count, ncclDataType_t type, const ReduceOp& op, void* stream) override {
    cuda::prepare(dst, src, count, type, op, stream);
  }
  void copy(void* dst, const void* src, size_t bytes, void* stream) override { cuda::copy(dst, src, bytes, stream); }
  void kernelP2p(const KernelP2p& k, void* stream) override { cuda::kernelP2p(k, stream); }
  void kernelPipe(const KernelPipe& k, void* stream) override { cuda::kernelPipe(k, stream); }
  // A channel per SM, up to KernelPipe::kMaxChannels (a block of 512 threads each:
  // one per SM at a time; the kernel's grid must fit beside the p2p kernel's).
  int pipeChannels(int device) override {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return cudaGetLastError(), 0;
    return sms < KernelPipe::kMaxChannels ? sms : KernelPipe::kMaxChannels;
  }
  int kernelBlocksAtOnce(int device) override { return cuda::kernelBlocksAtOnce(device); }
  void* mappedPointer(void* pinned) override {
    void* p = nullptr;
    checkCuda(cudaHostGetDevicePointer(&p, pinned, 0), "cudaHostGetDevicePointer");
    return p;
  }
  void* eventCreate() override {
    cudaEvent_t e = nullptr;
    checkCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }
  void eventDestroy(void* event) override { checkCuda(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "cudaEventDestroy"); }
  void eventRecord(void* event, void* stream) override {
    checkCuda(cudaEventRecord(static_cast<cudaEvent_t>(event), asStream(stream)), "cudaEventRecord");
  }
  void streamWaitEvent(void* stream, void* event) override {
    checkCuda(cudaStreamWaitEvent(asStream(stream), static_cast<cudaEvent_t>(event), 0), "cudaStreamWaitEvent");
  }
  bool eventDone(void* event) override {
    cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaErrorNotReady) return false;
    checkCuda(e, "cudaEventQuery");
    return true;
  }
  void graphBegin(void* stream) override {
    checkCuda(cudaStreamBeginCapture(asStream(stream), cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  }
  void* graphEnd(void* stream, std::string* why) override {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaError_t e = cudaStreamEndCapture(asStream(stream), &g);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess) {
      *why = std::string("capturing the stream failed: ") + cudaGetErrorString(e);
      cudaGetLastError();
      return nullptr;
    }
    return exec;
  }
  void graphLaunch(void* graph, void* stream) override {
    checkCuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), asStream(stream)), "cudaGraphLaunch");
  }
  void graphDestroy(void* graph) override { checkCuda(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)), "cudaGraphExecDestroy"); }
  uint64_t captureId(void* stream) override {
    if (count_ == 0) return 0;
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    checkCuda(cudaStreamGetCaptureInfo(asStream(stream), &st, &id), "cudaStreamGetCaptureInfo");
    STRATA_REQUIRE(st != cudaStreamCaptureStatusInvalidated, ncclInvalidUsage,
                   "the stream's CUDA graph capture was invalidated (an earlier call during the capture was not "
                   "permitted); end it and capture again");
    return st == cudaStreamCaptureStatusActive ? id + 1 : 0;  // + 1: an id of 0 would read as "none"
  }
  void* pinnedAlloc(size_t bytes) override {
    void* p = nullptr;
    checkCuda(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
    return p;
  }
  void pinnedFree(void* p) override { checkCuda(cudaFreeHost(p), "cudaFreeHost"); }
  void copyAsync(void* dst, const void* src, size_t bytes, void* stream) override {
    checkCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, asStream(stream)), "cudaMemcpyAsync");
  }
  void hostCallback(void* stream, void (*fn)(void*), void* arg) override {
    checkCuda(cudaLaunchHostFunc(asStream(stream), fn, arg), "cudaLaunchHostFunc");
  }
  void waitHostFlag(void* stream, const uint64_t* flag, uint64_t value) override {
    cuda::waitHostFlag(stream, flag, value);
  }
  void* streamCreate() override {
    cudaStream_t s = nullptr;
    checkCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }
  void streamDestroy(void* stream) override { checkCuda(cudaStreamDestroy(asStream(stream)), "cudaStreamDestroy"); }
  void streamSynchronize(void* stream) override {
    checkCuda(cudaStreamSynchronize(asStream(stream)), "cudaStreamSynchronize");
  }
  int streamDevice(void* stream) override {
    int d = -1;
    if (cudaStreamGetDevice(asStream(stream), &d) != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return d;
  }
  bool streamIdle(void* stream) override {
    cudaError_t e = cudaStreamQuery(asStream(stream));
    if (e == cudaErrorNotReady) return false;
    checkCuda(e, "cudaStreamQuery");
    return true;
  }
  // Not on the legacy default stream: that one waits for every blocking stream of
  // the device, including a user's stream held by the device path for this thread.
  void copySync(void* dst, const void* src, size_t bytes) override {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, asStream(threadStream()));
    if (e != cudaSuccess)
      fail(ncclUnhandledCudaError, "cudaMemcpyAsync of %zu bytes, %p (%s) <- %p (%s), device %d: %s", bytes, dst,
           describe(dst).c_str(), src, describe(src).c_str(), currentDevice(), cudaGetErrorString(e));
    streamSynchronize(threadStream());
  }
  void memsetSync(void* dst, int value, size_t bytes) override {
    checkCuda(cudaMemsetAsync(dst, value, bytes, asStream(threadStream())), "cudaMemsetAsync");
    streamSynchronize(threadStream());
  }
  void* ipcAlloc(size_t bytes, std::string* handle) override {
    void* p = alloc(bytes);
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaIpcGetMemHandle(&h, p);
    if (e != cudaSuccess) {
      cudaFree(p);
      checkCuda(e, "cudaIpcGetMemHandle");
    }
    handle->assign(reinterpret_cast<const char*>(&h), sizeof h);
    return p;
  }
  void ipcFree(void* p) override { free(p); }
  void* ipcOpen(const std::string& handle, std::string* why) override {
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
  void ipcClose(void* p) override { checkCuda(cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle"); }
  int exchangeCaptureMode(int mode) override {
    if (count_ == 0) return mode;
    auto m = static_cast<cudaStreamCaptureMode>(mode);
    if (cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) cudaGetLastError();
    return static_cast<int>(m);
  }
  bool canAccessPeer(int device, int peer) override {
    int can = 0;
    bool ok = cudaDeviceCanAccessPeer(&can, device, peer) == cudaSuccess && can;
    cudaGetLastError();
    return ok;
  }
  bool enablePeerAccess(int peer, std::string* why) override {
    int self = currentDevice(), can = 0;
    if (self < 0 || peer == self) return self >= 0;
    cudaError_t e = cudaDeviceCanAccessPeer(&can, self, peer);
    if (e == cudaSuccess && !can) {
      *why = format("device %d has no peer access to device %d (cudaDeviceCanAccessPeer)", self, peer);
      return false;
    }
    if (e == cudaSuccess) e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) e = cudaSuccess;
    if (e != cudaSuccess) *why = format("cudaDeviceEnablePeerAccess(%d) on device %d: %s", peer, self,
                                        cudaGetErrorString(e));
    cudaGetLastError();  // neither answer is sticky
    return e == cudaSuccess;
  }
  std::string busId(int device) override {
    char id[32] = {};
    if (cudaDeviceGetPCIBusId(id, sizeof id, device) != cudaSuccess) return "";
    std::string s = id;
    for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    size_t colon = s.find(':');
    return colon != std::string::npos && colon > 4 ? s.substr(colon - 4) : s;
  }

  // cuMemGetHandleForAddressRange (CUDA 11.7+, through the runtime's entry point: the
  // runtime is linked statically, the driver API is not) on the pages around the range.
  bool exportDmabuf(const void* p, size_t bytes, int* fd, uint64_t* offset, std::string* why) override {
    using Fn = CUresult (*)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
    static Fn fn = [] {
      void* f = nullptr;
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &f, 11070, cudaEnableDefault, &q) !=
              cudaSuccess ||
          q != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return static_cast<Fn>(nullptr);
      }
      return reinterpret_cast<Fn>(f);
    }();
    if (!fn) {
      *why = "the CUDA driver has no cuMemGetHandleForAddressRange (before 11.7)";
      return false;
    }
    uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)), a = reinterpret_cast<uintptr_t>(p);
    uintptr_t base = a & ~(page - 1), end = (a + bytes + page - 1) & ~(page - 1);
    int out = -1;
    CUresult r = fn(&out, static_cast<CUdeviceptr>(base), end - base, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS) {
      *why = "cuMemGetHandleForAddressRange failed (error " + std::to_string(static_cast<int>(r)) +
             "): the kernel or driver has no dma-buf support for this memory";
      return false;
    }
    *fd = out;
    *offset = a - base;
    return true;
  }

 private:
  // What CUDA knows of a pointer, for messages.
  static std::string describe(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();
      return "unknown to CUDA";
    }
    const char* kinds[] = {"unregistered host", "pinned host", "device", "managed"};
    int k = static_cast<int>(a.type);
    return format("%s, device %d", k >= 0 && k < 4 ? kinds[k] : "?", a.device);
  }
  void* threadStream() {
    thread_local void* s = streamCreate();
    return s;
  }
  int count_ = 0;
  std::string why_;
};

}  // namespace

GpuBackend* cudaGpus() {
  static CudaGpus gpus;
  return &gpus;
}

}  // namespace strata::device
