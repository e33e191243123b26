// Operations on device buffers, ordered on the caller's CUDA stream.
//
// The design (docs/design.md, "The GPU path"): at the group end the caller's stream
// gets, per stream, the copies of the inputs into pinned host staging, a host
// callback that tells the communicator's proxy thread the inputs are there, and a
// one-thread kernel that holds the stream until the proxy raises the operation's
// flag; then the copies of the outputs back to the device. The proxy runs the
// operations on the staging buffers through the host path (every algorithm and
// transport the host has), raises the flag and goes on. The call returns as soon
// as all of that is enqueued; anything after it on the stream sees the results.
#pragma once

#include <utility>
#include <vector>

#include "core/comm_handle.h"
#include "core/op.h"

namespace strata::core::device_path {

// True when the operation reads or writes device memory.
bool touchesDevice(const OpDesc& op);
// Enqueues a group (one callback and one wait per stream) and returns. Throws
// ncclInvalidUsage for a stream under CUDA graph capture.
void enqueue(const std::vector<std::pair<ncclComm*, OpDesc>>& ops);
// Waits until the communicator's device operations have finished (host side and
// the copies back), at most `waitSec` (default STRATA_TIMEOUT).
void drain(Communicator& comm, double waitSec = -1);
// At destroy or abort: drains (at most `waitSec`), then stops the communicator's proxy thread.
void release(Communicator& comm, double waitSec);

}  // namespace strata::core::device_path
