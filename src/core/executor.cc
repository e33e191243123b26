#include "core/executor.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/clock.h"
#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "device/dtypes.h"

namespace strata::core {
namespace {

constexpr size_t kBytesPerChannel = 512 << 10;  // below this, extra channels only add steps
// Outputs from this size on do not stay in the caches (1 MiB of L2 per core on the test
// machines), so they are written with streaming stores; not in place, where the output
// lines were just read and are still cached.
constexpr size_t kStreamingBytes = 8 << 20;
enum LaneKind { kRingLane = 0, kSendLane = 1, kRecvLane = 2, kMeshLane = 3 };

bool reducing(algorithms::Collective c) {
  return c == algorithms::Collective::kAllReduce || c == algorithms::Collective::kReduceScatter ||
         c == algorithms::Collective::kReduce;
}

bool overlaps(const void* a, const void* b, size_t bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

inline void cpuRelax() { __builtin_ia32_pause(); }

}  // namespace

void Executor::add(Communicator& comm, const OpDesc& op) {
  work_[&comm];  // every communicator of the group takes part, even with nothing to move
  if (op.count == 0) return;
  size_t bytes = op.count * device::dtypeSize(op.type);
  switch (op.kind) {
    case OpKind::kSend: return addSend(comm, op, static_cast<const char*>(op.sendbuff), bytes, op.root);
    case OpKind::kRecv: return addRecv(comm, op, static_cast<char*>(op.recvbuff), bytes, op.root);
    case OpKind::kCollective:
      if (op.coll >= algorithms::Collective::kAllToAll) return addPairwise(comm, op);
      // The tuner's choice; throws when NCCL_ALGO / NCCL_PROTO exclude every candidate.
      algorithms::Choice c = comm.choose(op.coll, opBytes(op, comm.nranks()));
      if (strcmp(c.algorithm, "OneShot") == 0) return addOneShot(comm, op, c.proto == algorithms::Protocol::kLL);
      return addRing(comm, op);
  }
}

void Executor::addOneShot(Communicator& comm, const OpDesc& op, bool ll) {
  OneShotArgs args{op.fn, comm.rank(), static_cast<const char*>(op.sendbuff), static_cast<char*>(op.recvbuff),
                   op.count, op.type, comm.resolveOp(op.op, op.type, op.fn), nullptr, nullptr, nullptr, 0};
  pendingOneShot_.push_back({&comm, args, ll});
}

void Executor::addRing(Communicator& comm, const OpDesc& op) {
  int n = comm.nranks();
  size_t esize = device::dtypeSize(op.type);
  bool segmented = op.coll == algorithms::Collective::kAllGather || op.coll == algorithms::Collective::kReduceScatter;
  algorithms::RingParams base;
  base.coll = op.coll;
  base.nranks = n;
  base.pos = comm.rank();
  base.rootPos = op.root;
  base.stride = segmented ? op.count : 0;
  base.chunk = comm.slotBytes() / esize;
  device::ReduceOp rop = reducing(op.coll) ? comm.resolveOp(op.op, op.type, op.fn) : device::ReduceOp{};
  size_t region = op.count;
  int nch = 1;
  if (n > 1) {
    size_t wanted = (region * esize + kBytesPerChannel - 1) / kBytesPerChannel;
    wanted = std::max<size_t>(wanted, static_cast<size_t>(config().minChannels));
    nch = static_cast<int>(std::min<size_t>({wanted, static_cast<size_t>(comm.numChannels()), region}));
  }
  for (int c = 0; c < nch; ++c) {
    algorithms::RingParams p = base;
    p.begin = region * c / nch;
    p.length = region * (c + 1) / nch - p.begin;
    RingTaskArgs args{op.fn, comm.rank(), (comm.rank() + n - 1) % n, (comm.rank() + 1) % n, p,
                      static_cast<const char*>(op.sendbuff), static_cast<char*>(op.recvbuff), op.type, rop,
                      n > 1 ? comm.channel(c).fromPrev.get() : nullptr,
                      n > 1 ? comm.channel(c).toNext.get() : nullptr,
                      opBytes(op, n) >= kStreamingBytes && op.sendbuff != op.recvbuff};
    lanes_[{&comm, kRingLane, c}].comm = &comm;
    lanes_[{&comm, kRingLane, c}].tasks.push_back(makeRingTask(args));
  }
}

// All-to-all, gather and scatter: one send and one receive per peer pair, plus the local piece.
void Executor::addPairwise(Communicator& comm, const OpDesc& op) {
  int n = comm.nranks(), r = comm.rank();
  size_t piece = op.count * device::dtypeSize(op.type);
  const char* src = static_cast<const char*>(op.sendbuff);
  char* dst = static_cast<char*>(op.recvbuff);
  switch (op.coll) {
    case algorithms::Collective::kAllToAll:
      if (overlaps(src, dst, piece * n)) {  // in place: send from a copy of the input
        scratch_.emplace_back(new char[piece * n]);
        memcpy(scratch_.back().get(), src, piece * n);
        src = scratch_.back().get();
      }
      for (int j = 0; j < n; ++j) {
        if (j == r) continue;
        addSend(comm, op, src + j * piece, piece, j);
        addRecv(comm, op, dst + j * piece, piece, j);
      }
      memcpy(dst + r * piece, src + r * piece, piece);
      break;
    case algorithms::Collective::kGather:
      if (r != op.root) return addSend(comm, op, src, piece, op.root);
      for (int j = 0; j < n; ++j)
        if (j != r) addRecv(comm, op, dst + j * piece, piece, j);
      if (dst + r * piece != src) memmove(dst + r * piece, src, piece);
      break;
    default:  // scatter
      if (r != op.root) return addRecv(comm, op, dst, piece, op.root);
      for (int j = 0; j < n; ++j)
        if (j != r) addSend(comm, op, src + j * piece, piece, j);
      if (dst != src + r * piece) memmove(dst, src + r * piece, piece);
      break;
  }
}

void Executor::addSend(Communicator& comm, const OpDesc& op, const char* buf, size_t bytes, int peer) {
  CommWork& w = work_[&comm];
  if (peer == comm.rank()) {
    w.selfSends.push_back({op.fn, const_cast<char*>(buf), bytes});
    return;
  }
  w.sendPeers.insert(peer);
  pendingP2p_.push_back({&comm, kSendLane, P2pTaskArgs{op.fn, comm.rank(), peer, const_cast<char*>(buf), bytes,
                                                       nullptr, nullptr}});
}

void Executor::addRecv(Communicator& comm, const OpDesc& op, char* buf, size_t bytes, int peer) {
  CommWork& w = work_[&comm];
  if (peer == comm.rank()) {
    w.selfRecvs.push_back({op.fn, buf, bytes});
    return;
  }
  w.recvPeers.insert(peer);
  pendingP2p_.push_back({&comm, kRecvLane, P2pTaskArgs{op.fn, comm.rank(), peer, buf, bytes, nullptr, nullptr}});
}

// A rank's sends to itself meet its receives from itself in call order.
void Executor::matchSelfCopies() {
  for (auto& [comm, w] : work_) {
    size_t pairs = std::min(w.selfSends.size(), w.selfRecvs.size());
    for (size_t i = 0; i < pairs; ++i) {
      const SelfCopy &s = w.selfSends[i], &r = w.selfRecvs[i];
      STRATA_REQUIRE(s.bytes == r.bytes, ncclInvalidUsage,
                     "%s: rank %d sends %zu bytes to itself but its matching receive expects %zu", s.fn,
                     comm->rank(), s.bytes, r.bytes);
      if (s.ptr != r.ptr) memmove(r.ptr, s.ptr, s.bytes);
    }
    bool extraRecv = w.selfRecvs.size() > pairs;
    STRATA_REQUIRE(w.selfSends.size() == w.selfRecvs.size(), ncclInvalidUsage,
                   "%s: rank %d has a %s to itself with no matching %s in the same group",
                   (extraRecv ? w.selfRecvs : w.selfSends)[pairs].fn, comm->rank(),
                   extraRecv ? "ncclRecv" : "ncclSend", extraRecv ? "ncclSend" : "ncclRecv");
  }
}

void Executor::run() {
  if (work_.empty()) return;
  try {
    matchSelfCopies();
    std::vector<Communicator*> meshUsers;
    for (PendingOneShot& p : pendingOneShot_)
      if (std::find(meshUsers.begin(), meshUsers.end(), p.comm) == meshUsers.end()) meshUsers.push_back(p.comm);
    for (auto& [comm, w] : work_) comm->listenP2p(w.recvPeers);
    for (Communicator* comm : meshUsers) comm->listenMesh();
    for (auto& [comm, w] : work_) comm->connectP2p(w.sendPeers);
    for (Communicator* comm : meshUsers) comm->connectMesh();
    for (PendingOneShot& p : pendingOneShot_) {
      p.args.to = &p.comm->meshSends();
      p.args.from = &p.comm->meshRecvs();
      p.args.scratch = p.comm->meshScratch();
      p.args.chunkBytes = p.comm->meshSlotBytes();
      Lane& lane = lanes_[{p.comm, kMeshLane, 0}];
      lane.comm = p.comm;
      lane.tasks.push_back(p.ll ? makeLlOneShotTask(p.args, &p.comm->llMesh()) : makeOneShotTask(p.args));
    }
    for (PendingP2p& p : pendingP2p_) {
      if (p.kind == kSendLane)
        p.args.send = &p.comm->p2pSend(p.args.peer);
      else
        p.args.recv = &p.comm->p2pRecv(p.args.peer);
      Lane& lane = lanes_[{p.comm, p.kind, p.args.peer}];
      lane.comm = p.comm;
      lane.tasks.push_back(makeP2pTask(p.args));
    }
  } catch (const Error& e) {
    failAll(e.code(), e.what());
  }
  progressAll();
}

void Executor::progressAll() {
  Communicator* first = work_.begin()->first;
  Doorbell& bell = first->bell();
  bool multi = work_.size() > 1;
  // Oversubscribed ranks must give the core away at once, or every step waits a
  // scheduler slice; and they keep yielding rather than sleep, because a futex wake-up
  // costs more than a yield on these VMs (4 ranks on 2 cores, 8-byte all-reduce:
  // 31 us with 125 polls and 64 yields, 13 us with 10 polls and 1000 yields).
  bool crowded = first->oversubscribed();
  int spin = crowded ? config().spinCount / 200 : config().spinCount;
  int yieldLimit = crowded ? 1000 : 64;
  int idle = 0;
  double idleSince = 0, lastCheck = 0;
  for (;;) {
    if (sweepOrFail()) {
      idle = 0;
      continue;
    }
    if (allDone_) return;
    if (idle++ == 0) idleSince = lastCheck = nowSec();
    if (idle < spin) {
      cpuRelax();
    } else if (idle < spin + yieldLimit) {
      sched_yield();
    } else {
      {
        Doorbell::Sleep sleep(bell);
        if (sweepOrFail()) {
          idle = 0;
          continue;
        }
        if (allDone_) return;
        if (transport::needsPolling())
          usleep(20);  // sockets do not ring doorbells
        else
          sleep.wait(multi ? 200 : 20000);
      }
      double now = nowSec();
      if (now - lastCheck > 0.1) {
        checkHealth(now - idleSince);
        lastCheck = now;
      }
    }
  }
}

bool Executor::sweepOrFail() {
  try {
    return sweep();
  } catch (const Error& e) {
    failAll(e.code(), e.what());
  }
}

bool Executor::sweep() {
  transport::progressBackground();
  bool moved = false;
  allDone_ = true;
  for (auto& [key, lane] : lanes_) {
    while (!lane.idle()) {
      Task& t = *lane.tasks[lane.head];
      moved |= t.progress();
      if (!t.done()) break;
      ++lane.head;
    }
    if (!lane.idle()) allDone_ = false;
  }
  if (allDone_ && transport::needsPolling())  // not done until the last socket sends are out
    for (auto& [comm, w] : work_)
      if (!comm->sendsFlushed()) allDone_ = false;
  return moved;
}

void Executor::checkHealth(double idleSec) {
  for (auto& [key, lane] : lanes_) {
    if (lane.idle()) continue;
    Communicator& comm = *lane.comm;
    const Task& t = *lane.tasks[lane.head];
    int peer = t.waitingOn();
    if (comm.abortRequested())
      failAll(ncclInvalidUsage, format("%s: rank %d: the communicator was aborted (ncclCommAbort or ncclCommRevoke) "
                                       "while the operation ran",
                                       t.fn(), comm.rank()));
    if (t.peerAborted())
      failAll(ncclRemoteError, format("%s: rank %d: rank %d stopped the operation (it failed, was aborted, or "
                                      "saw another rank fail)",
                                      t.fn(), comm.rank(), peer));
    if (peer >= 0 && comm.peer(peer).sameHost(comm.peer(comm.rank())) && !processAlive(comm.peer(peer).pid))
      failAll(ncclRemoteError, format("%s: rank %d: rank %d (pid %d) exited while this rank waited for it", t.fn(),
                                      comm.rank(), peer, comm.peer(peer).pid));
    if (idleSec > config().timeoutSec)
      failAll(ncclSystemError, format("%s: rank %d made no progress for %.0f s waiting for rank %d (STRATA_TIMEOUT)",
                                      t.fn(), comm.rank(), idleSec, peer));
  }
}

void Executor::failAll(ncclResult_t code, const std::string& msg) {
  for (auto& [comm, w] : work_) {
    comm->abortConnections();
    comm->setAsyncError(code);
  }
  STRATA_WARN(work_.empty() ? -1 : work_.begin()->first->rank(), "%s", msg.c_str());
  throw Error(code, msg);
}

}  // namespace strata::core
