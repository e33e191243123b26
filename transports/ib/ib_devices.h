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
  std::string pciPath;  // its PCI device in sysfs ("/sys/devices/pci0000:00/.../0000:3b:00.0"), "" unknown
  int port = 1;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_port_attr attr{};
  bool roce = false;  // Ethernet link layer
  int gidIndex = 0;
  ibv_gid gid{};
  int rateMbps = 0;
  bool relaxedOrdering = false;
  bool dmabuf = false;  // ibv_reg_dmabuf_mr works here (the library has it and the kernel supports dma-buf)
  uint64_t guid = 0;
  std::shared_ptr<MrCache> mrs;  // the device's, shared by its ports
};

// Whether messages on `p` split for adaptive routing (NCCL_IB_ADAPTIVE_ROUTING; unset:
// on InfiniBand, off on RoCE, as NCCL), read at each connection.
bool adaptiveRouting(const Port& p);

// Opens the ports once; empty (with the reason logged under NET) when verbs
// cannot be loaded, NCCL_IB_DISABLE is set, or no active port is selected.
const std::vector<Port>& ports();

}  // namespace strata::transport::ib
