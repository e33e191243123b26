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

inline void cpuRelax() { __builtin_ia32_pause(); }

}  // namespace

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
    for (auto& [comm, w] : work_) comm->failIfStopped();
    matchSelfCopies();
    for (auto& [comm, w] : work_) comm->listenLinks(w.recvLinks);
    for (auto& [comm, w] : work_)
      if (w.mesh) comm->listenMesh();
    for (auto& [comm, w] : work_) comm->connectLinks(w.sendLinks);
    for (auto& [comm, w] : work_)
      if (w.mesh) comm->connectMesh();
    for (Pending& p : pending_) {
      Lane& lane = lanes_[p.lane];
      lane.comm = std::get<0>(p.lane);
      lane.tasks.push_back(p.make());
    }
  } catch (const Error& e) {  // opening links: say which call it was for
    failAll(e.code(), std::string(firstFn_ ? firstFn_ : "ncclGroupEnd") + ": " + e.what());
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
      checkStopped();  // an abort on another thread rings the bell, and is seen here at once
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

void Executor::checkStopped() {
  for (auto& [key, lane] : lanes_) {
    if (lane.idle() || !lane.comm->abortRequested()) continue;
    const Task& t = *lane.tasks[lane.head];
    failAll(ncclInvalidUsage, format("%s: rank %d: the communicator was aborted: %s", t.fn(), lane.comm->rank(),
                                     lane.comm->stopReason().c_str()));
  }
}

void Executor::checkHealth(double idleSec) {
  checkStopped();
  for (auto& [key, lane] : lanes_) {
    if (lane.idle()) continue;
    Communicator& comm = *lane.comm;
    const Task& t = *lane.tasks[lane.head];
    int peer = t.waitingOn();
    if (t.peerAborted())
      failAll(ncclRemoteError, format("%s: rank %d: rank %d stopped the operation (it failed, was aborted, or "
                                      "saw another rank fail)",
                                      t.fn(), comm.rank(), peer));
    // A peer process that died is found by its pid only where the connection cannot
    // tell: shared memory. A socket reports the exit as its end of stream, and the
    // dead peer's kernel may still be delivering what it sent.
    if (peer >= 0 && transport::selectTransport(comm.peer(comm.rank()), comm.peer(peer)).sharesMemory() &&
        !processAlive(comm.peer(peer).pid)) {
      // Whatever it stored before exiting is there now, maybe since the last sweep: take it before judging.
      if (sweepOrFail()) return;
      failAll(ncclRemoteError, format("%s: rank %d: rank %d (pid %d) exited while this rank waited for it", t.fn(),
                                      comm.rank(), peer, comm.peer(peer).pid));
    }
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
