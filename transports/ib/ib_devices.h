// The InfiniBand / RoCE ports this process may use: every active port of every
// verbs device that NCCL_IB_HCA selects, opened once (one context and protection
// domain per device), with the GID it is addressed by and its registrations.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

#include "transports/ib/mr_cache.h"
#include "transports/ib/verbs_lib.h"

namespace strata::transport::ib {

struct Port {
  std::string device;  // e.g. mlx5_0
  int port = 1;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_port_attr attr{};
  bool roce = false;  // Ethernet link layer
  int gidIndex = 0;
  ibv_gid gid{};
  int rateMbps = 0;
  bool relaxedOrdering = false;
  uint64_t guid = 0;
  std::shared_ptr<MrCache> mrs;  // the device's, shared by its ports
};

// Opens the ports once; empty (with the reason logged under NET) when verbs
// cannot be loaded, NCCL_IB_DISABLE is set, or no active port is selected.
const std::vector<Port>& ports();

// The GID index RoCE traffic uses on a port: NCCL_IB_GID_INDEX, else the first
// non-zero GID of the RoCE version NCCL_IB_ROCE_VERSION_NUM asks for, else 0.
int chooseGidIndex(const Verbs& v, ibv_context* ctx, int port, const ibv_port_attr& attr);

}  // namespace strata::transport::ib
