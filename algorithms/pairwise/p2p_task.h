// One point-to-point transfer, in slot-sized messages.
#pragma once

#include <memory>

#include "algorithms/task.h"

namespace strata::algorithms::pairwise {

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

}  // namespace strata::algorithms::pairwise
