// The simulated GPUs' shared state (gpu_sim.cc): device memory in one fixed range
// of the address space whose pages know their device, the streams (worker threads),
// each device's outstanding work, each thread's device and stream-capture mode, and
// the rules of CUDA the simulation enforces on them. Kept in the range itself, so
// that every copy of the device layer in a process (libnccl.so.2 and a test linking
// it statically) sees one state, as every copy of the CUDA runtime sees one driver.
#pragma once

#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace strata::device::sim {

// Each device's work queued or running on its streams, and flag waits holding them
// (the arena's, so that every copy of this code counts alike; see deviceWork()).
struct DeviceWork {
  std::atomic<int> queued;
  std::atomic<int> flagWaits;
  std::atomic<uint64_t> unalignedKernels;  // reduce kernels a GPU would run off its 16-byte vector path
};
DeviceWork& deviceWork(int device);

// A GPU runs only so many blocks at once (STRATA_GPU_SIM_BLOCKS); the rest of a grid,
// and later kernels, start as running blocks end. A kernel holds room for
// min(grid, capacity) blocks from its start to its end, taking it when the device
// has it free: a kernel whose blocks wait for a kernel that cannot start (no room
// left) waits until its own waits give up, as on a GPU. Says on stderr, once per
// kernel, when it has waited 10 s. All or nothing: a GPU starts part of a grid where
// part fits, so this is the stricter of the two. One count per device and process (a
// forked child starts its own, as a process has its own CUDA context).
class BlockRoom {
 public:
  BlockRoom(int device, int grid);
  ~BlockRoom();
  int held() const { return held_; }

 private:
  int device_, held_;
};

// A device's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default, 1 under
// Megatron): its streams share them round robin, and each queue starts work in the
// order it was submitted, whichever stream it came from. So work that cannot start
// (stream order: it follows a kernel still spinning) holds back every stream behind
// it on that queue, as on a GPU. A ticket per submission; a queue's next ticket
// starts only after the one before it started. One table for the process (and one
// per forked child, as runCallback's thread).
struct HwQueue {
  std::atomic<uint64_t> tickets{0}, started{0};
};
HwQueue& hwQueueFor(int device);  // the next stream's queue on `device`
// Waits until `ticket` may start on `q`; aborts, naming the deadlock, after 10 s.
void startInOrder(HwQueue& q, uint64_t ticket, int device);

// Work in order on one thread, like a CUDA stream of device `device`.
class SimStream {
 public:
  explicit SimStream(int device) : device_(device), hw_(hwQueueFor(device)), worker_([this] { loop(); }) {}
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
    deviceWork(device_).queued.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({hw_.tickets.fetch_add(1) + 1, std::move(work)});
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
      std::pair<uint64_t, std::function<void()>> work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        work = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      startInOrder(hw_, work.first, device_);
      work.second();
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
      }
      deviceWork(device_).queued.fetch_sub(1);
      idle_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<std::pair<uint64_t, std::function<void()>>> queue_;  // its ticket on hw_, the work
  bool busy_ = false, stop_ = false;
  int device_;
  HwQueue& hw_;
  std::thread worker_;
};

// Simulated device memory lives in one fixed range of the address space, so that
// every copy of this code in a process (libnccl.so.2 and a test linking the device
// layer statically) tells device from host memory alike, with no shared registry.
// The first page holds the bump allocator both copies use and which devices have
// peer access to which; then a byte per arena page says whose memory it is
// (device + 1; 0: none), committed only where touched.
#if defined(__SANITIZE_THREAD__)
// ThreadSanitizer keeps most of the address space (its shadow, meta and trace
// ranges; 0x5f0000000000 is in one): of what it leaves the application, the low
// 512 GB are the range nothing else uses, so the arena takes 256 GB there. (AddressSanitizer's
// shadow covers that range, so only a TSan build puts it there.)
constexpr uintptr_t kArenaBase = 0x004000000000;
constexpr size_t kArenaBytes = size_t{1} << 38;
#else
constexpr uintptr_t kArenaBase = 0x5f0000000000;
constexpr size_t kArenaBytes = size_t{1} << 40;
#endif
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
  pthread_key_t callsKey;   // each thread's calls into the simulated runtime (countRuntimeCall)
  std::atomic<uint64_t> captureThread;  // the thread capturing a stream in global mode (simulateCapture), or 0
  std::atomic<uintptr_t> captureStream;
  std::atomic<bool> captureInvalid;     // an unsafe call by another thread broke that capture
  std::atomic<uintptr_t> callbacks;     // the process's host-callback thread (runCallback), once made
  std::atomic<uintptr_t> hwQueues;      // the process's hardware queues (hwQueueFor), once made
  std::atomic<uintptr_t> recordings;    // the process's stream captures under way (graphBegin), once made
  std::atomic<uintptr_t> legacy;        // the process's legacy default streams, once made
  std::atomic<uint64_t> callbackThread;  // its pthread_t
  DeviceWork work[kMaxSimGpus];
};
static_assert(sizeof(ArenaHeader) <= 4096, "the arena header is one page");
constexpr uint64_t kArenaMagic = 0x5354524154414731ull;
constexpr uint64_t kStreamMagic = 0x5354524d53494d31ull;  // "STRMSIM1": a stream made by some copy of this code
constexpr size_t kStreamHeader = 64;

ArenaHeader& arena();
// Counts a call of the calling thread into the simulated runtime (gpu.cc, every call
// through the backend), whichever copy of this code makes it; runtimeCallsOfThread reads it.
void countRuntimeCall();
uint64_t runtimeCallsOfThread();
// CUDA runs a process's host callbacks (cudaLaunchHostFunc) on one driver thread, in
// the order their streams reach them, and forbids CUDA calls inside them. So does the
// simulation: runCallback, from a stream's thread, returns once `fn` ran on that one
// thread (a callback that waits for another stream's callback deadlocks, as on a GPU).
void runCallback(void (*fn)(void*), void* arg);
// Strict mode: a CUDA call (`call`) made inside a host callback aborts the process,
// saying so (CUDA fails it, or deadlocks, depending on the call).
void forbidInCallback(const char* call);
bool inArena(const void* p);
// The device whose memory holds `p`; -1 when none does.
int ownerOf(const void* p);
// The first page of a gpuAlloc block (its header) is marked in the page table, after
// the header is written, so that finding a pointer's block reads the table and that
// header, never a page of data a stream may be writing.
void markBlockStart(const void* page);
bool isBlockStart(const void* page);
// Takes `bytes` (page-rounded) of the arena for `device` (-1: no device's memory);
// `fd` >= 0 maps that segment there.
char* arenaTake(size_t bytes, int fd, int device);
// The mapping of this process that holds address `a`.
bool mappingOf(uintptr_t a, uintptr_t* start, uintptr_t* end);
// Gives a block's pages back (the addresses are not reused).
void arenaRelease(void* at, size_t bytes);

// The calling thread's device; -1 when it never set one (CUDA's device 0).
int currentDevice();
void setCurrentDevice(int device);
// The calling thread's stream-capture mode (cudaStreamCaptureMode); returns the previous.
int exchangeCaptureMode(int mode);

// The rules. cudaFree and cudaFreeHost first wait for all work of `device` (-1: of
// each of `devices`); a wait a flag holds for 10 s aborts, as the deadlock it is.
void synchronizeDevice(int device, int devices, const char* call);
// A call CUDA counts as unsafe during a stream capture (fails, invalidating it).
void unsafeDuringCapture(const char* call);
// A kernel on `device` touching `p` without peer access to its device fails.
void reaches(int device, const char* kernel, const void* p);
// Stream captures (CUDA graphs), one registry per process, so that work a copy of
// this code enqueues (libnccl.so.2) is recorded by a capture another began (a test).
// beginRecording fails if the stream is already captured; record() keeps `work`
// and returns true while `stream` is captured; endRecording hands the work over
// (false when the stream was not captured).
void beginRecording(void* stream);
bool record(void* stream, std::function<void()>& work);
bool endRecording(void* stream, std::vector<std::function<void()>>* work);
bool recording(void* stream);
// Device `device`'s legacy default stream (stream 0), one per process for every copy
// of this code; it lives until the process ends.
SimStream& legacyStream(int device);
// The device-driven collective kernel on `device`, every block in order, on the
// calling (stream) thread, once the device has room (BlockRoom).
// The device-driven point-to-point kernel: a thread per block, joined before it
// returns; blocks start in order as the device has room for them.
void runKernelP2p(const KernelP2p& k, int device);

}  // namespace strata::device::sim
