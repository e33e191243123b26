// Where a perf tool's buffers live and how it reaches them, as nccl-tests does
// it: real GPUs through the CUDA runtime (its own, not Strata's device layer),
// or Strata's simulated GPUs (STRATA_GPU_SIM), whose device memory comes from
// ncclMemAlloc and is host-addressable by the simulator's contract. Without
// either, buffers are host memory.
#pragma once

#include <cstddef>
#include <vector>

#include "nccl.h"

namespace strata::perf {

// GPUs to place ranks on: simulated ones when STRATA_GPU_SIM is set, else what
// the CUDA runtime sees (0 without a driver or in a build without CUDA).
int gpuCount();
void setDevice(int device);
// A non-blocking stream on the current device. For simulated GPUs, a handle of
// the tool's own, which the simulator takes for a stream made on first use.
void* streamCreate();
void streamDestroy(void* stream);
void copyToDevice(void* dst, const void* src, size_t bytes);
void copyToHost(void* dst, const void* src, size_t bytes);
void clearDevice(void* dst, size_t bytes);
// Waits for every operation enqueued on these ranks' streams. Simulated GPUs:
// Strata runs a host-memory operation only after the communicator's earlier
// device work, so one tiny host all-reduce per communicator is the wait.
void synchronize(const std::vector<ncclComm_t>& comms, const std::vector<void*>& streams);

}  // namespace strata::perf
