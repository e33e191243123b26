// Runs the operations of one group to completion: the tuner's algorithm plans
// each into tasks, tasks that share connections queue in call order ("lanes"),
// and all lanes of all communicators progress together, so that one thread can
// drive several communicators and no order of sends and receives deadlocks. The
// executor keeps lanes, progress, sleeping and health checks; it knows no
// algorithm and no transport by name.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "algorithms/algorithm.h"
#include "core/comm_plan.h"
#include "core/communicator.h"
#include "core/kept_call.h"
#include "core/op.h"
#include "transports/transport.h"

namespace strata::core {

class Executor {
 public:
  // `deviceStream`: where device-memory algorithms enqueue their kernels (the
  // device proxy's stream; null on a rank's own thread, which runs host memory).
  // `streamOrdered`: the streams are the callers', each communicator's work going to
  // its operations' stream (not `deviceStream`), and only algorithms that merely
  // enqueue on it may plan (the group's device operations run without the proxy).
  explicit Executor(void* deviceStream = nullptr, bool streamOrdered = false);
  ~Executor();  // hands each plan back to its communicator for the next call
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  // Plans one operation. Throws for invalid ops (the group is then dropped).
  void add(Communicator& comm, const OpDesc& op);
  // Connects what the plans need and runs everything; throws on failure,
  // after telling the peers of every communicator involved to stop.
  void run();
  // Runs a call of this one operation with the tasks its communicator kept from the
  // same call last time (kept_call.h), rearmed; false, having done nothing, when none
  // were kept for it (then add() and run() it). Throws as run() does.
  bool runAgain(Communicator& comm, const OpDesc& op);

 private:
  // Tasks of a lane in flight at once where they overlap (Task::overlaps): eight, the
  // most receives a network groups (transports/net/network.h kMaxRecvs).
  static constexpr size_t kOverlap = 7;
  using LaneId = std::tuple<Communicator*, uint64_t, int>;  // (communicator, lane id, index)
  struct Lane {
    LaneId id;
    Communicator* comm() const { return std::get<0>(id); }
    OpOrder* order = nullptr;  // of comm's collectives
    std::vector<std::unique_ptr<algorithms::Task>> tasks;  // in call order; tasks before `head` are done
    std::vector<int> ops;  // per task: its collective (OpOrder), or -1
    size_t head = 0;
    bool idle() const { return head == tasks.size(); }
    // Task i may begin: its collective waits for no earlier one (OpOrder).
    bool mayStart(size_t i) const { return order->ready(ops[i]); }
  };
  // The containers of a thread's executors, kept from one call to the next (lanes
  // emptied, not freed), so that a call in a loop allocates nothing for them.
  struct Storage {
    std::vector<Lane> lanes;  // the first `used` are this group's, in LaneId order
    size_t used = 0;
    std::map<LaneId, size_t> index;  // lane by id, for groups with many lanes
    std::vector<std::pair<Communicator*, std::unique_ptr<CommPlan>>> plans;  // in the order communicators joined
  };
  static thread_local std::unique_ptr<Storage> spare_;  // the thread's, between calls
  std::span<Lane> lanes() { return {s_->lanes.data(), s_->used}; }
  Lane& laneFor(const LaneId& id);
  CommPlan& planOf(Communicator& comm, void* stream);
  void openAndMake();
  void progressAll();
  bool sweep();
  bool startOverlapping(Lane& lane);
  bool sweepOrFail();  // sweep(), failing every communicator on a protocol error
  void progressAndLog();  // progressAll(), logging what the transports moved under NCCL_DEBUG_SUBSYS=NET
  bool keepable() const;  // this finished call can be kept for the same call again
  void keep();  // hands the plan and tasks to the communicator (KeptCall)
  void checkHealth(double idleSec);
  void logActivity(const std::vector<transport::Activity>& before) const;
  void checkStopped();  // fails the group when a communicator of it was stopped (abort, revoke)
  // Fails every communicator of the group. When the cause is here (not another
  // rank's report, already told, or a stop on this rank), first tells the other
  // ranks why, so that ranks which only see this one give up can name the cause.
  enum class Cause { kHere, kTold, kStopped };
  [[noreturn]] void failAll(ncclResult_t code, const std::string& msg, Cause cause = Cause::kHere, int culprit = -1);

  std::unique_ptr<Storage> s_;  // the thread's spare storage, or new where a call runs inside another
  std::vector<std::pair<Communicator*, std::unique_ptr<CommPlan>>>& plans_;
  bool ordered_ = false;  // some collective waits for an earlier one (else nothing is checked)
  void* deviceStream_;
  bool streamOrdered_;
  bool allDone_ = false;
  bool polling_ = false;  // some link needs this thread to move its data (sockets)
  const char* firstFn_ = nullptr;  // the first operation's API call, for messages
  int ops_ = 0;                    // operations added
  bool finished_ = false;          // every task is done
  std::optional<KeptCall::Key> key_;  // of the first operation, if it can be kept
  algorithms::Choice choice_;         // the first operation's algorithm
  std::unique_ptr<KeptCall> kept_;    // what runAgain took, to keep again
};

}  // namespace strata::core
