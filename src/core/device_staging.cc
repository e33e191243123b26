// How a group on device buffers becomes a job on the caller's streams: staged
// through pinned host memory (every host algorithm works on it), or direct when
// an algorithm works on device memory for every operation of the group.
#include <unistd.h>

#include <algorithm>

#include "base/error.h"
#include "core/comm_handle.h"
#include "core/communicator.h"
#include "core/device_job.h"
#include "core/device_proxy.h"
#include "core/executor.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::core {
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

// CUDA's callback thread: no CUDA calls, no blocking.
void onInputsStaged(void* arg) {
  auto* part = static_cast<DevicePart*>(arg);
  part->home->inputStaged(part);
}


}  // namespace

void onOutputsCopied(void* arg) {
  auto* job = static_cast<DeviceJob*>(arg);
  if (job->finishing.fetch_sub(1) != 1) return;
  std::vector<uint64_t*> flags;
  for (auto& part : job->parts) flags.push_back(part->flag);
  job->home->returnStaging(job->buffers, flags);
  std::shared_ptr<DeviceJob> last = job->home->forget(job);  // freed once the proxies are told
  for (DeviceProxy* p : job->proxies) p->jobFinished();  // the last use of each: it may be destroyed next
}

namespace {

void addProxy(DeviceJob& job, DeviceProxy& p) {
  if (std::find(job.proxies.begin(), job.proxies.end(), &p) == job.proxies.end()) job.proxies.push_back(&p);
}

// Rewrites the operations onto staging buffers; returns every operation's copies.
PartCopies stage(const std::vector<std::pair<ncclComm*, OpDesc>>& ops, DeviceJob& job) {
  PartCopies copies;
  DevicePart& part = *job.parts[0];
  for (auto& [h, op] : ops) {
    Communicator& c = *h->impl;
    size_t in = sendBytes(op, c.nranks()), out = recvBytes(op, c.nranks());
    OpDesc host = op;
    host.stream = nullptr;
    host.pinned = c.redops().pin(op);
    host.sendbuff = job.home->acquireStaging(in, &job.buffers);
    host.recvbuff = job.home->acquireStaging(out, &job.buffers);
    if (readsSendBuffer(op, c.rank())) copies.in.push_back({op.stream, const_cast<void*>(host.sendbuff), op.sendbuff, in});
    if (writesRecvBuffer(op, c.rank())) copies.out.push_back({op.stream, op.recvbuff, host.recvbuff, out});
    part.ops.emplace_back(h, host);
    addProxy(job, c.deviceProxy());
  }
  return copies;
}

Transfer slice(const Transfer& t, size_t offset, size_t bytes) {
  return {t.stream, static_cast<char*>(t.dst) + offset, static_cast<const char*>(t.src) + offset, bytes};
}

// Splits a staged single all-reduce, broadcast or reduce into chunk-sized parts.
std::vector<PartCopies> chunk(DeviceJob& job, const PartCopies& whole) {
  const auto& [h, op] = job.parts[0]->ops[0];
  bool splittable = job.parts[0]->ops.size() == 1 && op.kind == OpKind::kCollective &&
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
    auto part = std::make_unique<DevicePart>();
    OpDesc piece = base;
    piece.count = n;
    piece.sendbuff = static_cast<const char*>(base.sendbuff) + o * es;
    piece.recvbuff = static_cast<char*>(base.recvbuff) + o * es;
    part->ops.emplace_back(comm, piece);
    job.parts.push_back(std::move(part));
    PartCopies pc;
    for (const Transfer& t : whole.in) pc.in.push_back(slice(t, o * es, n * es));
    for (const Transfer& t : whole.out) pc.out.push_back(slice(t, o * es, n * es));
    parts.push_back(std::move(pc));
  }
  return parts;
}

// True when the driver exports the buffer as a dma-buf (not managed memory, nor a
// pool or VMM allocation it cannot): else the transfer is staged, as it was before.
bool exportable(const void* buf, size_t bytes) {
  int fd = -1;
  uint64_t offset = 0;
  std::string why;
  if (!device::exportDmabuf(buf, bytes, &fd, &offset, &why)) return false;
  close(fd);
  return true;
}

// One operation the proxy can run on its device buffers themselves: a collective an
// algorithm runs on device memory (the tuner says, NCCL_ALGO included), or a send or
// receive that moves as one GPUDirect RDMA put straight from or into the buffer.
bool directOp(ncclComm* h, const OpDesc& op) {
  Communicator& c = *h->impl;
  size_t bytes = opBytes(op, c.nranks());
  if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
    const void* buf = op.kind == OpKind::kSend ? op.sendbuff : op.recvbuff;
    return device::isDevicePointer(buf) && c.devicePuts(op.root, bytes) && exportable(buf, bytes);
  }
  return device::isDevicePointer(op.sendbuff) && device::isDevicePointer(op.recvbuff) && c.deviceCapable(op.coll, bytes);
}

// A CUDA call failed while stream `failed` of `streams` was being given its work
// (`staged` of its parts told to the proxy, `finishes` streams given their last
// callback): the proxy still runs the job, so that the peers are not left waiting
// (this rank's output is lost; the caller sees the error), and finishes for the
// streams that will never call back.
void abandonStreams(DeviceJob& job, size_t failed, size_t staged, size_t streams, size_t finishes, int prev) {
  try {
    device::setCurrentDevice(prev);
  } catch (const Error&) {  // the error being thrown says more
  }
  for (size_t s = failed; s < streams; ++s)
    for (size_t k = s == failed ? staged : 0; k < job.parts.size(); ++k) onInputsStaged(job.parts[k].get());
  for (size_t s = finishes; s < streams; ++s) onOutputsCopied(&job);  // the last share may finish the job
}

// Without staging when the group is one communicator on one stream and every operation is direct.
bool direct(const std::vector<std::pair<ncclComm*, OpDesc>>& ops) {
  for (auto& [h, op] : ops)
    if (h != ops.front().first || op.stream != ops.front().second.stream || !directOp(h, op)) return false;
  return true;
}

// The distinct streams of the group, each with the device to launch on.
std::vector<std::pair<void*, int>> streamsOf(const std::vector<std::pair<ncclComm*, OpDesc>>& ops) {
  std::vector<std::pair<void*, int>> streams;
  for (auto& [h, op] : ops) {
    auto known = [s = op.stream](const std::pair<void*, int>& e) { return e.first == s; };
    if (std::find_if(streams.begin(), streams.end(), known) == streams.end())
      streams.emplace_back(op.stream, h->impl->device());
  }
  return streams;
}

}  // namespace

void DeviceProxy::runBlocking(const std::vector<std::pair<ncclComm*, OpDesc>>& ops) {
  std::vector<std::pair<void*, int>> streams = streamsOf(ops);
  for (auto [stream, dev] : streams) {
    device::OnDevice on(dev);
    device::streamSynchronize(stream);
  }
  DeviceJob job;
  job.parts.push_back(std::make_unique<DevicePart>());
  job.home = &ops.front().first->impl->deviceProxy();
  struct Staging {  // back to the pool whatever happens
    DeviceJob& job;
    ~Staging() { job.home->returnStaging(job.buffers, {}); }
  } staging{job};
  PartCopies copies = stage(ops, job);
  auto copy = [&](const std::vector<Transfer>& transfers) {  // each on its stream's device
    for (const Transfer& t : transfers) {
      auto own = [&t](const std::pair<void*, int>& e) { return e.first == t.stream; };
      device::OnDevice on(std::find_if(streams.begin(), streams.end(), own)->second);
      device::copySync(t.dst, t.src, t.bytes);
    }
  };
  copy(copies.in);
  Executor ex;
  for (auto& [h, op] : job.parts[0]->ops) ex.add(readyComm(h, op.fn), op);
  ex.run();
  copy(copies.out);
}

void DeviceProxy::enqueue(const std::vector<std::pair<ncclComm*, OpDesc>>& ops) {
  for (auto& [h, op] : ops)
    STRATA_REQUIRE(!device::streamCapturing(op.stream), ncclInvalidUsage,
                   "%s: rank %d: the stream is being captured into a CUDA graph; Strata's device path runs each "
                   "operation through a host proxy thread, which a graph cannot replay (capture is not supported yet)",
                   op.fn, h->rank);
  for (auto& [h, op] : ops)
    if (h->impl->sharesGpu()) return runBlocking(ops);
  auto job = std::make_shared<DeviceJob>();
  job->parts.push_back(std::make_unique<DevicePart>());
  job->home = &ops.front().first->impl->deviceProxy();
  std::vector<std::pair<void*, int>> streams = streamsOf(ops);
  std::vector<PartCopies> copies;
  job->direct = direct(ops);
  if (job->direct) {  // the proxy's algorithm reads and writes the device buffers itself
    job->parts[0]->ops = ops;
    for (auto& [h, op] : job->parts[0]->ops) op.pinned = h->impl->redops().pin(op);
    addProxy(*job, *job->home);
    copies.emplace_back();
  } else {
    copies = chunk(*job, stage(ops, *job));
  }
  for (auto& part : job->parts) {
    part->flag = job->home->acquireFlag();
    part->waiting = static_cast<int>(streams.size());
    part->home = job->home;
  }
  job->finishing = static_cast<int>(streams.size()) + 1;  // and the proxy's share, once it has run the job
  for (DeviceProxy* p : job->proxies) p->jobStarted();
  job->home->queue(job);
  // Per stream: every part's inputs, each followed by a word to the proxy; then each
  // part's wait and copies back; then the staging goes back to the pool.
  size_t s = 0, staged = 0, finishes = 0;  // streams begun; parts of stream s told to the proxy; callbacks at the end
  int prev = -1;
  try {
    for (; s < streams.size(); ++s, staged = 0) {
      auto [stream, dev] = streams[s];
      prev = device::setCurrentDevice(dev);
      for (; staged < job->parts.size(); ++staged) {
        for (const Transfer& t : copies[staged].in)
          if (t.stream == stream) device::copyAsync(t.dst, t.src, t.bytes, t.stream);
        device::hostCallback(stream, onInputsStaged, job->parts[staged].get());
      }
      for (size_t k = 0; k < job->parts.size(); ++k) {
        device::waitHostFlag(stream, job->parts[k]->flag, 1);
        for (const Transfer& t : copies[k].out)
          if (t.stream == stream) device::copyAsync(t.dst, t.src, t.bytes, t.stream);
      }
      device::hostCallback(stream, onOutputsCopied, job.get());
      ++finishes;
      device::setCurrentDevice(prev);
    }
  } catch (const Error&) {
    abandonStreams(*job, s, staged, streams.size(), finishes, prev);
    throw;
  }
}

}  // namespace strata::core
