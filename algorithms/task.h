// The units of work the executor progresses. A task never blocks: it moves as
// far as its connections allow and says what it waits for.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transports/transport.h"

namespace strata::algorithms {

class Task {
 public:
  virtual ~Task() = default;
  // Moves as far as possible without waiting; true if anything moved. Throws on a protocol error.
  virtual bool progress() = 0;
  virtual bool done() const = 0;
  // The rank this task waits for, and whether that rank gave up.
  virtual int waitingOn() const = 0;
  virtual bool peerAborted() const = 0;
  // When it did because this rank's own connection failed: the transport's error.
  virtual std::string connectionFailure() const { return {}; }
  // The API call this task belongs to, for messages.
  virtual const char* fn() const = 0;
  // True when `next`, the task after this one in its lane, may begin before this one
  // is done: both are receives that wait on nothing but their own transfer, and
  // this one has begun. The executor then calls next.startEarly().
  virtual bool overlaps(const Task& next) const {
    (void)next;
    return false;
  }
  // Begins without waiting and without completing anything (completions stay in lane
  // order): posts what peers wait for, such as an offer or an exposure of memory.
  // The executor calls it on every lane's head before any lane progresses, and on
  // the tasks behind a head that overlaps them. True if anything was posted.
  virtual bool startEarly() { return false; }
  // Work that only speeds up a peer (copying part of what the peer reads), for a
  // sweep in which nothing else on this rank moved. True if it did any.
  virtual bool helpWhileIdle() { return false; }
  // True when rearm() can make this task, once done, run its operation again: the
  // same call made again (same buffers, count, type, reduction) then reuses the task
  // instead of planning (core/kept_call.h). Only a task that depends on nothing but
  // its operation's arguments, its links and its algorithm's state says so: not one
  // that uses registered memory, exposures or scratch made for one call.
  virtual bool reusable() const { return false; }
  virtual void rearm() {}
};

// What a task last waited for: one rank and one connection. Only that
// connection's peer giving up ends the task: a peer that finished its part and
// destroyed its communicator has aborted its connections, but a task that no
// longer needs that peer must not fail for it.
struct Blocker {
  int peer = -1;
  const transport::SendConnection* send = nullptr;
  const transport::RecvConnection* recv = nullptr;
  void on(int p, const transport::SendConnection* c) {
    peer = p;
    send = c;
    recv = nullptr;
  }
  void on(int p, const transport::RecvConnection* c) {
    peer = p;
    recv = c;
    send = nullptr;
  }
  bool aborted() const { return send ? send->peerAborted() : recv && recv->peerAborted(); }
  std::string failure() const { return send ? send->failure() : recv ? recv->failure() : std::string(); }
};

// Runs a list of phases over pieces of one operation as a pipeline: phase k of
// piece p starts once phase k-1 of piece p and phase k of piece p-1 are done
// (each phase keeps its own connections, so pieces stay in order on every one).
// tasks[p][k] is piece p's phase k.
std::unique_ptr<Task> makePipelineTask(std::vector<std::vector<std::unique_ptr<Task>>> tasks);

}  // namespace strata::algorithms
