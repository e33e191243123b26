// The InfiniBand / RoCE network: Strata's Network (transports/net/network.h) over
// verbs reliable-connected queue pairs, with NCCL's protocol shape:
//  - setup over TCP: the sender connects to the receiver's listener and sends
//    its queue pair numbers, GID and the address and rkey of its FIFO; the
//    receiver brings its queue pairs up and answers with its own; the sender
//    brings its up and says it is ready. The TCP stream stays open: its end of
//    stream tells a waiting receiver that the sender's process is gone.
//  - each receive is posted to the sender by an RDMA write of a FIFO entry
//    (buffer address, rkey, size, tag, sequence) into the sender's FIFO;
//  - the sender writes the message straight into that buffer with RDMA write
//    with immediate (the immediate is the size) on queue pair `i %
//    NCCL_IB_QPS_PER_CONNECTION`, or split over all of them
//    (NCCL_IB_SPLIT_DATA_ON_QPS=1); the receive completes on the immediates.
#pragma once

#include <cstdint>

#include "transports/net/network.h"

namespace strata::transport::ib {

// The IB network of this process, or null when there is none (no verbs library,
// no active port, NCCL_IB_DISABLE=1, or NCCL_NET names another network).
net::Network* ibNetwork();

// What the IB network did in this process (logged under NCCL_DEBUG_SUBSYS=NET
// when a connection closes): messages and bytes, RDMA writes of data and of
// FIFO entries, and registrations made versus served from the cache.
struct Counters {
  uint64_t messagesSent = 0, bytesSent = 0, dataWrites = 0, fifoWrites = 0, messagesReceived = 0;
  uint64_t registrations = 0, registrationHits = 0;
  uint64_t dmabufRegistrations = 0, flushes = 0;  // GPUDirect: dma-buf registrations, flush reads
};
Counters counters();

}  // namespace strata::transport::ib
