// What the IB network's unit tests share about the user-space verbs device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/config.h"
#include "transports/ib/ib_network.h"
#include "verify/reference.h"
#include "network_link.h"

namespace strata::transport::ib {

// Byte i of buffer `tag`'s data (the reference module's, unique per tag and position
// as far as 8 bits allow: a chunk at the wrong offset does not match it).
inline uint8_t byteOf(int tag, size_t i) { return static_cast<uint8_t>(verify::movedValue(tag, i, ncclUint8)); }

// RDMA writes a message part of `bytes` takes: the port's max_msg_sz at most each
// (the emulator's, STRATA_VERBS_EMU_MAX_MSG: the .small_max_msg variant sets 64 KiB).
inline uint64_t writesFor(size_t bytes) {
  const char* v = getenv("STRATA_VERBS_EMU_MAX_MSG");
  size_t most = v ? static_cast<size_t>(atoll(v)) : (size_t(1) << 30);
  return bytes == 0 ? 1 : (bytes + most - 1) / most;
}

// A connected pair over the emulator.
struct Link : net::Link {
  Link() : net::Link(ibNetwork()) {}
};

// NCCL_IB_QPS_PER_CONNECTION=qps and NCCL_IB_SPLIT_DATA_ON_QPS=1 while it connects.
struct SplitQps {
  explicit SplitQps(int qps) {
    setenv("NCCL_IB_QPS_PER_CONNECTION", std::to_string(qps).c_str(), 1);
    setenv("NCCL_IB_SPLIT_DATA_ON_QPS", "1", 1);
    reloadConfig();
  }
};
// A pair whose messages are split over `qps` queue pairs; the configuration is
// restored once it is connected.
struct SplitLink : private SplitQps, Link {
  explicit SplitLink(int qps) : SplitQps(qps) {
    unsetenv("NCCL_IB_QPS_PER_CONNECTION");
    unsetenv("NCCL_IB_SPLIT_DATA_ON_QPS");
    reloadConfig();
  }
};

}  // namespace strata::transport::ib
