// The host's watch over device-driven kernels. A kernel waits for its peers with no
// bound (as NCCL's do), so a peer process that dies would hold it, and every stream
// and call ordered after it, for ever. One thread per process looks every 100 ms at
// the watched communicators' peers in other processes; for the first that has exited
// it calls that communicator's `stop`, which raises the stop word its kernels poll
// while they wait. A kernel that waits then gives up (poisoning every region it
// reaches, which releases the other ranks' kernels too); a kernel that does not wait
// finishes as it would, so a peer that exits once its part is done fails nothing.
#pragma once

#include <functional>
#include <memory>

namespace strata::core {

struct DeviceWatched {
  std::function<int()> exitedPeer;  // a watched peer that has exited, or -1
  std::function<void(int)> stop;    // called once, with the first such peer
};

// Watches until the handle is released; releasing it waits for a look under way, so
// neither function runs afterwards.
std::shared_ptr<void> watchDevicePeers(DeviceWatched w);

}  // namespace strata::core
