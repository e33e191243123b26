// GPUs simulated in host memory (STRATA_GPU_SIM=N), so that the device path (the
// staging, the streams and their callbacks, the proxy, cuda_ipc and the GPU-to-GPU
// collectives) runs and is tested on machines without a GPU. A stream is a worker
// thread running its work in order; a kernel is the CPU function of the same name;
// "device memory" is host memory this backend hands out and recognises; a CUDA IPC
// handle names a POSIX shared-memory segment, so processes map each other's buffers.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "device/dtypes.h"
#include "device/gpu.h"
#include "device/gpu_backend.h"
#include "device/gpu_sim_state.h"
#include "device/sim_pipe.h"

namespace strata::device {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The reduce kernel as gpu.h promises it: up to kMaxReduceOutputs inputs are all read
// before any output is written (here: combined aside, then copied to every output);
// beyond that outputs[0] accumulates, as the GPU's later launches fold into it.
void reduceToAll(const std::vector<void*>& out, const std::vector<const void*>& in, size_t count,
                 ncclDataType_t type, const ReduceOp& op) {
  const int n = static_cast<int>(in.size());
  const size_t bytes = count * dtypeSize(type);
  std::vector<char> aside;
  void* acc = out[0];
  if (n <= kMaxReduceOutputs) {
    aside.resize(bytes);
    acc = aside.data();
  }
  device::reduceInOrder(acc, in.data(), n, count, type, op);
  for (void* p : out)
    if (p != acc) memcpy(p, acc, bytes);
}

using namespace sim;  // NOLINT: the simulation's state (gpu_sim_state.h) is this file's own

// CUDA refuses a copy or memset that runs past the allocation it starts in
// (cudaErrorInvalidValue): a test's upload one byte longer than its buffer passed
// here and failed on an H200. The allocation is found by walking the page table back
// to the nearest page marked as a block's first (its header); the walk stops at a
// page nobody owns, and memory without a header (IPC segments) is not checked. It
// reads no page of data: a stream may be writing those (ThreadSanitizer saw the
// walk read a page an earlier copy into the same buffer was writing).
void withinAllocation(const void* p, size_t bytes, const char* call) {
  if (bytes == 0 || !inArena(p)) return;
  auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = kArenaBase + kOwnersOffset + kOwnersBytes;
  for (uintptr_t page = a & ~uintptr_t{4095}; page >= first; page -= 4096) {
    if (ownerOf(reinterpret_cast<const void*>(page)) < 0) return;  // unmapped: no header before p
    if (!isBlockStart(reinterpret_cast<const void*>(page))) continue;
    BlockHeader h;
    memcpy(&h, reinterpret_cast<const void*>(page), sizeof h);
    if (h.magic != kBlockMagic) return;
    uintptr_t begin = page + kBlockHeader, end = begin + h.bytes;
    if (a < begin || a >= end) return;  // another block's header: p's memory has none
    STRATA_REQUIRE(bytes <= end - a, ncclUnhandledCudaError,
                   "simulated GPU: %s of %zu bytes at %p runs %zu bytes past the end of its %zu-byte allocation "
                   "(CUDA: invalid argument)", call, bytes, p, bytes - (end - a), static_cast<size_t>(h.bytes));
    return;
  }
}

class SimGpus final : public GpuBackend {
 public:
  SimGpus(int n, bool strict) : n_(n), strict_(strict) {}
  // At exit a stream may still be held by a wait nobody will end: its thread is
  // left running (parked where leak checkers still see it), not joined.
  ~SimGpus() override {
    static auto* parked = new std::vector<SimStream*>();
    for (auto& [handle, st] : streams_) parked->push_back(st.release());
  }
  int count() override { return n_; }
  std::string unavailableReason() override { return ""; }
  bool isDevicePointer(const void* p, int* device) override {
    int owner = ownerOf(p);
    if (owner < 0) return false;
    if (device) *device = owner;
    return true;
  }
  int currentDevice() override { return std::max(sim::currentDevice(), 0); }
  // -1 for a thread that never set one: restoring that leaves the thread alone (a
  // CUDA thread restored to "device 0" would get device 0's context).
  int setCurrentDevice(int device) override {
    int prev = sim::currentDevice();
    if (device >= 0) sim::setCurrentDevice(device % n_);
    return prev;
  }
  bool canAccessPeer(int device, int peer) override { return device >= 0 && peer >= 0 && device < n_ && peer < n_; }
  // Kernels on the current device reach `peer`'s memory (every simulated pair can).
  bool enablePeerAccess(int peer, std::string* why) override {
    int self = use("cudaDeviceEnablePeerAccess");
    if (peer < 0 || peer >= n_) {
      *why = format("simulated GPU: no device %d (%d simulated)", peer, n_);
      return false;
    }
    arena().peers[self].fetch_or(uint64_t{1} << peer);
    return true;
  }
  void* alloc(size_t bytes) override {
    sim::unsafeDuringCapture("cudaMalloc");
    int device = use("cudaMalloc");
    size_t span = (kBlockHeader + bytes + 4095) / 4096 * 4096;
    int fd = memfd_create("strata-gpusim", MFD_CLOEXEC);
    if (fd < 0) failErrno("simulated GPU: memfd_create");
    if (ftruncate(fd, static_cast<off_t>(span)) != 0) {
      close(fd);
      failErrno("simulated GPU: sizing device memory");
    }
    char* block = nullptr;
    try {
      block = arenaTake(kBlockHeader + bytes, fd, device);
    } catch (...) {
      close(fd);
      throw;
    }
    BlockHeader h{bytes, fd, kBlockMagic};
    memcpy(block, &h, sizeof h);
    markBlockStart(block);
    return block + kBlockHeader;
  }
  void free(void* p) override {
    forbidden("cudaFree");
    STRATA_REQUIRE(inArena(p), ncclInvalidArgument, "simulated GPU: %p is not device memory", p);
    sim::unsafeDuringCapture("cudaFree");
    sim::synchronizeDevice(ownerOf(p), n_, "cudaFree");
    char* block = static_cast<char*>(p) - kBlockHeader;
    BlockHeader h;
    memcpy(&h, block, sizeof h);
    arenaRelease(block, kBlockHeader + h.bytes);
    close(h.fd);
  }
  // The allocation's memfd, found from the mapping that holds `p` (/proc/self/maps:
  // every allocation is one mapping, its header first).
  bool exportDmabuf(const void* p, size_t bytes, int* fd, uint64_t* offset, std::string* why) override {
    auto a = reinterpret_cast<uintptr_t>(p);
    uintptr_t start = 0, end = 0;
    if (!inArena(p) || !mappingOf(a, &start, &end)) {
      *why = "simulated GPU: not device memory";
      return false;
    }
    BlockHeader h;
    memcpy(&h, reinterpret_cast<void*>(start), sizeof h);
    if (h.magic != kBlockMagic || a + bytes > start + kBlockHeader + h.bytes) {
      *why = "simulated GPU: only memory from gpuAlloc exports (not IPC mappings or a range past an allocation)";
      return false;
    }
    *fd = dup(h.fd);
    *offset = a - start;
    if (*fd < 0) *why = std::string("simulated GPU: dup: ") + strerror(errno);
    return *fd >= 0;
  }
  void reduceInOrder(void* const* outputs, int nOut, const void* const* inputs, int n, size_t count,
                     ncclDataType_t type, const ReduceOp& op, void* stream) override {
    std::vector<const void*> in(inputs, inputs + n);
    std::vector<void*> out(outputs, outputs + nOut);
    int dev = launch("the reduce kernel", stream);
    bool aligned = true;
    for (void* p : out) {
      reaches(dev, "the reduce kernel", p);
      aligned = aligned && aligned16(p);
    }
    for (const void* p : in) {
      reaches(dev, "the reduce kernel", p);
      aligned = aligned && aligned16(p);
    }
    if (!aligned) deviceWork(dev).unalignedKernels.fetch_add(1);
    on(stream, [=] { reduceToAll(out, in, count, type, op); });
  }
  void prepare(void* dst, const void* src, size_t count, ncclDataType_t type, const ReduceOp& op, void* stream) override {
    int dev = launch("the prepare kernel", stream);
    reaches(dev, "the prepare kernel", dst);
    reaches(dev, "the prepare kernel", src);
    if (op.preMultiply && !(aligned16(dst) && aligned16(src)))  // else a copy, which any alignment suits
      deviceWork(dev).unalignedKernels.fetch_add(1);
    on(stream, [=] {
      ReduceOp now = op;
      if (now.scalarAt) loadScalar(now.scalarAt, type, &now);  // ncclScalarDevice: read as the kernel runs
      device::prepare(dst, src, count, type, now);
    });
  }
  void copy(void* dst, const void* src, size_t bytes, void* stream) override {
    within(dst, bytes, "the copy kernel");
    within(src, bytes, "the copy kernel");
    int dev = launch("the copy kernel", stream);
    reaches(dev, "the copy kernel", dst);
    reaches(dev, "the copy kernel", src);
    on(stream, [=] { memmove(dst, src, bytes); });
  }
  uint64_t unalignedKernels() override {
    uint64_t n = 0;
    for (int d = 0; d < kMaxSimGpus; ++d) n += deviceWork(d).unalignedKernels.load();
    return n;
  }
  // A simulated capture records one stream: its id is the stream's handle.
  uint64_t captureId(void* stream) override {
    if (!stream) sim::unsafeDuringCapture("cudaStreamGetCaptureInfo on the legacy stream");
    auto id = reinterpret_cast<uintptr_t>(stream);
    if (sim::recording(stream)) return id;
    return arena().captureThread.load() && arena().captureStream.load() == id ? id : 0;
  }
  int exchangeCaptureMode(int mode) override { return sim::exchangeCaptureMode(mode); }
  bool simulateCapture(void* stream, bool begin) override {
    ArenaHeader& a = arena();
    if (begin) {
      a.captureInvalid.store(false);
      a.captureStream.store(reinterpret_cast<uintptr_t>(stream));
      a.captureThread.store(static_cast<uint64_t>(pthread_self()));
      return true;
    }
    a.captureThread.store(0);
    return !a.captureInvalid.load();
  }
  // Graphs: while a stream is captured, its work is recorded instead of run; a
  // launch enqueues the recorded work again (the kernels' arguments as captured).
  // Captures of several streams may be under way at once (ranks capturing together).
  void graphBegin(void* stream) override {
    use("cudaStreamBeginCapture");
    sim::beginRecording(stream);
  }
  void* graphEnd(void* stream, std::string* why) override {
    auto g = std::make_unique<Graph>();
    if (!sim::endRecording(stream, &g->work)) {
      *why = "cudaStreamEndCapture on a stream that is not being captured";
      return nullptr;
    }
    return g.release();
  }
  void graphLaunch(void* graph, void* stream) override {
    use("cudaGraphLaunch");
    for (const std::function<void()>& work : static_cast<Graph*>(graph)->work) on(stream, work);
  }
  void graphDestroy(void* graph) override { delete static_cast<Graph*>(graph); }
  void* mappedPointer(void* pinned) override { return pinned; }
  // An event: marks recorded (at enqueue) and reached (by the stream); a wait holds
  // its stream until the mark recorded last when it was enqueued is reached. The
  // marks are shared with the stream work that uses them: CUDA lets an event be
  // destroyed while a stream still has to record it or wait for it.
  struct Marks {
    std::atomic<uint64_t> recorded{0}, reached{0};
  };
  struct Event {
    std::shared_ptr<Marks> marks = std::make_shared<Marks>();
  };
  static std::shared_ptr<Marks> marksOf(void* event) { return static_cast<Event*>(event)->marks; }
  void* eventCreate() override {
    use("cudaEventCreate");
    return new Event;
  }
  void eventDestroy(void* event) override { delete static_cast<Event*>(event); }
  void eventRecord(void* event, void* stream) override {
    use("cudaEventRecord");
    std::shared_ptr<Marks> m = marksOf(event);
    uint64_t mark = m->recorded.fetch_add(1) + 1;
    on(stream, [m, mark] {
      uint64_t seen = m->reached.load();
      while (seen < mark && !m->reached.compare_exchange_weak(seen, mark)) {
      }
    });
  }
  void streamWaitEvent(void* stream, void* event) override {
    use("cudaStreamWaitEvent");
    std::shared_ptr<Marks> m = marksOf(event);
    uint64_t mark = m->recorded.load();
    if (mark == 0) return;
    on(stream, [m, mark] {
      while (m->reached.load() < mark) sched_yield();
    });
  }
  bool eventDone(void* event) override {
    use("cudaEventQuery");
    std::shared_ptr<Marks> m = marksOf(event);
    return m->reached.load() >= m->recorded.load();
  }
  void kernelP2p(const KernelP2p& k, void* stream) override {
    const char* name = "the device-driven point-to-point kernel";
    int dev = launch(name, stream);
    fitsAtOnce(name, k.blocks(), dev);
    for (int r = 0; r < k.n; ++r) reaches(dev, name, k.region[r]);
    reaches(dev, name, k.counts);
    for (int i = 0; i < k.ops; ++i)
      if (k.op[i].bytes) reaches(dev, name, k.op[i].buf);
    DeviceWork& w = deviceWork(dev);
    on(stream, [k, &w, dev] {
      w.flagWaits.fetch_add(1);
      sim::runKernelP2p(k, dev);
      w.flagWaits.fetch_sub(1);
    });
  }

  void kernelPipe(const KernelPipe& k, void* stream) override {
    const char* name = "the pipelined collective kernel";
    int dev = launch(name, stream);
    int regions = k.algo == KernelPipe::kRing ? 3 : k.n;
    for (int r = 0; r < regions; ++r) reaches(dev, name, k.region[r]);
    reaches(dev, name, k.state);
    if (k.op.scalarAt) reaches(dev, name, k.op.scalarAt);
    if (k.count) {  // the buffers the collective uses on this rank
      bool root = k.rank == k.root;
      if (root || (k.coll != KernelColl::kBroadcast && k.coll != KernelColl::kScatter)) reaches(dev, name, k.send);
      if (root || (k.coll != KernelColl::kReduce && k.coll != KernelColl::kGather)) reaches(dev, name, k.recv);
    }
    fitsAtOnce(name, k.blocks, dev);
    DeviceWork& w = deviceWork(dev);
    on(stream, [k, &w, dev] {
      w.flagWaits.fetch_add(1);
      sim::runKernelPipe(k, dev);
      w.flagWaits.fetch_sub(1);
    });
  }
  int pipeChannels(int) override { return config().gpuSimChannels; }

  int kernelBlocksAtOnce(int) override { return config().gpuSimBlocks; }

  void* pinnedAlloc(size_t bytes) override {
    use("cudaHostAlloc");
    sim::unsafeDuringCapture("cudaHostAlloc");
    void* p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!p) fail(ncclSystemError, "simulated GPU: out of pinned memory for %zu bytes", bytes);
    return p;
  }
  void pinnedFree(void* p) override {
    forbidden("cudaFreeHost");
    sim::unsafeDuringCapture("cudaFreeHost");
    sim::synchronizeDevice(-1, n_, "cudaFreeHost");
    std::free(p);
  }
  // A copy engine's copy: any device's memory, from any device's stream (as CUDA).
  void copyAsync(void* dst, const void* src, size_t bytes, void* stream) override {
    use("cudaMemcpyAsync");
    within(dst, bytes, "cudaMemcpyAsync");
    within(src, bytes, "cudaMemcpyAsync");
    on(stream, [=] { memmove(dst, src, bytes); });
  }
  void hostCallback(void* stream, void (*fn)(void*), void* arg) override {
    use("cudaLaunchHostFunc");
    on(stream, [=] { sim::runCallback(fn, arg); });
  }
  void waitHostFlag(void* stream, const uint64_t* flag, uint64_t value) override {
    launch("the flag-wait kernel", stream);
    DeviceWork& w = deviceWork(of(stream).device());
    on(stream, [=, &w] {
      w.flagWaits.fetch_add(1);
      for (int spins = 0; __atomic_load_n(flag, __ATOMIC_ACQUIRE) < value; ++spins) {
        if (spins < 100) sched_yield();
        else usleep(20);
      }
      w.flagWaits.fetch_sub(1);
    });
  }
  // Streams live in the arena behind a magic word, so that every copy of this code
  // in a process (libnccl.so.2, a test linking the device layer) uses the same one.
  void* streamCreate() override {
    int dev = use("cudaStreamCreate");
    char* at = arenaTake(kStreamHeader + sizeof(SimStream), -1, -1);
    memcpy(at, &kStreamMagic, sizeof kStreamMagic);
    new (at + kStreamHeader) SimStream(dev);
    return at;
  }
  void streamDestroy(void* stream) override {
    forbidden("cudaStreamDestroy");
    if (SimStream* st = ours(stream)) {
      st->~SimStream();
      memset(stream, 0, sizeof kStreamMagic);
      arenaRelease(stream, kStreamHeader + sizeof(SimStream));
      return;
    }
    std::vector<std::unique_ptr<SimStream>> gone;  // joined outside the lock
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = streams_.lower_bound({stream, 0}); it != streams_.end() && it->first.first == stream;) {
      gone.push_back(std::move(it->second));
      it = streams_.erase(it);
    }
  }
  void streamSynchronize(void* stream) override {
    forbidden("cudaStreamSynchronize");
    sim::unsafeDuringCapture("cudaStreamSynchronize");
    of(stream).synchronize();
  }
  int streamDevice(void* stream) override {
    SimStream* st = ours(stream);
    return st ? st->device() : -1;
  }
  bool streamIdle(void* stream) override {
    forbidden("cudaStreamQuery");
    sim::unsafeDuringCapture("cudaStreamQuery");
    return of(stream).idle();
  }
  void copySync(void* dst, const void* src, size_t bytes) override {
    use("cudaMemcpy");
    sim::unsafeDuringCapture("cudaMemcpy");
    within(dst, bytes, "cudaMemcpy");
    within(src, bytes, "cudaMemcpy");
    memmove(dst, src, bytes);
  }
  void memsetSync(void* dst, int value, size_t bytes) override {
    use("cudaMemset");
    sim::unsafeDuringCapture("cudaMemset");
    within(dst, bytes, "cudaMemset");
    memset(dst, value, bytes);
  }
  void* ipcAlloc(size_t bytes, std::string* handle) override {
    sim::unsafeDuringCapture("cudaMalloc");
    int device = use("cudaMalloc");
    static std::atomic<int> counter{0};
    std::string name = format("/strata-%d-gpusim-%d", getpid(), counter++);
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) failErrno("simulated GPU: shm_open");
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      shm_unlink(name.c_str());
      failErrno("simulated GPU: sizing an IPC segment");
    }
    char* p = arenaTake(bytes, fd, device);
    close(fd);
    remember(p, bytes, name);
    *handle = name;
    handle->resize(64, '\0');
    return p;
  }
  void ipcFree(void* p) override {
    forbidden("cudaFree");
    sim::unsafeDuringCapture("cudaFree");
    sim::synchronizeDevice(ownerOf(p), n_, "cudaFree");
    auto [bytes, name] = forget(p);
    arenaRelease(p, bytes);
    shm_unlink(name.c_str());
  }
  void* ipcOpen(const std::string& handle, std::string* why) override {
    std::string name = handle.c_str();  // up to the first NUL
    int fd = shm_open(name.c_str(), O_RDWR, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
      *why = "simulated GPU: cannot open " + name + ": " + strerror(errno);
      if (fd >= 0) close(fd);
      return nullptr;
    }
    // Mapped for the opening device, peer access enabled as cudaIpcMemLazyEnablePeerAccess does.
    char* p = arenaTake(static_cast<size_t>(st.st_size), fd, use("cudaIpcOpenMemHandle"));
    close(fd);
    remember(p, static_cast<size_t>(st.st_size), "");
    return p;
  }
  void ipcClose(void* p) override {
    forbidden("cudaIpcCloseMemHandle");
    arenaRelease(p, forget(p).first);
  }
  std::string busId(int device) override { return format("0000:%02x:00.0", 0x10 + device); }

 private:
  // The calling thread's device for a CUDA call. With STRATA_GPU_SIM_STRICT a thread
  // that never set one is refused: CUDA would make device 0's context for it,
  // which a library thread serving a rank on another GPU must not do.
  int use(const char* call) const {
    forbidden(call);
    int d = sim::currentDevice();
    if (d < 0 && strict_)
      fail(ncclInvalidUsage, "simulated GPU (STRATA_GPU_SIM_STRICT): %s on a thread that never set its device: CUDA "
                             "would create device 0's context for it", call);
    return std::max(d, 0);
  }
  // Strict mode: none inside a host callback.
  void forbidden(const char* call) const {
    if (strict_) sim::forbidInCallback(call);
  }
  // A kernel launch: CUDA refuses one into a stream of another device than the
  // current; returns the device it runs on.
  int launch(const char* kernel, void* stream) {
    int d = use(kernel);
    SimStream* st = ours(stream);
    if (st && st->device() != d)
      fail(ncclUnhandledCudaError, "simulated GPU: %s launched on device %d into a stream of device %d (CUDA refuses a "
                                   "launch into a stream that is not the current device's)", kernel, d, st->device());
    return d;
  }
  // Strict mode: a device-driven kernel's blocks wait for peers' blocks, so all must
  // be running at once; a GPU starts a grid larger than it holds as room frees, in
  // no promised order.
  void fitsAtOnce(const char* kernel, int blocks, int device) const {
    if (strict_ && blocks > config().gpuSimBlocks)
      fail(ncclInvalidUsage, "simulated GPU (STRATA_GPU_SIM_STRICT): %s launched with %d blocks where device %d runs %d at "
                             "once (STRATA_GPU_SIM_BLOCKS)", kernel, blocks, device, config().gpuSimBlocks);
  }
  // withinAllocation, but an IPC segment this copy of the code made or mapped (they
  // have no header: a walk back from one would read its neighbours' pages, which
  // other threads may be mapping) is checked against its own extent.
  void within(const void* p, size_t bytes, const char* call) {
    if (bytes == 0 || !inArena(p)) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = segments_.upper_bound(const_cast<void*>(p));
      if (it != segments_.begin()) {
        --it;
        auto base = static_cast<const char*>(it->first), at = static_cast<const char*>(p);
        if (at < base + it->second.first) {
          STRATA_REQUIRE(bytes <= static_cast<size_t>(base + it->second.first - at), ncclUnhandledCudaError,
                         "simulated GPU: %s of %zu bytes at %p runs past the end of its %zu-byte IPC segment "
                         "(CUDA: invalid argument)", call, bytes, p, it->second.first);
          return;
        }
      }
    }
    withinAllocation(p, bytes, call);
  }
  // IPC mappings: size and, for the owner, the segment's name.
  void remember(void* p, size_t bytes, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    segments_[p] = {bytes, name};
  }
  std::pair<size_t, std::string> forget(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = segments_.find(p);
    STRATA_REQUIRE(it != segments_.end(), ncclInvalidArgument, "simulated GPU: %p is not an IPC mapping", p);
    auto r = it->second;
    segments_.erase(it);
    return r;
  }
  static SimStream* ours(void* stream) {
    uint64_t magic = 0;
    if (!inArena(stream)) return nullptr;
    memcpy(&magic, stream, sizeof magic);
    return magic == kStreamMagic ? reinterpret_cast<SimStream*>(static_cast<char*>(stream) + kStreamHeader) : nullptr;
  }
  // Stream 0 (and cudaStreamLegacy) is one per device for the process, as the legacy
  // default stream. A handle no copy of
  // this backend made (a program without a CUDA runtime, such as a perf tool on
  // simulated GPUs, names its streams with pointers of its own) is a stream made
  // on first use on the current device; it lives until streamDestroy or the end of
  // the process.
  SimStream& of(void* stream) {
    int device = std::max(sim::currentDevice(), 0);
    if (!stream || stream == kLegacyStream) return sim::legacyStream(device);  // one for every copy, as in CUDA
    if (SimStream* st = ours(stream)) return *st;
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<SimStream>& st = streams_[{stream, device}];
    if (!st) st = std::make_unique<SimStream>(device);
    return *st;
  }
  void on(void* stream, std::function<void()> work) {
    if (!sim::record(stream, work)) of(stream).push(std::move(work));
  }
  struct Graph {
    std::vector<std::function<void()>> work;
  };

  int n_;
  bool strict_;
  std::mutex mu_;
  std::map<void*, std::pair<size_t, std::string>> segments_;
  std::map<std::pair<void*, int>, std::unique_ptr<SimStream>> streams_;  // foreign handles by device; null: legacy
};

}  // namespace

std::unique_ptr<GpuBackend> simulatedGpus(int n, bool strict) { return std::make_unique<SimGpus>(n, strict); }

}  // namespace strata::device
