// The units of work the executor progresses: a ring schedule on one channel,
// or one point-to-point transfer. Neither ever blocks.
#pragma once

#include <memory>

#include "algorithms/ring_schedule.h"
#include "device/cpu_reduce.h"
#include "transports/transport.h"

namespace strata::core {

class Task {
 public:
  virtual ~Task() = default;
  // Moves as far as possible without waiting; true if anything moved. Throws on a protocol error.
  virtual bool progress() = 0;
  virtual bool done() const = 0;
  // The rank this task waits for, and whether that rank gave up.
  virtual int waitingOn() const = 0;
  virtual bool peerAborted() const = 0;
  // The API call this task belongs to, for messages.
  virtual const char* fn() const = 0;
};

struct RingTaskArgs {
  const char* fn;
  int rank;
  int prevRank;
  int nextRank;
  algorithms::RingParams params;
  const char* sendbuff;
  char* recvbuff;
  ncclDataType_t type;
  device::ReduceOp op;
  transport::RecvConnection* fromPrev;  // null with one rank
  transport::SendConnection* toNext;
  bool streamOutput;  // the output is too large to stay cached: write it past the caches
};
std::unique_ptr<Task> makeRingTask(const RingTaskArgs& args);

struct P2pTaskArgs {
  const char* fn;
  int rank;
  int peer;
  char* buffer;
  size_t bytes;
  transport::SendConnection* send;  // exactly one of send / recv
  transport::RecvConnection* recv;
};
std::unique_ptr<Task> makeP2pTask(const P2pTaskArgs& args);

}  // namespace strata::core
