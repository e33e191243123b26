#include "core/device_path.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "base/clock.h"
#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "core/communicator.h"
#include "core/device_direct.h"
#include "core/group.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::core::device_path {
namespace {

using algorithms::Collective;

struct Lane;

// What the proxy runs at once: the whole group, or one chunk of a large staged
// all-reduce, broadcast or reduce (so the copies of the other chunks overlap it).
struct Part {
  std::vector<std::pair<ncclComm*, OpDesc>> hostOps;  // on staging buffers (or the device buffers, direct)
  uint64_t* flag = nullptr;                            // pinned; raised when the proxy has run it
  std::atomic<int> waiting{0};                         // streams whose inputs for it are not staged yet
};

// One group on device buffers, from enqueue until its last copy back has run.
struct Job {
  std::vector<std::unique_ptr<Part>> parts;
  size_t next = 0;                                     // the first part the proxy has not run
  std::vector<std::pair<void*, size_t>> buffers;      // pinned staging, back to the pool at the end
  std::atomic<int> finishing{0};                       // streams whose outputs are not copied back yet
  std::vector<Lane*> lanes;                            // every communicator the job touches
  Lane* home = nullptr;                                // the one whose proxy runs it
  bool direct = false;                                 // GPU to GPU over cuda_ipc, no host staging
};

// Per communicator: its proxy thread and queue.
struct Lane {
  Communicator* comm = nullptr;
  std::deque<std::shared_ptr<Job>> queue;
  std::thread proxy;
  void* stream = nullptr;  // the proxy's own, for GPU-to-GPU jobs
  bool stop = false;
  int unfinished = 0;  // jobs touching this communicator that have not finished
};

std::mutex gMu;
std::condition_variable gCv;
std::map<Communicator*, std::unique_ptr<Lane>> gLanes;
std::map<const Job*, std::shared_ptr<Job>> gJobs;  // alive until their last callback
std::multimap<size_t, void*> gPool;          // free pinned buffers by size
std::vector<uint64_t*> gFreeFlags;           // free pinned flag words
std::vector<uint64_t*> gFlagSlabs;           // where they come from
std::atomic<bool> gAnyLane{false};
std::vector<std::unique_ptr<Lane>> gStuckLanes;  // stopped with jobs still on a stream: their callbacks use them

// Staging sizes for one rank's part of an operation, and whether it reads its
// input and writes its output there (NCCL leaves a non-root's output of Reduce and
// Gather untouched, so nothing may be copied back over it).
struct Staging {
  size_t in = 0, out = 0;
  bool readsIn = false, writesOut = false;
};

Staging stagingOf(const OpDesc& op, int nranks, int rank) {
  return {sendBytes(op, nranks), recvBytes(op, nranks), readsSendBuffer(op, rank), writesRecvBuffer(op, rank)};
}

size_t sizeClass(size_t bytes) {
  size_t c = 4096;
  while (c < bytes) c *= 2;
  return c;
}

void* acquire(size_t bytes, Job& job) {
  if (bytes == 0) return nullptr;
  size_t c = sizeClass(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(gMu);
    auto it = gPool.find(c);
    if (it != gPool.end()) {
      p = it->second;
      gPool.erase(it);
    }
  }
  if (!p) p = device::pinnedAlloc(c);
  job.buffers.emplace_back(p, c);
  return p;
}

uint64_t* acquireFlag() {
  {
    std::lock_guard<std::mutex> lock(gMu);
    if (!gFreeFlags.empty()) {
      uint64_t* f = gFreeFlags.back();
      gFreeFlags.pop_back();
      *f = 0;
      return f;
    }
  }
  auto* slab = static_cast<uint64_t*>(device::pinnedAlloc(4096));  // 512 flags at a time
  std::lock_guard<std::mutex> lock(gMu);
  gFlagSlabs.push_back(slab);
  for (int i = 1; i < 512; ++i) gFreeFlags.push_back(slab + i);
  slab[0] = 0;
  return slab;
}

void raise(uint64_t* flag) { __atomic_store_n(flag, uint64_t{1}, __ATOMIC_RELEASE); }

// CUDA's callback thread: no CUDA calls, no blocking.
void onInputsStaged(void* arg) {
  auto* part = static_cast<Part*>(arg);
  if (part->waiting.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lock(gMu);
    gCv.notify_all();
  }
}

void onOutputsCopied(void* arg) {
  auto* job = static_cast<Job*>(arg);
  if (job->finishing.fetch_sub(1) != 1) return;
  std::lock_guard<std::mutex> lock(gMu);
  for (auto& [p, bytes] : job->buffers) gPool.emplace(bytes, p);
  for (auto& part : job->parts) gFreeFlags.push_back(part->flag);
  for (Lane* l : job->lanes) --l->unfinished;
  gJobs.erase(job);
  gCv.notify_all();
}

// As the host path fails (Executor::failAll): the error is the communicator's, and
// its connections close, so that peers waiting for this rank fail now, not at the timeout.
void failJob(Job& job, const Part& part, ncclResult_t code, const char* what) {
  for (auto& [h, op] : part.hostOps) {
    Communicator& c = *h->impl;
    if (c.asyncError() == ncclSuccess) c.setAsyncError(code);
    c.abortConnections();
  }
  STRATA_WARN(job.home->comm->rank(),
              "device path: %s; the stream goes on with undefined output (ncclCommGetAsyncError reports it)", what);
}

void runPart(Job& job, Part& part) {
  try {
    if (job.direct)
      device_direct::run(part.hostOps, &job.home->stream);
    else
      group::runHostOps(part.hostOps);
  } catch (const Error& e) {
    failJob(job, part, e.code(), e.what());
  } catch (const std::exception& e) {  // the proxy must outlive any failure: streams wait on it
    failJob(job, part, ncclInternalError, e.what());
  }
  raise(part.flag);
}

void proxyLoop(Lane* lane) {
  auto ready = [&] {
    if (lane->queue.empty()) return false;
    Job& j = *lane->queue.front();
    return j.parts[j.next]->waiting.load() == 0;
  };
  for (;;) {
    std::shared_ptr<Job> job;
    Part* part = nullptr;
    {
      std::unique_lock<std::mutex> lock(gMu);
      gCv.wait(lock, [&] { return lane->stop || ready(); });
      if (lane->stop) {  // release() gave up waiting: free the streams, the outputs are lost
        for (auto& j : lane->queue)
          for (auto& p : j->parts) raise(p->flag);
        return;
      }
      job = lane->queue.front();
      part = job->parts[job->next++].get();
      if (job->next == job->parts.size()) lane->queue.pop_front();
    }
    runPart(*job, *part);
  }
}

Lane& laneFor(Communicator& comm) {
  std::lock_guard<std::mutex> lock(gMu);
  std::unique_ptr<Lane>& l = gLanes[&comm];
  if (!l) {
    l = std::make_unique<Lane>();
    l->comm = &comm;
    l->proxy = std::thread(proxyLoop, l.get());
    gAnyLane.store(true);
    STRATA_INFO(kSubsysInit, comm.rank(), "device path: proxy thread started (device %d)", comm.device());
  }
  return *l;
}

}  // namespace

bool touchesDevice(const OpDesc& op) {
  if (device::gpuCount() == 0) return false;
  return device::isDevicePointer(op.sendbuff) || device::isDevicePointer(op.recvbuff);
}

namespace {

// A copy between a device buffer and staging, made on `stream`.
struct Transfer {
  void* stream;
  void* dst;
  const void* src;
  size_t bytes;
};

// What the streams do for one part: copies in before telling the proxy, copies
// out after its flag.
struct PartCopies {
  std::vector<Transfer> in, out;
};

// Staged all-reduce, broadcast and reduce are element-wise, so a large one runs as
// chunks: the copies of one chunk overlap the host's work on another.
constexpr size_t kStageChunkBytes = 4 << 20;

// Rewrites the operations onto staging buffers; returns the distinct streams (with
// the device to launch on) and every operation's copies.
PartCopies stage(const std::vector<std::pair<ncclComm*, OpDesc>>& ops, Job& job, Part& part,
                 std::vector<std::pair<void*, int>>* streams) {
  PartCopies copies;
  for (auto& [h, op] : ops) {
    Communicator& c = *h->impl;
    Staging s = stagingOf(op, c.nranks(), c.rank());
    OpDesc host = op;
    host.stream = nullptr;
    host.pinned = c.redops().pin(op);
    host.sendbuff = s.in ? acquire(s.in, job) : nullptr;
    host.recvbuff = s.out ? acquire(s.out, job) : nullptr;
    auto known = [&](const std::pair<void*, int>& e) { return e.first == op.stream; };
    if (std::find_if(streams->begin(), streams->end(), known) == streams->end())
      streams->emplace_back(op.stream, c.device());
    if (s.readsIn) copies.in.push_back({op.stream, const_cast<void*>(host.sendbuff), op.sendbuff, s.in});
    if (s.writesOut) copies.out.push_back({op.stream, op.recvbuff, host.recvbuff, s.out});
    part.hostOps.emplace_back(h, host);
    Lane& l = laneFor(c);
    if (std::find(job.lanes.begin(), job.lanes.end(), &l) == job.lanes.end()) job.lanes.push_back(&l);
  }
  return copies;
}

Transfer slice(const Transfer& t, size_t offset, size_t bytes) {
  return {t.stream, static_cast<char*>(t.dst) + offset, static_cast<const char*>(t.src) + offset, bytes};
}

// Splits a staged single all-reduce, broadcast or reduce into chunk-sized parts.
std::vector<PartCopies> chunk(Job& job, const PartCopies& whole) {
  const auto& [h, op] = job.parts[0]->hostOps[0];
  bool splittable = job.parts[0]->hostOps.size() == 1 && op.kind == OpKind::kCollective &&
                    (op.coll == Collective::kAllReduce || op.coll == Collective::kBroadcast ||
                     op.coll == Collective::kReduce);
  size_t es = device::dtypeSize(op.type), per = kStageChunkBytes / es;
  if (!splittable || op.count <= per) return {whole};
  std::vector<PartCopies> parts;
  OpDesc base = op;
  ncclComm* comm = h;
  job.parts.clear();
  for (size_t o = 0; o < base.count; o += per) {
    size_t n = std::min(per, base.count - o);
    auto part = std::make_unique<Part>();
    OpDesc piece = base;
    piece.count = n;
    piece.sendbuff = static_cast<const char*>(base.sendbuff) + o * es;
    piece.recvbuff = static_cast<char*>(base.recvbuff) + o * es;
    part->hostOps.emplace_back(comm, piece);
    job.parts.push_back(std::move(part));
    PartCopies pc;
    for (const Transfer& t : whole.in) pc.in.push_back(slice(t, o * es, n * es));
    for (const Transfer& t : whole.out) pc.out.push_back(slice(t, o * es, n * es));
    parts.push_back(std::move(pc));
  }
  return parts;
}

}  // namespace

void enqueue(const std::vector<std::pair<ncclComm*, OpDesc>>& ops) {
  for (auto& [h, op] : ops)
    STRATA_REQUIRE(!device::streamCapturing(op.stream), ncclInvalidUsage,
                   "%s: rank %d: the stream is being captured into a CUDA graph; Strata's device path runs each "
                   "operation through a host proxy thread, which a graph cannot replay (capture is not supported yet)",
                   op.fn, h->rank);
  auto job = std::make_shared<Job>();
  job->parts.push_back(std::make_unique<Part>());
  std::vector<std::pair<void*, int>> streams;
  std::vector<PartCopies> copies;
  job->direct = device_direct::fits(ops);
  if (job->direct) {  // the proxy reads and writes the device buffers itself
    job->parts[0]->hostOps = ops;
    for (auto& [h, op] : job->parts[0]->hostOps) op.pinned = h->impl->redops().pin(op);
    job->lanes.push_back(&laneFor(*ops.front().first->impl));
    streams.emplace_back(ops.front().second.stream, ops.front().first->impl->device());
    copies.emplace_back();
  } else {
    copies = chunk(*job, stage(ops, *job, *job->parts[0], &streams));
  }
  job->home = job->lanes.front();
  for (auto& part : job->parts) {
    part->flag = acquireFlag();
    part->waiting = static_cast<int>(streams.size());
  }
  job->finishing = static_cast<int>(streams.size());
  {
    std::lock_guard<std::mutex> lock(gMu);
    gJobs.emplace(job.get(), job);
    for (Lane* l : job->lanes) ++l->unfinished;
    job->home->queue.push_back(job);
  }
  // Per stream: every part's inputs, each followed by a word to the proxy; then each
  // part's wait and copies back; then the staging goes back to the pool.
  for (auto& [stream, dev] : streams) {
    int prev = device::setCurrentDevice(dev);
    for (size_t k = 0; k < job->parts.size(); ++k) {
      for (const Transfer& t : copies[k].in)
        if (t.stream == stream) device::copyAsync(t.dst, t.src, t.bytes, t.stream);
      device::hostCallback(stream, onInputsStaged, job->parts[k].get());
    }
    for (size_t k = 0; k < job->parts.size(); ++k) {
      device::waitHostFlag(stream, job->parts[k]->flag, 1);
      for (const Transfer& t : copies[k].out)
        if (t.stream == stream) device::copyAsync(t.dst, t.src, t.bytes, t.stream);
    }
    device::hostCallback(stream, onOutputsCopied, job.get());
    device::setCurrentDevice(prev);
  }
}

void drain(Communicator& comm, double waitSec) {
  if (!gAnyLane.load()) return;
  std::unique_lock<std::mutex> lock(gMu);
  auto it = gLanes.find(&comm);
  if (it == gLanes.end()) return;
  Lane* l = it->second.get();
  double timeout = waitSec >= 0 ? waitSec : config().timeoutSec;
  bool done = gCv.wait_for(lock, std::chrono::duration<double>(timeout), [&] { return l->unfinished == 0; });
  STRATA_REQUIRE(done, ncclSystemError,
                 "rank %d: %d operation(s) on device buffers did not finish within %.0f s (STRATA_TIMEOUT): is the "
                 "stream they were enqueued on blocked?",
                 comm.rank(), l->unfinished, timeout);
}

void release(Communicator& comm, double waitSec) {
  if (!gAnyLane.load()) return;
  {
    std::lock_guard<std::mutex> lock(gMu);
    if (!gLanes.count(&comm)) return;
  }
  try {
    drain(comm, waitSec);
  } catch (const Error& e) {
    STRATA_WARN(comm.rank(), "%s; destroying the communicator anyway", e.what());
  }
  std::unique_ptr<Lane> lane;
  {
    std::lock_guard<std::mutex> lock(gMu);
    auto it = gLanes.find(&comm);
    it->second->stop = true;
    gCv.notify_all();
    lane = std::move(it->second);
    gLanes.erase(it);
  }
  lane->proxy.join();
  if (lane->stream) device::streamDestroy(lane->stream);
  std::vector<void*> unused;  // with the last communicator gone, the pinned pools go too
  {
    std::lock_guard<std::mutex> lock(gMu);
    if (lane->unfinished > 0) gStuckLanes.push_back(std::move(lane));
    if (!gLanes.empty() || !gJobs.empty()) return;
    for (auto& [bytes, p] : gPool) unused.push_back(p);
    for (uint64_t* slab : gFlagSlabs) unused.push_back(slab);
    gPool.clear();
    gFlagSlabs.clear();
    gFreeFlags.clear();
    gAnyLane.store(false);
  }
  for (void* p : unused) device::pinnedFree(p);
}

}  // namespace strata::core::device_path
