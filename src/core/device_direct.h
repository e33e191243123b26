// Collectives GPU to GPU inside one node, over the cuda_ipc mesh: the proxy thread
// of the device path (device_path.h) runs them on its own stream with kernels that
// read every peer's staging buffer once, instead of staging through host memory.
#pragma once

#include <utility>
#include <vector>

#include "core/comm_handle.h"
#include "core/op.h"

namespace strata::core::device_direct {

// Bytes of each rank's mapped staging buffer (two halves: inputs, partial results).
constexpr size_t kMeshBytes = 32 << 20;

// At init, collectively: on a communicator of one node whose ranks all drive GPUs
// that may talk directly (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL and the topology agree),
// maps every rank's staging buffer. Logs why not otherwise.
void setup(Communicator& comm);
// True when the proxy can run the group GPU to GPU: one communicator with a mesh,
// and all-reduce, all-gather, reduce-scatter, broadcast and reduce on device buffers.
bool fits(const std::vector<std::pair<ncclComm*, OpDesc>>& ops);
// Runs the group (on the proxy thread); `stream` is the proxy's, made on first use.
void run(const std::vector<std::pair<ncclComm*, OpDesc>>& ops, void** stream);

}  // namespace strata::core::device_direct
