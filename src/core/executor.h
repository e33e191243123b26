// Runs the operations of one group to completion: plans each into tasks,
// queues tasks that share a connection in call order ("lanes"), and
// progresses all lanes of all communicators together, so that one thread can
// drive several communicators and no order of sends and receives deadlocks.
#pragma once

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
    std::set<int> sendPeers, recvPeers;
    std::vector<SelfCopy> selfSends, selfRecvs;  // vectors: a deque allocates even when empty
  };

  void addRing(Communicator& comm, const OpDesc& op);
  void addOneShot(Communicator& comm, const OpDesc& op, bool ll);
  void addPairwise(Communicator& comm, const OpDesc& op);
  void addSend(Communicator& comm, const OpDesc& op, const char* buf, size_t bytes, int peer);
  void addRecv(Communicator& comm, const OpDesc& op, char* buf, size_t bytes, int peer);
  void matchSelfCopies();
  void progressAll();
  bool sweep();
  bool sweepOrFail();  // sweep(), failing every communicator on a protocol error
  void checkHealth(double idleSec);
  [[noreturn]] void failAll(ncclResult_t code, const std::string& msg);

  std::map<std::tuple<Communicator*, int, int>, Lane> lanes_;
  struct PendingP2p {  // becomes a task once run() has connected the pair
    Communicator* comm;
    int kind;
    P2pTaskArgs args;
  };

  std::map<Communicator*, CommWork> work_;
  std::vector<PendingP2p> pendingP2p_;
  struct PendingOneShot {  // becomes a task once run() has opened the mesh
    Communicator* comm;
    OneShotArgs args;
    bool ll;  // over the LL protocol rather than the mesh FIFOs
  };
  std::vector<PendingOneShot> pendingOneShot_;
  bool allDone_ = false;
  std::vector<std::unique_ptr<char[]>> scratch_;
};

}  // namespace strata::core
