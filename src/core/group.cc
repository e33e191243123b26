#include "core/group.h"

#include <algorithm>
#include <functional>
#include <span>
#include <thread>
#include <vector>

#include "algorithms/tuner.h"
#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "core/device_proxy.h"
#include "core/executor.h"
#include "device/gpu.h"

namespace strata::core::group {
namespace {

struct GroupState {
  int depth = 0;
  std::vector<std::pair<ncclComm*, OpDesc>> ops;
  std::vector<std::pair<ncclComm*, std::function<void()>>> inits;
  ncclResult_t failed = ncclSuccess;
  std::string failMessage;
};

thread_local GroupState tGroup;

// A group's operations, or the one of a call outside a group (no vector to allocate).
using Ops = std::span<const std::pair<ncclComm*, OpDesc>>;

void runInits(std::vector<std::pair<ncclComm*, std::function<void()>>>& inits) {
  if (inits.size() == 1) {
    inits[0].second();
  } else if (inits.size() > 1) {  // ranks of one clique rendezvous with each other: run them together
    std::vector<std::thread> threads;
    for (auto& [h, job] : inits) threads.emplace_back(job);
    for (std::thread& t : threads) t.join();
  }
  for (auto& [h, job] : inits)
    STRATA_REQUIRE(h->initState.load() == ncclSuccess, h->initState.load(),
                   "ncclGroupEnd: rank %d failed to initialise: %s", h->rank, h->initError.c_str());
}

double estimateUs(const std::vector<std::pair<ncclComm*, OpDesc>>& ops) {
  double total = 0;
  for (auto& [h, op] : ops) {
    Communicator& comm = readyComm(h, "ncclGroupSimulateEnd");
    auto coll = op.kind == OpKind::kCollective ? op.coll : algorithms::Collective::kSendRecv;
    total += comm.choose(coll, opBytes(op, comm.nranks())).estimatedUs;
  }
  return total;
}

// What every group must be before it runs: of one blocking mode, on communicators
// without an earlier failure.
void checkGroup(Ops ops) {
  int blocking = -1;
  for (auto& [h, op] : ops) {
    Communicator& comm = readyComm(h, op.fn);
    int b = comm.options().blocking ? 1 : 0;
    STRATA_REQUIRE(blocking < 0 || blocking == b, ncclInvalidUsage,
                   "ncclGroupEnd: a group mixes blocking and nonblocking communicators, which NCCL does not allow");
    blocking = b;
    STRATA_REQUIRE(comm.asyncError() == ncclSuccess, ncclInvalidUsage,
                   "%s: rank %d: the communicator is in an error state (%d) after an earlier failure; abort it", op.fn,
                   comm.rank(), static_cast<int>(comm.asyncError()));
  }
}

// Runs operations on host memory now, on this thread.
void runHostOps(Ops ops) {
  checkGroup(ops);
  Executor ex;
  if (ops.size() == 1 && ex.runAgain(readyComm(ops[0].first, ops[0].second.fn), ops[0].second)) return;
  for (auto& [h, op] : ops) ex.add(readyComm(h, op.fn), op);
  ex.run();
}

// Whether each operation's buffers are device memory, each pointer asked once (a
// thread's list, kept between calls; empty without a GPU).
struct OpMemory {
  bool send, recv;
};
std::vector<OpMemory>& memoryOf(Ops ops) {
  thread_local std::vector<OpMemory> list;
  list.clear();
  if (device::gpuCount() == 0) return list;
  for (auto& [h, op] : ops) {
    bool send = device::isDevicePointer(op.sendbuff);
    list.push_back({send, op.recvbuff == op.sendbuff ? send : device::isDevicePointer(op.recvbuff)});
  }
  return list;
}

// Each communicator of a group and the stream of its first operation (a thread's
// list, kept between calls).
struct CommStream {
  ncclComm* handle;
  void* stream;
};
std::vector<CommStream>& commStreams(Ops ops) {
  thread_local std::vector<CommStream> list;
  list.clear();
  for (auto& [h, op] : ops)
    if (std::none_of(list.begin(), list.end(), [h = h](const CommStream& c) { return c.handle == h; }))
      list.push_back({h, opStream(op)});
  return list;
}

// True when the group's operations on device buffers run as kernels on the callers'
// streams alone: each communicator's operations on one stream (one thread driving
// several GPUs gives each of its communicators a stream of its own, and their kernels
// launch in turn from this thread), collectives and sends and receives that
// device-driven algorithms run (a group mixing them launches its collective kernels
// and its point-to-point kernel in the same order on every rank). Every rank must
// decide alike, so nothing a peer may see differently counts: not how many transfers
// this rank's group has, nor buffers this rank does not use (NCCL ignores a non-root's
// reduce or gather output, which may be null).
bool streamOrdered(Ops ops, const std::vector<CommStream>& comms, const std::vector<OpMemory>& memory) {
  for (size_t i = 0; i < ops.size(); ++i) {
    auto& [h, op] = ops[i];
    const CommStream& c = *std::find_if(comms.begin(), comms.end(), [h = h](const CommStream& x) { return x.handle == h; });
    if (opStream(op) != c.stream) return false;
    Communicator& comm = readyComm(h, op.fn);
    if (writesRecvBuffer(op, comm.rank()) && !memory[i].recv) return false;
    if (readsSendBuffer(op, comm.rank()) && !memory[i].send) return false;
    if (op.count > 0 && !comm.deviceCapable(opCollective(op), opBytes(op, comm.nranks()), true)) return false;
  }
  return true;
}

// A stream of another GPU than the communicator's fails the call before anything is
// enqueued (CUDA would refuse the launch into it halfway through the group, leaving
// the communicator in an error state); the communicator goes on.
void checkStreams(Ops ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    auto& [h, op] = ops[i];
    if (i > 0 && ops[i - 1].first == h && ops[i - 1].second.stream == op.stream) continue;  // asked already
    int comm = h->impl->device(), stream = device::streamDevice(op.stream);
    STRATA_REQUIRE(stream < 0 || comm < 0 || stream == comm, ncclInvalidArgument,
                   "%s: rank %d: the stream belongs to GPU %d, the communicator to GPU %d", op.fn, h->rank, stream, comm);
  }
}

// The proxy runs a collective through a device-memory algorithm or, staged, a host
// one: NCCL_ALGO / NCCL_PROTO must leave one of them (NCCL_PROTO=LL128 leaves neither),
// or the call fails here, naming them, instead of on the proxy thread after the call
// returned (the stream would go on with outputs never written).
void checkProxyChoice(Ops ops) {
  for (auto& [h, op] : ops) {
    if (op.count == 0 || op.kind != OpKind::kCollective) continue;
    Communicator& comm = readyComm(h, op.fn);
    size_t bytes = opBytes(op, comm.nranks());
    if (!comm.deviceCapable(op.coll, bytes)) comm.choose(op.coll, bytes);  // throws, naming them
  }
}

// Device buffers go to the stream: kernels enqueued here, or the proxy's job
// (device_proxy.h); host buffers run here, after the communicators' earlier device
// operations.
void runOps(Ops ops) {
  std::vector<OpMemory>& memory = memoryOf(ops);
  bool device = std::any_of(memory.begin(), memory.end(), [](const OpMemory& m) { return m.send || m.recv; });
  if (device) {
    checkGroup(ops);
    checkStreams(ops);
    std::vector<CommStream>& comms = commStreams(ops);
    if (!streamOrdered(ops, comms, memory)) {
      checkProxyChoice(ops);
      return DeviceProxy::enqueue({ops.begin(), ops.end()});
    }
    // A capture's work is the graph's, run at its replays: nothing to order or wait for.
    for (CommStream& c : comms)
      if (c.stream != device::kLegacyStream && device::streamCapturing(c.stream)) c.stream = nullptr;
    for (const CommStream& c : comms)
      if (c.stream) readyComm(c.handle, "ncclGroupEnd").orderStreamWork(c.stream);
    Executor ex(nullptr, true);  // each communicator's kernels on its operations' stream
    for (auto& [h, op] : ops) ex.add(readyComm(h, op.fn), op);
    ex.run();
    for (const CommStream& c : comms)
      if (c.stream) readyComm(c.handle, "ncclGroupEnd").markStreamWork(c.stream);
    return;
  }
  for (auto& [h, op] : ops) {
    readyComm(h, op.fn).drainDevice();
    readyComm(h, op.fn).waitStreamWork(op.fn);
  }
  runHostOps(ops);
}

}  // namespace

void start() { ++tGroup.depth; }

bool active() { return tGroup.depth > 0; }

void end(ncclSimInfo_t* sim) {
  STRATA_REQUIRE(tGroup.depth > 0, ncclInvalidUsage,
                 "ncclGroupEnd: no ncclGroupStart is open on this thread (group calls must be balanced)");
  if (--tGroup.depth > 0) return;
  GroupState g = std::move(tGroup);
  tGroup = GroupState();
  // The queued operations' references, dropped whatever happens; and a use of each
  // communicator while the group runs, so an abort on another thread waits for it.
  struct Refs {
    std::vector<ncclComm*> handles;
    ~Refs() {
      for (ncclComm* h : handles) releaseHandle(h);
    }
  } refs;
  for (auto& [h, op] : g.ops) refs.handles.push_back(h);
  runInits(g.inits);
  if (g.failed != ncclSuccess)
    fail(g.failed, "ncclGroupEnd: a call in this group failed, so none of its operations ran: %s",
         g.failMessage.c_str());
  std::vector<CommUse> uses;
  for (ncclComm* h : refs.handles)
    if (std::none_of(uses.begin(), uses.end(), [h](const CommUse& u) { return u.handle() == h; }))
      uses.emplace_back(h, "ncclGroupEnd");
  if (sim) {
    sim->estimatedTime = static_cast<float>(estimateUs(g.ops));
    return;
  }
  runOps(g.ops);
}

void deferInit(ncclComm* h, std::function<void()> job) { tGroup.inits.emplace_back(h, std::move(job)); }

void enqueue(ncclComm* h, const OpDesc& op) {
  if (tGroup.depth > 0) {
    retainHandle(h);
    tGroup.ops.emplace_back(h, op);
    return;
  }
  const std::pair<ncclComm*, OpDesc> one{h, op};
  runOps(Ops(&one, 1));
}

void markFailed(ncclResult_t code, const std::string& msg) {
  if (tGroup.depth > 0 && tGroup.failed == ncclSuccess) {
    tGroup.failed = code;
    tGroup.failMessage = msg;
  }
}

}  // namespace strata::core::group
