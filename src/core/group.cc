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

// True when the group's operations on device buffers, on one stream, are all
// collectives or all sends and receives that device-driven algorithms run with
// kernels on that stream alone. Every rank must decide alike, so nothing a peer
// may see differently counts: not how many transfers this rank's group has, nor
// buffers this rank does not use (NCCL ignores a non-root's reduce or gather
// output, which may be null).
bool streamOrdered(Ops ops) {
  const bool p2p = ops.front().second.kind != OpKind::kCollective;
  for (auto& [h, op] : ops) {
    if ((op.kind != OpKind::kCollective) != p2p || op.stream != ops.front().second.stream) return false;
    Communicator& comm = readyComm(h, op.fn);
    if (writesRecvBuffer(op, comm.rank()) && !device::isDevicePointer(op.recvbuff)) return false;
    if (readsSendBuffer(op, comm.rank()) && !device::isDevicePointer(op.sendbuff)) return false;
    if (op.count > 0 && !comm.deviceCapable(opCollective(op), opBytes(op, comm.nranks()), true)) return false;
  }
  return true;
}

// A stream of another GPU than the communicator's fails the call before anything is
// enqueued (CUDA would refuse the launch into it halfway through the group, leaving
// the communicator in an error state); the communicator goes on.
void checkStreams(Ops ops) {
  for (auto& [h, op] : ops) {
    int comm = h->impl->device(), stream = device::streamDevice(op.stream);
    STRATA_REQUIRE(stream < 0 || comm < 0 || stream == comm, ncclInvalidArgument,
                   "%s: rank %d: the stream belongs to GPU %d, the communicator to GPU %d", op.fn, h->rank, stream, comm);
  }
}

// Device buffers go to the stream: kernels enqueued here, or the proxy's job
// (device_proxy.h); host buffers run here, after the communicators' earlier device
// operations.
void runOps(Ops ops) {
  bool device = false;
  for (auto& [h, op] : ops) device = device || DeviceProxy::touchesDevice(op);
  if (device) {
    checkGroup(ops);
    checkStreams(ops);
    if (!streamOrdered(ops)) return DeviceProxy::enqueue({ops.begin(), ops.end()});
    void* stream = ops.front().second.stream ? ops.front().second.stream : device::kLegacyStream;
    // A capture's work is the graph's, run at its replays: nothing to order or wait for.
    bool captured = stream != device::kLegacyStream && device::streamCapturing(stream);
    auto eachComm = [&](const std::function<void(Communicator&)>& f) {
      for (size_t i = 0; i < ops.size(); ++i)
        if (i == 0 || ops[i].first != ops[i - 1].first) f(readyComm(ops[i].first, ops[i].second.fn));
    };
    if (!captured) eachComm([stream](Communicator& c) { c.orderStreamWork(stream); });
    Executor ex(stream, true);  // the executor's null stream means none
    for (auto& [h, op] : ops) ex.add(readyComm(h, op.fn), op);
    ex.run();
    if (!captured) eachComm([stream](Communicator& c) { c.markStreamWork(stream); });
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
