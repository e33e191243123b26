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
#include "device/gpu.h"

namespace strata::core {
namespace {

inline void cpuRelax() { __builtin_ia32_pause(); }

// How long a rank waits before it asks whether the peer's process is gone.
constexpr double kExitedPeerSec = 0.2;

// NCCL_DEBUG_SUBSYS=COLL: an operation as called, the algorithm that runs it, and
// whether it was planned or ran as the same call kept from before (kept_call.h).
void logCall(Communicator& comm, const OpDesc& op, const algorithms::Choice& c, const char* how) {
  if (!logEnabled(LogLevel::kInfo, kSubsysColl)) return;
  STRATA_INFO(kSubsysColl, comm.rank(),
              "%s: sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %#lx [nranks=%d]: %s/%s, %s", op.fn,
              op.sendbuff, op.recvbuff, op.count, op.rawType, rawEnum(op.op), op.root,
              static_cast<unsigned long>(comm.magic()), comm.nranks(), c.name(), algorithms::protocolName(c.proto), how);
}

}  // namespace

thread_local std::unique_ptr<Executor::Storage> Executor::spare_;

Executor::Executor(void* deviceStream, bool streamOrdered)
    : s_(spare_ ? std::move(spare_) : std::make_unique<Storage>()),
      plans_(s_->plans),
      deviceStream_(deviceStream),
      streamOrdered_(streamOrdered) {}

Executor::~Executor() {
  if (keepable()) keep();
  for (Lane& lane : lanes()) {  // the tasks first: they may point into their plan's scratch
    lane.tasks.clear();
    lane.ops.clear();
  }
  s_->used = 0;
  s_->index.clear();  // positions of this group's lanes (before their sort)
  for (auto& [comm, plan] : plans_) comm->returnPlan(std::move(plan));
  plans_.clear();
  if (!spare_) spare_ = std::move(s_);
}

// A group has a few lanes, found by a linear search; many (a large all-to-all by
// sends and receives) are indexed.
Executor::Lane& Executor::laneFor(const LaneId& id) {
  constexpr size_t kLinear = 16;
  if (s_->used <= kLinear) {
    for (Lane& lane : lanes())
      if (lane.id == id) return lane;
  } else {
    if (s_->index.empty())
      for (size_t i = 0; i < s_->used; ++i) s_->index.emplace(s_->lanes[i].id, i);
    auto it = s_->index.find(id);
    if (it != s_->index.end()) return s_->lanes[it->second];
    s_->index.emplace(id, s_->used);
  }
  if (s_->used == s_->lanes.size()) s_->lanes.emplace_back();
  Lane& lane = s_->lanes[s_->used++];
  lane.id = id;
  lane.head = 0;
  return lane;
}

CommPlan& Executor::planOf(Communicator& comm, void* stream) {
  for (auto& [c, p] : plans_)
    if (c == &comm) return *p;
  plans_.emplace_back(&comm, comm.takePlan(stream));
  return *plans_.back().second;
}

bool Executor::keepable() const {
  if (!finished_ || !key_ || ops_ != 1 || ordered_ || s_->used == 0 || !plans_.front().second->repeatable())
    return false;
  for (size_t i = 0; i < s_->used; ++i)
    for (const auto& t : s_->lanes[i].tasks)
      if (!t->reusable()) return false;
  return true;
}

void Executor::keep() {
  std::unique_ptr<KeptCall> k = kept_ ? std::move(kept_) : std::make_unique<KeptCall>();
  k->key = *key_;
  k->choice = choice_;
  k->lanes.resize(s_->used);
  for (size_t i = 0; i < s_->used; ++i) {
    Lane& lane = s_->lanes[i];
    k->lanes[i].id = std::get<1>(lane.id);
    k->lanes[i].index = std::get<2>(lane.id);
    k->lanes[i].tasks.swap(lane.tasks);
    k->lanes[i].ops.swap(lane.ops);
  }
  auto& [comm, plan] = plans_.front();
  k->plan = std::move(plan);
  plans_.clear();
  comm->keepCall(std::move(k));
}

bool Executor::runAgain(Communicator& comm, const OpDesc& op) {
  std::optional<KeptCall::Key> key;
  if (!deviceStream_ && plans_.empty() && comm.hasKeptCall()) key = KeptCall::keyOf(op);
  if (!key) return false;
  std::unique_ptr<KeptCall> k = comm.takeKeptCall();
  if (!k) return false;
  if (!(k->key == *key)) {  // another call: it plans, and keeps its own
    comm.returnPlan(std::move(k->plan));
    return false;
  }
  comm.failIfStopped();
  plans_.emplace_back(&comm, std::move(k->plan));
  for (KeptCall::Lane& kl : k->lanes) {
    Lane& lane = laneFor({&comm, kl.id, kl.index});
    lane.order = &plans_.back().second->order();
    lane.tasks.swap(kl.tasks);
    lane.ops.swap(kl.ops);
    for (auto& t : lane.tasks) t->rearm();
  }
  key_ = key;
  choice_ = k->choice;
  kept_ = std::move(k);
  firstFn_ = op.fn;
  ops_ = 1;
  logCall(comm, op, choice_, "kept");
  progressAndLog();
  return true;
}

void Executor::add(Communicator& comm, const OpDesc& op) {
  // Stream-ordered: the caller's stream of this communicator's operations (group.cc
  // gives each communicator one; stream 0 is the legacy stream).
  void* stream = streamOrdered_ ? opStream(op) : deviceStream_;
  CommPlan& plan = planOf(comm, stream);  // every communicator of the group takes part, even with nothing to move
  if (!firstFn_) firstFn_ = op.fn;
  ++ops_;
  if (ops_ > 1) key_.reset();
  if (op.count == 0) return;  // nothing to keep either
  if (ops_ == 1 && !deviceStream_) key_ = KeptCall::keyOf(op);
  algorithms::CollectiveOp c;
  c.kind = op.kind == OpKind::kSend   ? algorithms::CollectiveOp::Kind::kSend
           : op.kind == OpKind::kRecv ? algorithms::CollectiveOp::Kind::kRecv
                                      : algorithms::CollectiveOp::Kind::kCollective;
  c.coll = opCollective(op);
  c.fn = op.fn;
  c.sendbuff = op.sendbuff;
  c.recvbuff = op.recvbuff;
  c.count = op.count;
  c.type = op.type;
  c.root = op.root;
  if (reduces(op)) c.op = comm.redops().opFor(op, streamOrdered_);  // a kernel reads a device scalar itself
  c.bytes = opBytes(op, comm.nranks());
  // Device-memory algorithms for collectives, and for sends and receives when they
  // run as kernels on the caller's stream; else a send or receive on device memory is
  // point-to-point work as on host memory, its data moved by GPUDirect RDMA puts.
  bool device = stream && (c.kind == algorithms::CollectiveOp::Kind::kCollective || streamOrdered_) &&
                (streamOrdered_ || device::isDevicePointer(op.sendbuff) || device::isDevicePointer(op.recvbuff));
  // The tuner's choice; throws when NCCL_ALGO / NCCL_PROTO exclude every candidate.
  algorithms::Choice choice = comm.choose(c.coll, c.bytes, device, device && streamOrdered_);
  if (ops_ == 1) choice_ = choice;
  logCall(comm, op, choice, "planned");
  int index = plan.order().add(op, comm.rank(), comm.nranks());
  // The pairwise all-to-all copies an in-place input when it plans (before the group
  // runs), so it cannot wait for an earlier collective that writes that input.
  size_t all = sendBytes(op, comm.nranks());
  auto s = reinterpret_cast<uintptr_t>(op.sendbuff), r = reinterpret_cast<uintptr_t>(op.recvbuff);
  STRATA_REQUIRE(!(c.coll == algorithms::Collective::kAllToAll && s < r + all && r < s + all &&
                   plan.order().readsEarlierWrites(index)),
                 ncclInvalidUsage,
                 "%s: rank %d: an in-place all-to-all in the same group as an earlier collective that writes its buffer "
                 "is not supported (Strata reads an in-place all-to-all's input when the group is planned); end the "
                 "group before it, or give it separate input and output buffers",
                 op.fn, comm.rank());
  plan.beginOp(index);
  choice.algorithm->plan(plan, c, choice.proto);
  plan.beginOp(-1);
}

void Executor::openAndMake() {
  for (auto& [comm, plan] : plans_) comm->failIfStopped();
  for (auto& [comm, plan] : plans_) plan->matchSelfCopies();
  for (auto& [comm, plan] : plans_) plan->listen();
  for (auto& [comm, plan] : plans_) plan->connect();
  for (auto& [comm, plan] : plans_)
    for (CommPlan::Pending& p : plan->pending()) {
      Lane& lane = laneFor({comm, p.lane.id, p.lane.index});
      lane.order = &plan->order();
      lane.tasks.push_back(p.make(*plan));
      lane.ops.push_back(p.op);
      if (p.op >= 0) lane.order->taskAdded(p.op);
    }
  // Lanes progress in the order of their ids, whatever order they were planned in.
  std::sort(lanes().begin(), lanes().end(), [](const Lane& a, const Lane& b) { return a.id < b.id; });
  // Stream-ordered tasks only enqueue work, and the stream runs it in that order: they
  // launch in lane order on every rank alike (collective kernels and point-to-point
  // kernels of one group in the same order everywhere, or two ranks could each wait
  // in a kernel for one the other queued behind its own), never held back for an
  // earlier operation's data. Within a group NCCL defines no order between them.
  for (auto& [comm, plan] : plans_) {
    plan->order().start();
    ordered_ = ordered_ || (!streamOrdered_ && plan->order().ordered());
  }
}

void Executor::run() {
  if (plans_.empty()) return;
  try {
    openAndMake();
  } catch (const Error& e) {  // opening links: say which call it was for
    failAll(e.code(), std::string(firstFn_ ? firstFn_ : "ncclGroupEnd") + ": " + e.what());
  }
  progressAndLog();
}

void Executor::progressAndLog() {
  // NCCL_DEBUG_SUBSYS=NET: what the transports moved for this group (counters of the process).
  bool countNet = logEnabled(LogLevel::kInfo, kSubsysNet);
  std::vector<transport::Activity> before;
  if (countNet) before = transport::activity();
  polling_ = transport::needsPolling();
  progressAll();
  finished_ = true;
  if (countNet) logActivity(before);
}

void Executor::logActivity(const std::vector<transport::Activity>& before) const {
  std::string moved = transport::describeActivity(before, transport::activity());
  if (moved.empty()) return;
  std::string more = ops_ > 1 ? format(" and %d more operations of the group", ops_ - 1) : "";
  STRATA_INFO(kSubsysNet, plans_.front().first->rank(), "NET counters, %s%s: %s (this process)",
              firstFn_ ? firstFn_ : "ncclGroupEnd", more.c_str(), moved.c_str());
}

void Executor::progressAll() {
  Communicator* first = plans_.front().first;
  Doorbell& bell = first->bell();
  bool multi = plans_.size() > 1;
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
      checkStopped();  // an abort on another thread rings the bell, and is seen here at once
      {
        Doorbell::Sleep sleep(bell);
        if (sweepOrFail()) {
          idle = 0;
          continue;
        }
        if (allDone_) return;
        if (polling_ || transport::needsPolling())
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

// Tasks the head lets begin early (algorithms::Task::overlaps), a few at most.
bool Executor::startOverlapping(Lane& lane) {
  bool moved = false;
  for (size_t i = lane.head; i + 1 < lane.tasks.size() && i - lane.head < kOverlap; ++i) {
    if (!lane.tasks[i]->overlaps(*lane.tasks[i + 1]) || (ordered_ && !lane.mayStart(i + 1))) break;
    moved |= lane.tasks[i + 1]->startEarly();
  }
  return moved;
}

bool Executor::sweep() {
  if (polling_) transport::progressBackground();  // no socket is active otherwise (links open before progress)
  bool moved = false;
  allDone_ = true;
  // What each lane's head can announce without waiting (an offer of memory to write
  // into, an exposure to read from) goes out before any lane makes a long copy, so
  // that peers start their copies at the same time as this rank instead of after it.
  // A collective that shares memory with an earlier one waits for it (OpOrder).
  // The tasks behind a head that overlap it go with it: a transport may post their
  // offers as one grouped receive (PutReceiver::tryOffer).
  for (Lane& lane : lanes())
    if (!lane.idle() && (!ordered_ || lane.mayStart(lane.head))) {
      moved |= lane.tasks[lane.head]->startEarly();
      moved |= startOverlapping(lane);
    }
  for (Lane& lane : lanes()) {
    while (!lane.idle() && (!ordered_ || lane.mayStart(lane.head))) {
      algorithms::Task& t = *lane.tasks[lane.head];
      moved |= t.progress();
      if (!t.done()) break;
      if (ordered_) lane.order->taskDone(lane.ops[lane.head]);
      ++lane.head;
    }
    moved |= startOverlapping(lane);
    if (!lane.idle()) allDone_ = false;
  }
  // Nothing moved: a rank waiting for peers to read its memory copies part of it for
  // them, where its core is its own (with more ranks than cores, the readers need it).
  for (size_t i = 0; !moved && i < s_->used; ++i) {
    Lane& lane = s_->lanes[i];
    if (!lane.idle() && !lane.comm()->oversubscribed() && (!ordered_ || lane.mayStart(lane.head)))
      moved = lane.tasks[lane.head]->helpWhileIdle();
  }
  if (allDone_ && transport::needsPolling())  // not done until the last socket sends are out
    for (auto& [comm, plan] : plans_)
      if (!comm->pool().flushed()) allDone_ = false;
  return moved;
}

void Executor::checkStopped() {
  for (Lane& lane : lanes()) {
    if (lane.idle() || !lane.comm()->abortRequested()) continue;
    const algorithms::Task& t = *lane.tasks[lane.head];
    failAll(ncclInvalidUsage,
            format("%s: rank %d: the communicator was aborted: %s", t.fn(), lane.comm()->rank(),
                   lane.comm()->stopReason().c_str()),
            Cause::kStopped);
  }
}

void Executor::checkHealth(double idleSec) {
  checkStopped();
  for (Lane& lane : lanes()) {
    if (lane.idle()) continue;
    Communicator& comm = *lane.comm();
    const algorithms::Task& t = *lane.tasks[lane.head];
    int peer = t.waitingOn();
    if (t.peerAborted()) {
      // A peer that finished its part leaves at once (its communicator's end aborts
      // its connections), maybe since the last sweep: what it stored first is taken
      // before judging, as for a peer that exited; and a task that sweep finished
      // without moving anything (its last wait was a completion) is not judged.
      if (sweepOrFail() || t.done()) return;
      // Whoever failed first told every rank why before it stopped (failAll).
      Bootstrap::FailureNote note;
      if (comm.bootstrap().takeFailure(&note, 0.1))
        failAll(ncclRemoteError, format("%s: rank %d: rank %d stopped the operation, after: %s", t.fn(), comm.rank(),
                                        peer, note.why.c_str()),
                Cause::kTold);
      std::string broke = t.connectionFailure();  // nobody said why: this rank's own network may have
      if (!broke.empty())
        failAll(ncclRemoteError,
                format("%s: rank %d: the connection with rank %d failed: %s", t.fn(), comm.rank(), peer, broke.c_str()),
                Cause::kHere, peer);
      failAll(ncclRemoteError,
              format("%s: rank %d: rank %d stopped the operation (it failed, was aborted, or exited)", t.fn(),
                     comm.rank(), peer),
              Cause::kHere, peer);
    }
    // A peer process that died is found by its pid only where the connection cannot
    // tell: shared memory. A socket reports the exit as its end of stream, and the
    // dead peer's kernel may still be delivering what it sent.
    if (peer >= 0 && !transport::selectTransport(comm.peer(comm.rank()), comm.peer(peer)).peerAlive(comm.peer(peer))) {
      // Whatever it stored before exiting is there now, maybe since the last sweep: take it before judging.
      if (sweepOrFail() || t.done()) return;
      Bootstrap::FailureNote note;
      if (comm.bootstrap().takeFailure(&note, 0.1))  // it gave up (and said why) before it exited
        failAll(ncclRemoteError,
                format("%s: rank %d: rank %d (pid %d) exited while this rank waited for it, after: %s", t.fn(),
                       comm.rank(), peer, comm.peer(peer).pid, note.why.c_str()),
                Cause::kTold);
      failAll(ncclRemoteError,
              format("%s: rank %d: rank %d (pid %d) exited while this rank waited for it", t.fn(), comm.rank(), peer,
                     comm.peer(peer).pid),
              Cause::kHere, peer);
    }
    // A peer that exited before the data connection to it was made (or whose transport
    // cannot tell, such as a connection still being set up) is known by the bootstrap
    // connection this process keeps to it: closed by its end. Checked once the wait has
    // lasted a little, so that what a finished peer sent before exiting is taken first.
    if (peer >= 0 && idleSec > kExitedPeerSec && comm.bootstrap().peerGone(peer)) {
      if (sweepOrFail() || t.done()) return;
      Bootstrap::FailureNote note;
      if (comm.bootstrap().takeFailure(&note, 0.1))
        failAll(ncclRemoteError,
                format("%s: rank %d: rank %d (pid %d) exited while this rank waited for it, after: %s", t.fn(),
                       comm.rank(), peer, comm.peer(peer).pid, note.why.c_str()),
                Cause::kTold);
      failAll(ncclRemoteError,
              format("%s: rank %d: rank %d (pid %d) exited while this rank waited for it (its bootstrap connection "
                     "closed)", t.fn(), comm.rank(), peer, comm.peer(peer).pid),
              Cause::kHere, peer);
    }
    if (idleSec > config().timeoutSec) {
      // Ranks that wait on each other time out together: each says whom it waits for,
      // and the chain of reports leads to the one that is silent.
      std::string msg = format("%s: rank %d made no progress for %.0f s waiting for rank %d (STRATA_TIMEOUT)", t.fn(),
                               comm.rank(), idleSec, peer);
      for (auto& [c, plan] : plans_) c->bootstrap().tellFailure(msg, c == &comm ? peer : -1, 1.0, c == &comm ? peer : -1);
      if (peer >= 0)
        msg = format("%s: rank %d made no progress for %.0f s waiting for %s (STRATA_TIMEOUT)", t.fn(), comm.rank(),
                     idleSec, comm.bootstrap().describeWait(peer, 0.3).c_str());
      failAll(ncclSystemError, msg, Cause::kTold);
    }
  }
}

void Executor::failAll(ncclResult_t code, const std::string& msg, Cause cause, int culprit) {
  if (cause == Cause::kHere)  // told before the links close: a peer that sees them close finds the reason waiting
    for (auto& [comm, plan] : plans_) comm->bootstrap().tellFailure(msg, culprit, 1.0);
  for (auto& [comm, plan] : plans_) {
    comm->abortConnections();
    comm->setAsyncError(code);
  }
  STRATA_WARN(plans_.empty() ? -1 : plans_.front().first->rank(), "%s", msg.c_str());
  throw Error(code, msg);
}

}  // namespace strata::core
