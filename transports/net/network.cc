// The network seam's defaults.
#include "transports/net/network.h"

namespace strata::transport::net {

void* Network::regMrDmaBuf(void*, void*, size_t, int, uint64_t, int) {
  fail(ncclInvalidUsage, "network %s cannot register a dma-buf (its devices do not report NCCL_PTR_DMABUF)",
       name().c_str());
}

}  // namespace strata::transport::net
