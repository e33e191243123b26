// Runs the operations of one group to completion: plans each into tasks,
// queues tasks that share a connection in call order ("lanes"), and
// progresses all lanes of all communicators together, so that one thread can
// drive several communicators and no order of sends and receives deadlocks.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "core/communicator.h"
#include "core/op.h"
#include "core/tasks.h"

namespace strata::core {

class Executor {
 public:
  // Plans one operation. Throws for invalid ops (the group is then dropped).
  void add(Communicator& comm, const OpDesc& op);
  // Connects what the plans need and runs everything; throws on failure,
  // after telling the peers of every communicator involved to stop.
  void run();

 private:
  struct Lane {
    Communicator* comm;
    std::vector<std::unique_ptr<Task>> tasks;  // in call order; tasks before `head` are done
    size_t head = 0;
    bool idle() const { return head == tasks.size(); }
  };
  struct SelfCopy {
    const char* fn;
    char* ptr;
    size_t bytes;
  };
  struct CommWork {
    std::set<Communicator::LinkKey> sendLinks, recvLinks;
    bool mesh = false;                           // a one-shot operation needs the mesh
    std::vector<SelfCopy> selfSends, selfRecvs;  // vectors: a deque allocates even when empty
  };

  // Plans (executor_plan.cc): each queues tasks on the lanes of the connections it uses.
  void addRing(Communicator& comm, const OpDesc& op);
  void addTree(Communicator& comm, const OpDesc& op);
  void addHierarchical(Communicator& comm, const OpDesc& op);
  void addLeaders(Communicator& comm, const OpDesc& op);
  std::pair<int, int> useNodeRing(Communicator& comm);
  void addOneShot(Communicator& comm, const OpDesc& op, bool ll);
  void addPairwise(Communicator& comm, const OpDesc& op);
  void addSend(Communicator& comm, const OpDesc& op, const char* buf, size_t bytes, int peer);
  void addRecv(Communicator& comm, const OpDesc& op, char* buf, size_t bytes, int peer);
  void matchSelfCopies();
  void progressAll();
  bool sweep();
  bool sweepOrFail();  // sweep(), failing every communicator on a protocol error
  void checkHealth(double idleSec);
  void checkStopped();  // fails the group when a communicator of it was stopped (abort, revoke)
  [[noreturn]] void failAll(ncclResult_t code, const std::string& msg);

  using LaneKey = std::tuple<Communicator*, int, int>;  // (communicator, kind, index)
  std::map<LaneKey, Lane> lanes_;
  std::map<Communicator*, CommWork> work_;
  // A task that needs links or the mesh: made once run() has opened them.
  struct Pending {
    LaneKey lane;
    std::function<std::unique_ptr<Task>()> make;
  };
  std::vector<Pending> pending_;
  bool allDone_ = false;
  const char* firstFn_ = nullptr;  // the first operation's API call, for messages
  std::vector<std::unique_ptr<char[]>> scratch_;
};

}  // namespace strata::core
