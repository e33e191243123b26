// Strata's TCP network between nodes ("Socket", as NCCL names its own), behind
// the same seam as InfiniBand and NCCL's net plugins (transports/net/network.h):
// the net transport runs Strata's connections over it. Each connection is
// NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD non-blocking TCP streams
// (stream_comm.h) to the receiving process's one data port (data_listener.h), on
// the interface NCCL_SOCKET_IFNAME selects; nothing blocks on the peer and no
// helper thread runs.
#pragma once

#include "transports/net/network.h"

namespace strata::transport::socket {

// The process's TCP network (always there).
net::Network* socketNetwork();

}  // namespace strata::transport::socket
