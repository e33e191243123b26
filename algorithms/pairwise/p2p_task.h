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
  // How the bytes move: slot-sized messages, one one-sided write into the
  // receiver's buffer, or one one-sided read of the sender's (the side whose
  // memory is reached registers it in `reg`).
  enum class Mode { kSlots, kPut, kGet } mode = Mode::kSlots;
  std::shared_ptr<transport::Registration> reg = nullptr;
  transport::Transfer kind = transport::Transfer::kIndependent;  // or kBalanced: both ends would copy anyway
};
std::unique_ptr<Task> makeP2pTask(const P2pTaskArgs& args);

}  // namespace strata::algorithms::pairwise
