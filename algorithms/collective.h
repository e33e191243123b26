// The collective operations, by kind, as the planner and tuner see them.
#pragma once

namespace strata::algorithms {

enum class Collective {
  kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce,  // ring schedules
  kAllToAll, kGather, kScatter, kSendRecv,                      // pairwise transfers
};

// NCCL's names: "AllReduce", "AllGather", ...
const char* collectiveName(Collective c);

}  // namespace strata::algorithms
