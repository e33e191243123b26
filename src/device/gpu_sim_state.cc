#include "device/gpu_sim_state.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/config.h"
#include "base/error.h"
#include "device/gpu.h"

namespace strata::device::sim {

ArenaHeader& arena() {
  static ArenaHeader* header = [] {
    void* want = reinterpret_cast<void*>(kArenaBase);
    void* p = mmap(want, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    auto* h = static_cast<ArenaHeader*>(want);
    if (p == want) {  // this copy reserved it: set up the header and the owners' bytes
      if (mprotect(want, kOwnersOffset + kOwnersBytes, PROT_READ | PROT_WRITE) != 0)
        failErrno("simulated GPU: arena header");
      h->next.store(kOwnersOffset + kOwnersBytes);
      if (pthread_key_create(&h->deviceKey, nullptr) != 0 || pthread_key_create(&h->modeKey, nullptr) != 0 ||
          pthread_key_create(&h->callsKey, nullptr) != 0)
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

void countRuntimeCall() {
  pthread_key_t key = arena().callsKey;
  pthread_setspecific(key, reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(pthread_getspecific(key)) + 1));
}

uint64_t runtimeCallsOfThread() { return reinterpret_cast<uintptr_t>(pthread_getspecific(arena().callsKey)); }

namespace {
// The host-callback thread (runCallback), one per process (perProcess).
struct Callbacks {
  pid_t pid = getpid();
  std::mutex mu;
  std::condition_variable posted, ran;
  std::deque<std::pair<void (*)(void*), void*>> queue;
  uint64_t tickets = 0, done = 0;
  void loop() {
    arena().callbackThread.store(static_cast<uint64_t>(pthread_self()));
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      posted.wait(lock, [&] { return !queue.empty(); });
      auto [fn, arg] = queue.front();
      queue.pop_front();
      lock.unlock();
      fn(arg);
      lock.lock();
      ++done;
      ran.notify_all();
    }
  }
};
// The process's one T, published in `slot` (an arena word every copy of this code
// shares) by whichever thread or copy makes it first; never destroyed. A forked
// child inherits the parent's pointer but not its threads: T keeps the pid it was
// made for, and the child makes its own. `made` runs once, for the one published.
template <typename T, typename F>
T& perProcess(std::atomic<uintptr_t>& slot, F made) {
  uintptr_t seen = slot.load();
  for (;;) {
    auto* t = reinterpret_cast<T*>(seen);
    if (t && t->pid == getpid()) return *t;
    auto* mine = new T;
    if (slot.compare_exchange_strong(seen, reinterpret_cast<uintptr_t>(mine))) {
      made(mine);
      return *mine;
    }
    delete mine;  // another made it: `seen` is now that one
  }
}
Callbacks& callbacks() {
  return perProcess<Callbacks>(arena().callbacks, [](Callbacks* mine) {
    arena().callbackThread.store(0);  // a parent's, until the new thread says
    std::thread([mine] { mine->loop(); }).detach();
  });
}
// The hardware queues of every simulated device, made as the callback thread is.
struct HwQueues {
  pid_t pid = getpid();
  std::atomic<uint64_t> streams[kMaxSimGpus] = {};  // streams made on each device
  HwQueue queue[kMaxSimGpus][32];                   // CUDA_DEVICE_MAX_CONNECTIONS is at most 32
  std::atomic<int> residentBlocks[kMaxSimGpus] = {};  // blocks of device-driven kernels running (BlockRoom)
};
HwQueues& hwQueues() {
  return perProcess<HwQueues>(arena().hwQueues, [](HwQueues*) {});
}
struct LegacyStreams {
  pid_t pid = getpid();
  std::mutex mu;
  SimStream* of[kMaxSimGpus] = {};  // never destroyed: work may still be queued at exit
};
LegacyStreams& legacyStreams() {
  return perProcess<LegacyStreams>(arena().legacy, [](LegacyStreams*) {});
}
struct Recordings {
  pid_t pid = getpid();
  std::mutex mu;
  std::map<void*, std::vector<std::function<void()>>> byStream;
};
Recordings& recordings() {
  return perProcess<Recordings>(arena().recordings, [](Recordings*) {});
}
}  // namespace

SimStream& legacyStream(int device) {
  LegacyStreams& l = legacyStreams();
  std::lock_guard<std::mutex> lock(l.mu);
  if (!l.of[device]) l.of[device] = new SimStream(device);
  return *l.of[device];
}

void beginRecording(void* stream) {
  Recordings& r = recordings();
  std::lock_guard<std::mutex> lock(r.mu);
  STRATA_REQUIRE(!r.byStream.count(stream), ncclInvalidUsage,
                 "simulated GPU: cudaStreamBeginCapture on a stream already being captured");
  r.byStream[stream];
}

bool record(void* stream, std::function<void()>& work) {
  Recordings& r = recordings();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.byStream.find(stream);
  if (it == r.byStream.end()) return false;
  it->second.push_back(std::move(work));
  return true;
}

bool endRecording(void* stream, std::vector<std::function<void()>>* work) {
  Recordings& r = recordings();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.byStream.find(stream);
  if (it == r.byStream.end()) return false;
  work->swap(it->second);
  r.byStream.erase(it);
  return true;
}

bool recording(void* stream) {
  Recordings& r = recordings();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.byStream.count(stream) > 0;
}

HwQueue& hwQueueFor(int device) {
  HwQueues& t = hwQueues();
  uint64_t k = t.streams[device].fetch_add(1);
  return t.queue[device][k % static_cast<uint64_t>(config().cudaMaxConnections)];
}

void startInOrder(HwQueue& q, uint64_t ticket, int device) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int spins = 0; q.started.load(std::memory_order_acquire) != ticket - 1; ++spins) {
    if (spins < 100) sched_yield();
    else usleep(20);
    if (spins % 1024 == 0 && std::chrono::steady_clock::now() > deadline) {
      fprintf(stderr, "simulated GPU: device %d: work waited 10 s to start on its hardware queue "
                      "(CUDA_DEVICE_MAX_CONNECTIONS=%d): work ahead of it there cannot start, which deadlocks a GPU\n",
              device, config().cudaMaxConnections);
      abort();
    }
  }
  q.started.store(ticket, std::memory_order_release);
}

void runCallback(void (*fn)(void*), void* arg) {
  Callbacks& c = callbacks();
  std::unique_lock<std::mutex> lock(c.mu);
  uint64_t ticket = ++c.tickets;
  c.queue.emplace_back(fn, arg);
  c.posted.notify_all();
  c.ran.wait(lock, [&] { return c.done >= ticket; });
}

void forbidInCallback(const char* call) {
  uint64_t t = arena().callbackThread.load();
  if (!t || t != static_cast<uint64_t>(pthread_self())) return;
  // A forked child holds its parent's word until it makes its own callback thread,
  // and may reuse that thread's id for a thread of its own.
  auto* c = reinterpret_cast<Callbacks*>(arena().callbacks.load());
  if (!c || c->pid != getpid()) return;
  fprintf(stderr, "simulated GPU (STRATA_GPU_SIM_STRICT): %s inside a host callback: CUDA forbids CUDA calls there "
                  "(cudaLaunchHostFunc)\n", call);
  abort();
}

DeviceWork& deviceWork(int device) { return arena().work[device]; }

BlockRoom::BlockRoom(int device, int grid) : device_(device) {
  int capacity = config().gpuSimBlocks;
  held_ = grid < capacity ? grid : capacity;
  std::atomic<int>& used = hwQueues().residentBlocks[device];
  auto since = std::chrono::steady_clock::now();
  bool told = false;
  for (int spins = 0;; ++spins) {
    int now = used.load();
    if (now + held_ <= capacity && used.compare_exchange_weak(now, now + held_)) return;
    if (spins < 100) sched_yield();
    else usleep(50);
    if (!told && spins % 1024 == 0 && std::chrono::steady_clock::now() - since > std::chrono::seconds(10)) {
      told = true;
      fprintf(stderr, "simulated GPU: device %d: a kernel of %d blocks has waited 10 s to start: %d of the %d blocks "
                      "the GPU runs at once (STRATA_GPU_SIM_BLOCKS) belong to kernels still running; kernels that "
                      "wait for each other must fit on the GPU together\n",
              device, grid, used.load(), capacity);
    }
  }
}

BlockRoom::~BlockRoom() { hwQueues().residentBlocks[device_].fetch_sub(held_); }

bool inArena(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  return a >= kArenaBase + kOwnersOffset + kOwnersBytes && a < kArenaBase + arena().next.load();
}

namespace {
uint8_t* owners() { return reinterpret_cast<uint8_t*>(kArenaBase + kOwnersOffset); }
}  // namespace
namespace {
constexpr uint8_t kBlockStartBit = 0x80;  // above any device + 1 (kMaxSimGpus)
uint8_t* ownerByte(const void* p) { return &owners()[(reinterpret_cast<uintptr_t>(p) - kArenaBase) / 4096]; }
}  // namespace

int ownerOf(const void* p) {
  if (!inArena(p)) return -1;
  return (__atomic_load_n(ownerByte(p), __ATOMIC_RELAXED) & ~kBlockStartBit) - 1;
}

void markBlockStart(const void* page) { __atomic_fetch_or(ownerByte(page), kBlockStartBit, __ATOMIC_RELEASE); }

bool isBlockStart(const void* page) {
  return inArena(page) && (__atomic_load_n(ownerByte(page), __ATOMIC_ACQUIRE) & kBlockStartBit) != 0;
}

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

void arenaRelease(void* at, size_t bytes) {
  size_t span = (bytes + 4095) / 4096 * 4096;
  memset(owners() + (reinterpret_cast<uintptr_t>(at) - kArenaBase) / 4096, 0, span / 4096);
  mmap(at, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

int currentDevice() { return static_cast<int>(reinterpret_cast<intptr_t>(pthread_getspecific(arena().deviceKey))) - 1; }
void setCurrentDevice(int device) {
  pthread_setspecific(arena().deviceKey, reinterpret_cast<void*>(static_cast<intptr_t>(device) + 1));
}
int exchangeCaptureMode(int mode) {
  int previous = static_cast<int>(reinterpret_cast<intptr_t>(pthread_getspecific(arena().modeKey))) - 1;
  pthread_setspecific(arena().modeKey, reinterpret_cast<void*>(static_cast<intptr_t>(mode) + 1));
  return previous < 0 ? 0 : previous;
}

// cudaFree and cudaFreeHost wait for all work of the device (-1: of every device)
// first. One held by a flag wait for 10 s is taken for the deadlock it is on a GPU
// when the flag needs this thread's next call (ranks sharing a GPU in a process):
// the process aborts, saying so, where a GPU would hang.
void synchronizeDevice(int device, int devices, const char* call) {
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    int queued = 0, held = 0;
    for (int d = device < 0 ? 0 : device; d < (device < 0 ? devices : device + 1); ++d) {
      queued += deviceWork(d).queued.load();
      held += deviceWork(d).flagWaits.load();
    }
    if (queued == 0) return;
    if (held > 0 && std::chrono::steady_clock::now() - start > std::chrono::seconds(10)) {
      fprintf(stderr, "simulated GPU: %s synchronises %s, and a stream there has been held by a flag wait for 10 s: "
                      "a deadlock where the flag waits for this thread's next call; aborting\n", call,
              device < 0 ? "every device" : format("device %d", device).c_str());
      abort();
    }
    usleep(200);
  }
}

// A call CUDA counts as unsafe during a stream capture: refused, and the capture
// invalidated, while another thread captures in global mode and this thread's mode
// is global, or while this thread captures and its mode is not relaxed.
void unsafeDuringCapture(const char* call) {
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

// A kernel on `device` touching `p`: another device's memory needs peer access
// (cudaDeviceEnablePeerAccess), or a real GPU faults with an illegal address.
void reaches(int device, const char* kernel, const void* p) {
  int owner = ownerOf(p);
  if (owner < 0 || owner == device || (arena().peers[device].load() >> owner & 1)) return;
  fail(ncclUnhandledCudaError, "simulated GPU: %s on device %d reads or writes device %d's memory at %p without "
                               "peer access (cudaDeviceEnablePeerAccess): an illegal address on a real GPU", kernel,
       device, owner, p);
}

}  // namespace strata::device::sim
