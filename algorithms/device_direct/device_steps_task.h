// A device-memory collective as a list of steps: each enqueues kernels on the
// device stream, and the next starts once every rank's kernels of this step
// have finished (this rank's stream is idle, then a token to and from every
// peer over small host links). Never blocks: it polls the stream and the links.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "algorithms/task.h"

namespace strata::algorithms::device_direct {

struct DeviceStepsArgs {
  const char* fn;
  int rank;
  void* stream;
  std::vector<std::function<void()>> steps;
  std::vector<transport::SendConnection*> to;  // by rank; null for this rank
  std::vector<transport::RecvConnection*> from;
};
std::unique_ptr<Task> makeDeviceStepsTask(DeviceStepsArgs args);

}  // namespace strata::algorithms::device_direct
