// Runs the operations of one group to completion: plans each into tasks,
// queues tasks that share a connection in call order ("lanes"), and
// progresses all lanes of all communicators together, so that one thread can
// drive several communicators and no order of sends and receives deadlocks.
#pragma once

#include <deque>
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
    std::deque<std::unique_ptr<Task>> tasks;
  };
  struct SelfCopy {
    const char* fn;
    char* ptr;
    size_t bytes;
  };
  struct CommWork {
    std::set<int> sendPeers, recvPeers;
    std::deque<SelfCopy> selfSends, selfRecvs;
  };

  void addRing(Communicator& comm, const OpDesc& op);
  void addPairwise(Communicator& comm, const OpDesc& op);
  void addSend(Communicator& comm, const OpDesc& op, const char* buf, size_t bytes, int peer);
  void addRecv(Communicator& comm, const OpDesc& op, char* buf, size_t bytes, int peer);
  void matchSelfCopies();
  void progressAll();
  bool sweep();
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
  bool allDone_ = false;
  std::vector<std::unique_ptr<char[]>> scratch_;
};

}  // namespace strata::core
