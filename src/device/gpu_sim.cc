// GPUs simulated in host memory (STRATA_GPU_SIM=N), so that the device path (the
// staging, the streams and their callbacks, the proxy, cuda_ipc and the GPU-to-GPU
// collectives) runs and is tested on machines without a GPU. A stream is a worker
// thread running its work in order; a kernel is the CPU function of the same name;
// "device memory" is host memory this backend hands out and recognises; a CUDA IPC
// handle names a POSIX shared-memory segment, so processes map each other's buffers.
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "base/error.h"
#include "device/dtypes.h"
#include "device/gpu.h"
#include "device/gpu_backend.h"

namespace strata::device {
namespace {

// Work in order on one thread, like a CUDA stream of device `device`.
class SimStream {
 public:
  explicit SimStream(int device) : device_(device), worker_([this] { loop(); }) {}
  int device() const { return device_; }
  ~SimStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void push(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(work));
    }
    cv_.notify_all();
  }
  void synchronize() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  bool idle() {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.empty() && !busy_;
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        work = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      work();
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
      }
      idle_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  int device_;
  std::thread worker_;
};

// Simulated device memory lives in one fixed range of the address space, so that
// every copy of this code in a process (libnccl.so.2 and a test linking the device
// layer statically) tells device from host memory alike, with no shared registry.
// The first page holds the bump allocator both copies use and which devices have
// peer access to which; then a byte per arena page says whose memory it is
// (device + 1; 0: none), committed only where touched.
constexpr uintptr_t kArenaBase = 0x5f0000000000;
constexpr size_t kArenaBytes = size_t{1} << 40;
constexpr size_t kOwnersOffset = 4096, kOwnersBytes = kArenaBytes / 4096;
constexpr int kMaxSimGpus = 64;
constexpr size_t kBlockHeader = 256;  // before each block: a BlockHeader

// Each allocation is a memfd of its own, mapped into the arena, so that it can be
// exported as a dma-buf would be (GPUDirect RDMA): the fd stays open until it is freed.
struct BlockHeader {
  uint64_t bytes;
  int32_t fd;
  uint32_t magic;
};
constexpr uint32_t kBlockMagic = 0x53424c4b;  // "SBLK"

struct ArenaHeader {
  std::atomic<uint64_t> magic;
  std::atomic<uint64_t> next;  // offset of the next free byte
  std::atomic<uint64_t> peers[kMaxSimGpus];  // bit j of peers[i]: device i's kernels reach device j's memory
  pthread_key_t deviceKey;  // each thread's device + 1 (null: never set), one key for every copy, as CUDA's
                            // current context is the driver's, not a runtime copy's
  pthread_key_t modeKey;    // each thread's stream-capture mode + 1 (null: global)
  std::atomic<uint64_t> captureThread;  // the thread capturing a stream in global mode (simulateCapture), or 0
  std::atomic<uintptr_t> captureStream;
  std::atomic<bool> captureInvalid;     // an unsafe call by another thread broke that capture
};
static_assert(sizeof(ArenaHeader) <= 4096, "the arena header is one page");
constexpr uint64_t kArenaMagic = 0x5354524154414731ull;
constexpr uint64_t kStreamMagic = 0x5354524d53494d31ull;  // "STRMSIM1": a stream made by some copy of this code
constexpr size_t kStreamHeader = 64;

ArenaHeader& arena() {
  static ArenaHeader* header = [] {
    void* want = reinterpret_cast<void*>(kArenaBase);
    void* p = mmap(want, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    auto* h = static_cast<ArenaHeader*>(want);
    if (p == want) {  // this copy reserved it: set up the header and the owners' bytes
      if (mprotect(want, kOwnersOffset + kOwnersBytes, PROT_READ | PROT_WRITE) != 0)
        failErrno("simulated GPU: arena header");
      h->next.store(kOwnersOffset + kOwnersBytes);
      if (pthread_key_create(&h->deviceKey, nullptr) != 0 || pthread_key_create(&h->modeKey, nullptr) != 0)
        fail(ncclSystemError, "simulated GPU: pthread_key_create");
      h->magic.store(kArenaMagic, std::memory_order_release);
    } else if (p != MAP_FAILED) {
      munmap(p, kArenaBytes);
      fail(ncclSystemError, "simulated GPU: the kernel placed the arena elsewhere (no MAP_FIXED_NOREPLACE?)");
    } else if (errno != EEXIST) {
      failErrno("simulated GPU: reserving the arena");
    }
    while (h->magic.load(std::memory_order_acquire) != kArenaMagic) sched_yield();  // the other copy is setting it up
    return h;
  }();
  return *header;
}

bool inArena(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  return a >= kArenaBase + kOwnersOffset + kOwnersBytes && a < kArenaBase + arena().next.load();
}

uint8_t* owners() { return reinterpret_cast<uint8_t*>(kArenaBase + kOwnersOffset); }
// The device whose memory holds `p`; -1 when none does.
int ownerOf(const void* p) {
  if (!inArena(p)) return -1;
  return __atomic_load_n(&owners()[(reinterpret_cast<uintptr_t>(p) - kArenaBase) / 4096], __ATOMIC_RELAXED) - 1;
}

// Takes `bytes` (page-rounded) of the arena for `device` (-1: no device's memory);
// `fd` >= 0 maps that segment there.
char* arenaTake(size_t bytes, int fd, int device) {
  size_t span = (bytes + 4095) / 4096 * 4096;
  uint64_t off = arena().next.fetch_add(span);
  STRATA_REQUIRE(off + span <= kArenaBytes, ncclSystemError, "simulated GPU: arena exhausted");
  void* at = reinterpret_cast<void*>(kArenaBase + off);
  int flags = MAP_FIXED | (fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS);
  if (mmap(at, span, PROT_READ | PROT_WRITE, flags, fd, 0) != at) failErrno("simulated GPU: mapping device memory");
  memset(owners() + off / 4096, device + 1, span / 4096);
  return static_cast<char*>(at);
}

// The mapping of this process that holds address `a`.
bool mappingOf(uintptr_t a, uintptr_t* start, uintptr_t* end) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (!maps) return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, maps)) {
    unsigned long s = 0, e = 0;
    if (sscanf(line, "%lx-%lx", &s, &e) == 2 && a >= s && a < e) {
      *start = s;
      *end = e;
      found = true;
    }
  }
  fclose(maps);
  return found;
}

// Gives a block's pages back (the addresses are not reused).
void arenaRelease(void* at, size_t bytes) {
  size_t span = (bytes + 4095) / 4096 * 4096;
  memset(owners() + (reinterpret_cast<uintptr_t>(at) - kArenaBase) / 4096, 0, span / 4096);
  mmap(at, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
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
  int currentDevice() override { return std::max(current(), 0); }
  int setCurrentDevice(int device) override {
    int prev = currentDevice();
    if (device >= 0) setCurrent(device % n_);
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
    size_t span = (kBlockHeader + bytes + 4095) / 4096 * 4096;
    int fd = memfd_create("strata-gpusim", MFD_CLOEXEC);
    if (fd < 0) failErrno("simulated GPU: memfd_create");
    if (ftruncate(fd, static_cast<off_t>(span)) != 0) {
      close(fd);
      failErrno("simulated GPU: sizing device memory");
    }
    char* block = nullptr;
    try {
      unsafe("cudaMalloc");
      block = arenaTake(kBlockHeader + bytes, fd, use("cudaMalloc"));
    } catch (...) {
      close(fd);
      throw;
    }
    BlockHeader h{bytes, fd, kBlockMagic};
    memcpy(block, &h, sizeof h);
    return block + kBlockHeader;
  }
  void free(void* p) override {
    STRATA_REQUIRE(inArena(p), ncclInvalidArgument, "simulated GPU: %p is not device memory", p);
    unsafe("cudaFree");
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
  void reduceInOrder(void* dst, const void* const* inputs, int n, size_t count, ncclDataType_t type, const ReduceOp& op,
                     void* stream) override {
    std::vector<const void*> in(inputs, inputs + n);
    int dev = launch("the reduce kernel", stream);
    reaches(dev, "the reduce kernel", dst);
    for (const void* p : in) reaches(dev, "the reduce kernel", p);
    on(stream, [=] { device::reduceInOrder(dst, in.data(), n, count, type, op); });
  }
  void prepare(void* dst, const void* src, size_t count, ncclDataType_t type, const ReduceOp& op, void* stream) override {
    int dev = launch("the prepare kernel", stream);
    reaches(dev, "the prepare kernel", dst);
    reaches(dev, "the prepare kernel", src);
    on(stream, [=] { device::prepare(dst, src, count, type, op); });
  }
  void copy(void* dst, const void* src, size_t bytes, void* stream) override {
    int dev = launch("the copy kernel", stream);
    reaches(dev, "the copy kernel", dst);
    reaches(dev, "the copy kernel", src);
    on(stream, [=] { memmove(dst, src, bytes); });
  }
  bool capturing(void* stream) override {
    if (!stream) unsafe("cudaStreamIsCapturing on the legacy stream");
    return arena().captureThread.load() && arena().captureStream.load() == reinterpret_cast<uintptr_t>(stream);
  }
  int exchangeCaptureMode(int mode) override {
    int previous = static_cast<int>(reinterpret_cast<intptr_t>(pthread_getspecific(arena().modeKey))) - 1;
    pthread_setspecific(arena().modeKey, reinterpret_cast<void*>(static_cast<intptr_t>(mode) + 1));
    return std::max(previous, 0);
  }
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
  void* pinnedAlloc(size_t bytes) override {
    use("cudaHostAlloc");
    unsafe("cudaHostAlloc");
    void* p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!p) fail(ncclSystemError, "simulated GPU: out of pinned memory for %zu bytes", bytes);
    return p;
  }
  void pinnedFree(void* p) override {
    unsafe("cudaFreeHost");
    std::free(p);
  }
  // A copy engine's copy: any device's memory, from any device's stream (as CUDA).
  void copyAsync(void* dst, const void* src, size_t bytes, void* stream) override {
    use("cudaMemcpyAsync");
    on(stream, [=] { memmove(dst, src, bytes); });
  }
  void hostCallback(void* stream, void (*fn)(void*), void* arg) override {
    use("cudaLaunchHostFunc");
    on(stream, [=] { fn(arg); });
  }
  void waitHostFlag(void* stream, const uint64_t* flag, uint64_t value) override {
    launch("the flag-wait kernel", stream);
    on(stream, [=] {
      for (int spins = 0; __atomic_load_n(flag, __ATOMIC_ACQUIRE) < value; ++spins) {
        if (spins < 100) sched_yield();
        else usleep(20);
      }
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
    if (SimStream* st = ours(stream)) {
      st->~SimStream();
      memset(stream, 0, sizeof kStreamMagic);
      arenaRelease(stream, kStreamHeader + sizeof(SimStream));
      return;
    }
    std::unique_ptr<SimStream> gone;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;
    gone = std::move(it->second);
    streams_.erase(it);
  }
  void streamSynchronize(void* stream) override { of(stream).synchronize(); }
  bool streamIdle(void* stream) override { return of(stream).idle(); }
  void copySync(void* dst, const void* src, size_t bytes) override {
    use("cudaMemcpy");
    unsafe("cudaMemcpy");
    memmove(dst, src, bytes);
  }
  void memsetSync(void* dst, int value, size_t bytes) override {
    use("cudaMemset");
    unsafe("cudaMemset");
    memset(dst, value, bytes);
  }
  void* ipcAlloc(size_t bytes, std::string* handle) override {
    static std::atomic<int> counter{0};
    std::string name = format("/strata-%d-gpusim-%d", getpid(), counter++);
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) failErrno("simulated GPU: shm_open");
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      shm_unlink(name.c_str());
      failErrno("simulated GPU: sizing an IPC segment");
    }
    try {
      unsafe("cudaMalloc");
    } catch (...) {
      close(fd);
      shm_unlink(name.c_str());
      throw;
    }
    char* p = arenaTake(bytes, fd, use("cudaMalloc"));
    close(fd);
    remember(p, bytes, name);
    *handle = name;
    handle->resize(64, '\0');
    return p;
  }
  void ipcFree(void* p) override {
    unsafe("cudaFree");
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
  void ipcClose(void* p) override { arenaRelease(p, forget(p).first); }
  std::string busId(int device) override { return format("0000:%02x:00.0", 0x10 + device); }

 private:
  // The calling thread's device; -1 when it never set one (CUDA's device 0).
  static int current() { return static_cast<int>(reinterpret_cast<intptr_t>(pthread_getspecific(arena().deviceKey))) - 1; }
  static void setCurrent(int device) {
    pthread_setspecific(arena().deviceKey, reinterpret_cast<void*>(static_cast<intptr_t>(device) + 1));
  }
  // The calling thread's device for a CUDA call. With STRATA_GPU_SIM_STRICT a thread
  // that never set one is refused: CUDA would make device 0's context for it,
  // which a library thread serving a rank on another GPU must not do.
  int use(const char* call) const {
    int d = current();
    if (d < 0 && strict_)
      fail(ncclInvalidUsage, "simulated GPU (STRATA_GPU_SIM_STRICT): %s on a thread that never set its device: CUDA "
                             "would create device 0's context for it", call);
    return std::max(d, 0);
  }
  // A call CUDA counts as unsafe during a stream capture: refused, and the capture
  // invalidated, while another thread captures in global mode and this thread's mode
  // is global, or while this thread captures and its mode is not relaxed.
  static void unsafe(const char* call) {
    ArenaHeader& a = arena();
    uint64_t owner = a.captureThread.load();
    if (!owner) return;
    int mode = static_cast<int>(reinterpret_cast<intptr_t>(pthread_getspecific(a.modeKey))) - 1;  // -1: global
    bool mine = owner == static_cast<uint64_t>(pthread_self());
    if (mine ? mode == kRelaxedCapture : mode > 0) return;
    a.captureInvalid.store(true);
    fail(ncclUnhandledCudaError, "simulated GPU: %s while %s captures a graph in global mode: CUDA refuses it and "
                                 "invalidates the capture (make the call in relaxed capture mode, as NCCL does)",
         call, mine ? "this thread" : "another thread");
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
  // A kernel on `device` touching `p`: another device's memory needs peer access
  // (cudaDeviceEnablePeerAccess), or a real GPU faults with an illegal address.
  static void reaches(int device, const char* kernel, const void* p) {
    int owner = ownerOf(p);
    if (owner < 0 || owner == device || (arena().peers[device].load() >> owner & 1)) return;
    fail(ncclUnhandledCudaError, "simulated GPU: %s on device %d reads or writes device %d's memory at %p without "
                                 "peer access (cudaDeviceEnablePeerAccess): an illegal address on a real GPU", kernel,
         device, owner, p);
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
  // Stream 0 is one per process, as the legacy default stream. A handle no copy of
  // this backend made (a program without a CUDA runtime, such as a perf tool on
  // simulated GPUs, names its streams with pointers of its own) is a stream made
  // on first use; it lives until streamDestroy or the end of the process.
  SimStream& of(void* stream) {
    if (SimStream* st = ours(stream)) return *st;
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<SimStream>& st = streams_[stream];
    if (!st) st = std::make_unique<SimStream>(std::max(current(), 0));
    return *st;
  }
  void on(void* stream, std::function<void()> work) { of(stream).push(std::move(work)); }

  int n_;
  bool strict_;
  std::mutex mu_;
  std::map<void*, std::pair<size_t, std::string>> segments_;
  std::map<void*, std::unique_ptr<SimStream>> streams_;  // foreign handles; null is the legacy stream
};

}  // namespace

std::unique_ptr<GpuBackend> simulatedGpus(int n, bool strict) { return std::make_unique<SimGpus>(n, strict); }

}  // namespace strata::device
