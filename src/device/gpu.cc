// gpu.h's functions, served by the backend chosen at first use.
#include "device/gpu.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "base/mutation.h"
#include "device/gpu_backend.h"
#include "device/gpu_sim_state.h"

namespace strata::device {
namespace {

// No GPU at all: a build without CUDA. Nothing is device memory, so nothing else is called.
class NoGpus final : public GpuBackend {
 public:
  int count() override { return 0; }
  std::string unavailableReason() override { return "this build has no CUDA (configure with nvcc on the PATH)"; }
  bool isDevicePointer(const void*, int*) override { return false; }
  int currentDevice() override { return -1; }
  int setCurrentDevice(int) override { return -1; }
  void* alloc(size_t) override { refuse("device memory"); }
  void free(void*) override { refuse("device memory"); }
  void reduceInOrder(void* const*, int, const void* const*, int, size_t, ncclDataType_t, const ReduceOp&,
                     void*) override {
    refuse("device kernels");
  }
  void prepare(void*, const void*, size_t, ncclDataType_t, const ReduceOp&, void*) override { refuse("device kernels"); }
  void copy(void*, const void*, size_t, void*) override { refuse("device kernels"); }
  uint64_t captureId(void*) override { return 0; }
  void* pinnedAlloc(size_t) override { refuse("pinned memory"); }
  void pinnedFree(void*) override { refuse("pinned memory"); }
  void copyAsync(void*, const void*, size_t, void*) override { refuse("copies"); }
  void hostCallback(void*, void (*)(void*), void*) override { refuse("streams"); }
  void waitHostFlag(void*, const uint64_t*, uint64_t) override { refuse("streams"); }
  void* streamCreate() override { refuse("streams"); }
  void streamDestroy(void*) override { refuse("streams"); }
  void streamSynchronize(void*) override { refuse("streams"); }
  bool streamIdle(void*) override { refuse("streams"); }
  int streamDevice(void*) override { return -1; }
  void copySync(void*, const void*, size_t) override { refuse("copies"); }
  void memsetSync(void*, int, size_t) override { refuse("copies"); }
  void* ipcAlloc(size_t, std::string*) override { refuse("CUDA IPC"); }
  void ipcFree(void*) override { refuse("CUDA IPC"); }
  void* ipcOpen(const std::string&, std::string* why) override {
    *why = unavailableReason();
    return nullptr;
  }
  void ipcClose(void*) override { refuse("CUDA IPC"); }
  std::string busId(int) override { return ""; }
  bool canAccessPeer(int, int) override { return false; }
  int exchangeCaptureMode(int mode) override { return mode; }
  void kernelP2p(const KernelP2p&, void*) override { refuse("device kernels"); }
  void kernelPipe(const KernelPipe&, void*) override { refuse("device kernels"); }
  int pipeChannels(int) override { return 0; }
  int kernelBlocksAtOnce(int) override { return 0; }
  void* mappedPointer(void*) override { refuse("pinned memory"); }
  void* eventCreate() override { refuse("events"); }
  void eventDestroy(void*) override { refuse("events"); }
  void eventRecord(void*, void*) override { refuse("events"); }
  void streamWaitEvent(void*, void*) override { refuse("events"); }
  bool eventDone(void*) override { refuse("events"); }
  void graphBegin(void*) override { refuse("CUDA graphs"); }
  void* graphEnd(void*, std::string*) override { refuse("CUDA graphs"); }
  void graphLaunch(void*, void*) override { refuse("CUDA graphs"); }
  void graphDestroy(void*) override { refuse("CUDA graphs"); }
  bool enablePeerAccess(int, std::string* why) override {
    *why = unavailableReason();
    return false;
  }

 private:
  [[noreturn]] void refuse(const char* what) { fail(ncclInvalidUsage, "%s: %s", what, unavailableReason().c_str()); }
};

GpuBackend& backend() {
  static const bool simulated = config().gpuSim > 0;
  if (simulated) sim::countRuntimeCall();
  static GpuBackend* chosen = [] {
    static std::unique_ptr<GpuBackend> owned;
    if (config().gpuSim > 0) {
      owned = simulatedGpus(config().gpuSim, config().gpuSimStrict);
      return owned.get();
    }
    if (GpuBackend* cuda = cudaGpus()) return cuda;
    owned = std::make_unique<NoGpus>();
    return owned.get();
  }();
  return *chosen;
}

}  // namespace

uint64_t runtimeCalls() { return config().gpuSim > 0 ? sim::runtimeCallsOfThread() : 0; }
int gpuCount() {
  static const int n = backend().count();  // fixed for the process
  return n;
}
std::string gpuUnavailableReason() { return backend().unavailableReason(); }
bool isDevicePointer(const void* p, int* device) { return p && backend().isDevicePointer(p, device); }
int currentDevice() { return backend().currentDevice(); }
namespace {

// Frees kept while work that holds flag waits is in flight (holdFrees).
enum class FreeKind { kDevice, kPinned, kIpc };
struct Kept {
  FreeKind kind;
  void* p;
  int device;  // the GPU whose work the free synchronises; -1: every GPU (pinned memory)
};
struct KeptFrees {
  std::mutex mu;  // held while freeing: no hold starts meanwhile
  std::vector<Kept> kept;
  std::atomic<int> holds{0};
};
KeptFrees& keptFrees() {
  static auto* k = new KeptFrees;  // never destroyed: frees may come at exit
  return *k;
}

void freeNow(FreeKind kind, void* p) {
  RelaxedCapture relaxed;
  if (kind == FreeKind::kDevice) backend().free(p);
  if (kind == FreeKind::kPinned) backend().pinnedFree(p);
  if (kind == FreeKind::kIpc) backend().ipcFree(p);
}

// Under k.mu, with nothing holding: what was kept, except device memory of another
// GPU than the calling thread's. Freeing that synchronises the other GPU, where a
// device-driven kernel of another rank may wait for this thread's next collective
// (ranks as threads, one per GPU): that GPU's own threads free it later.
void freeKeptLocked(KeptFrees& k) {
  std::vector<Kept> now;
  int self = backend().currentDevice();
  for (size_t i = 0; i < k.kept.size();) {
    if (k.kept[i].device < 0 || k.kept[i].device == self) {
      now.push_back(k.kept[i]);
      k.kept[i] = k.kept.back();
      k.kept.pop_back();
    } else {
      ++i;
    }
  }
  for (auto& [kind, p, device] : now) {
    try {
      freeNow(kind, p);
    } catch (const Error& e) {
      STRATA_WARN(-1, "device memory kept during device work: freeing it failed: %s", e.what());
    }
  }
}

void freeOrKeep(FreeKind kind, void* p) {
  KeptFrees& k = keptFrees();
  std::lock_guard<std::mutex> lock(k.mu);
  if (k.holds.load() > 0) {
    int device = -1;
    if (kind != FreeKind::kPinned) backend().isDevicePointer(p, &device);
    k.kept.push_back({kind, p, device});
    return;
  }
  freeKeptLocked(k);
  freeNow(kind, p);
}

// Before an allocation: frees what was kept, if nothing holds now.
void freeKept() {
  KeptFrees& k = keptFrees();
  if (k.holds.load() > 0) return;
  std::lock_guard<std::mutex> lock(k.mu);
  if (k.holds.load() == 0 && !k.kept.empty()) freeKeptLocked(k);
}

}  // namespace

void holdFrees() {
  KeptFrees& k = keptFrees();
  std::lock_guard<std::mutex> lock(k.mu);
  if (k.holds.load() == 0 && !k.kept.empty()) freeKeptLocked(k);  // nothing in flight: the last chance for a while
  k.holds.fetch_add(1);
}
void releaseFrees() { keptFrees().holds.fetch_sub(1); }

void* gpuAlloc(size_t bytes, bool duringCapture) {
  if (!duringCapture) freeKept();
  RelaxedCapture relaxed;
  return backend().alloc(bytes);
}
void gpuFree(void* p) { freeOrKeep(FreeKind::kDevice, p); }
void gpuReduceInOrder(void* const* outputs, int nOut, const void* const* inputs, int n, size_t count,
                      ncclDataType_t type, const ReduceOp& op, void* stream) {
  STRATA_REQUIRE(nOut >= 1 && nOut <= kMaxReduceOutputs && n >= 1, ncclInternalError,
                 "reduce kernel: %d outputs of %d inputs (1 to %d outputs, 1 input or more)", nOut, n,
                 kMaxReduceOutputs);
  if (count) backend().reduceInOrder(outputs, nOut, inputs, n, count, type, op, stream);
}
void gpuPrepare(void* dst, const void* src, size_t count, ncclDataType_t type, const ReduceOp& op, void* stream) {
  if (count) backend().prepare(dst, src, count, type, op, stream);
}
void gpuCopy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes && dst != src) backend().copy(dst, src, bytes, stream);
}
void launchKernelP2p(const KernelP2p& k, void* stream) {
  KernelP2p run = k;  // the mutation stage's fault (base/mutation.h)
  run.skipBarrier = mutated(Mutation::kKernelSkipBarrier);
  backend().kernelP2p(run, stream);
}
void launchKernelPipe(const KernelPipe& k, void* stream) {
  KernelPipe run = k;  // the mutation stage's faults (base/mutation.h)
  run.relaxedFlag = mutated(Mutation::kKernelRelaxedFlag);
  run.skipBarrier = mutated(Mutation::kKernelSkipBarrier);
  run.llOneFlag = mutated(Mutation::kKernelLLOneFlag);
  run.skipAcquire = mutated(Mutation::kKernelSkipAcquire);
  backend().kernelPipe(run, stream);
}
int pipeChannels(int device) { return backend().pipeChannels(device); }
int kernelBlocksAtOnce(int device) { return backend().kernelBlocksAtOnce(device); }
void* mappedPointer(void* pinned) { return backend().mappedPointer(pinned); }
void* eventCreate() { return backend().eventCreate(); }
void eventDestroy(void* event) { backend().eventDestroy(event); }
void eventRecord(void* event, void* stream) { backend().eventRecord(event, stream); }
void streamWaitEvent(void* stream, void* event) { backend().streamWaitEvent(stream, event); }
bool eventSynchronize(void* event, double seconds, const std::function<bool()>& stop) {
  RelaxedCapture relaxed;
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(0);
  for (int polls = 0;; ++polls) {
    if (backend().eventDone(event)) return true;
    if ((stop && stop()) || std::chrono::steady_clock::now() - start > std::chrono::duration<double>(seconds))
      return false;
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      pause = std::min(std::chrono::microseconds(100), pause + std::chrono::microseconds(5));
      std::this_thread::sleep_for(pause);
    }
  }
}
void graphBegin(void* stream) { backend().graphBegin(stream); }
void* graphEnd(void* stream, std::string* why) { return backend().graphEnd(stream, why); }
void graphLaunch(void* graph, void* stream) { backend().graphLaunch(graph, stream); }
void graphDestroy(void* graph) { backend().graphDestroy(graph); }
bool streamCapturing(void* stream) { return streamCaptureId(stream) != 0; }
uint64_t streamCaptureId(void* stream) {
  // Asking about a stream is safe during any capture; about the legacy stream, only in
  // relaxed mode (it is implicitly synchronising).
  if (stream && stream != kLegacyStream) return backend().captureId(stream);
  RelaxedCapture relaxed;
  return backend().captureId(stream);
}
void* pinnedAlloc(size_t bytes) {
  freeKept();
  RelaxedCapture relaxed;
  return backend().pinnedAlloc(bytes);
}
void pinnedFree(void* p) { freeOrKeep(FreeKind::kPinned, p); }
void copyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes) backend().copyAsync(dst, src, bytes, stream);
}
void hostCallback(void* stream, void (*fn)(void*), void* arg) { backend().hostCallback(stream, fn, arg); }
void waitHostFlag(void* stream, const uint64_t* flag, uint64_t value) { backend().waitHostFlag(stream, flag, value); }
int setCurrentDevice(int device) { return backend().setCurrentDevice(device); }
void* streamCreate() { return backend().streamCreate(); }
void streamDestroy(void* stream) { backend().streamDestroy(stream); }
void streamSynchronize(void* stream) {
  RelaxedCapture relaxed;
  backend().streamSynchronize(stream);
}
bool streamIdle(void* stream) {
  RelaxedCapture relaxed;
  return backend().streamIdle(stream);
}
int streamDevice(void* stream) {
  if (stream == nullptr || stream == kLegacyStream) return -1;
  return backend().streamDevice(stream);
}
void copySync(void* dst, const void* src, size_t bytes) {
  RelaxedCapture relaxed;
  if (bytes) backend().copySync(dst, src, bytes);
}
void memsetSync(void* dst, int value, size_t bytes) {
  RelaxedCapture relaxed;
  if (bytes) backend().memsetSync(dst, value, bytes);
}
void* ipcAlloc(size_t bytes, std::string* handle) {
  freeKept();
  RelaxedCapture relaxed;
  return backend().ipcAlloc(bytes, handle);
}
void ipcFree(void* p) { freeOrKeep(FreeKind::kIpc, p); }
void* ipcOpen(const std::string& handle, std::string* why) {
  RelaxedCapture relaxed;
  return backend().ipcOpen(handle, why);
}
void ipcClose(void* p) {
  RelaxedCapture relaxed;
  backend().ipcClose(p);
}
bool exportDmabuf(const void* p, size_t bytes, int* fd, uint64_t* offset, std::string* why) {
  return backend().exportDmabuf(p, bytes, fd, offset, why);
}
std::string gpuBusId(int device) { return device < 0 ? "" : backend().busId(device); }
RelaxedCapture::RelaxedCapture() : previous_(backend().exchangeCaptureMode(kRelaxedCapture)) {}
RelaxedCapture::~RelaxedCapture() { backend().exchangeCaptureMode(previous_); }
bool simulateCapture(void* stream, bool begin) { return backend().simulateCapture(stream, begin); }
uint64_t simulatedUnalignedKernels() { return backend().unalignedKernels(); }
bool canAccessPeer(int device, int peer) { return device == peer || backend().canAccessPeer(device, peer); }
bool enablePeerAccess(int peer, std::string* why) { return backend().enablePeerAccess(peer, why); }

}  // namespace strata::device
