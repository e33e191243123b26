// A communicator's last call, kept planned. A training loop makes the same call
// again and again (the same collective, buffers and count); such a call rearms the
// tasks it made last time instead of choosing an algorithm, planning, opening links
// and making tasks anew. Only a call of one operation on host memory whose every
// task can rearm (algorithms::Task::rearm) is kept; anything else plans as before.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "algorithms/task.h"
#include "algorithms/tuner.h"
#include "core/comm_plan.h"
#include "core/op.h"

namespace strata::core {

struct KeptCall {
  // What makes two calls the same: the operation as called, and the configuration
  // its plan was made under (hence NCCL_ALGO / NCCL_PROTO).
  struct Key {
    OpKind kind;
    Collective coll;
    const void* sendbuff;
    const void* recvbuff;
    size_t count;
    int rawType;
    int op;
    int root;
    const void* config;
    bool operator==(const Key&) const = default;
  };
  // The key of a host-memory operation, or none where a call must plan each time:
  // a reduction the user created (a handle may be destroyed and made again with
  // another scalar).
  static std::optional<Key> keyOf(const OpDesc& op);

  struct Lane {
    uint64_t id;
    int index;
    std::vector<std::unique_ptr<algorithms::Task>> tasks;
    std::vector<int> ops;
  };
  Key key;
  algorithms::Choice choice;       // the tuner's, for the log
  std::unique_ptr<CommPlan> plan;  // the tasks may point into its scratch
  std::vector<Lane> lanes;         // in the executor's lane order
};

}  // namespace strata::core
