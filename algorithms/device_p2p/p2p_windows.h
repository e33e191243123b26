// A group's sends and receives on device buffers, split into kernels that each
// hold at most KernelP2p::kMaxOps transfers, without letting two ranks wait on
// each other: window k takes, on every lane (a peer and a direction), the lane's
// transfers with index [k W, (k+1) W) in call order, W = kMaxOps / lanes.
//
// Why no deadlock, whatever each rank's W (ranks count their own lanes): NCCL
// pairs the i-th send from a to b with b's i-th receive from a, so a transfer
// has the same index i on both ends. Suppose every transfer with a smaller index
// has completed everywhere. On each end, the window holding transfer i follows
// windows holding only smaller indices (done), and in its kernel the lane's earlier
// transfers (smaller indices) are done too: both ends move it, so it completes.
// Windows cut by call order alone would deadlock (a rank's first kernel waiting
// for a peer's receive that sits in that peer's second kernel, behind a send this
// rank makes only in its own second kernel).
#pragma once

#include <vector>

#include "device/kernel_p2p.h"

namespace strata::algorithms::device_p2p {

// `base` with its transfers cleared, one copy per window holding `ops` as above
// (none for no transfers); each window's blocksPerLane fits `room` blocks.
std::vector<device::KernelP2p> windowsOf(const device::KernelP2p& base,
                                         const std::vector<device::KernelP2p::Op>& ops, int room);

}  // namespace strata::algorithms::device_p2p
