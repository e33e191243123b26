// A ring schedule on one channel, interpreted step by step over its two links.
#pragma once

#include <memory>

#include "algorithms/ring/ring_schedule.h"
#include "algorithms/task.h"
#include "device/cpu_reduce.h"
#include "nccl.h"

namespace strata::algorithms::ring {

struct RingTaskArgs {
  const char* fn;
  int rank;
  int prevRank;
  int nextRank;
  RingParams params;
  const char* sendbuff;
  char* recvbuff;
  ncclDataType_t type;
  device::ReduceOp op;
  transport::RecvConnection* fromPrev;  // null with one rank
  transport::SendConnection* toNext;
  bool streamOutput;  // the output is too large to stay cached: write it past the caches
  // One-sided writes for the messages that are plain copies (ring_task.cc says
  // which), on each link that has them; the output is registered for the
  // previous rank to write into.
  bool putsIn = false, putsOut = false;
  std::shared_ptr<transport::Registration> outputReg = nullptr;
};
std::unique_ptr<Task> makeRingTask(const RingTaskArgs& args);

}  // namespace strata::algorithms::ring
