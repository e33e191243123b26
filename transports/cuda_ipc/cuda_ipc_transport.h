// GPUs of one node that may talk directly: device memory another rank maps (CUDA
// IPC between processes, the pointer itself between ranks of one process), so
// that kernels read and write peers' buffers over NVLink or PCIe peer-to-peer.
// It offers shared regions in device memory; it has no host-side slots.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "transports/transport.h"

namespace strata::transport::cuda_ipc {

class CudaIpcTransport final : public Transport, public RegionProvider {
 public:
  const char* name() const override { return "cuda_ipc"; }
  uint32_t capabilities() const override { return kDeviceMemory | kSharedRegions; }
  // Both ranks drive GPUs of one host, NCCL_P2P_DISABLE is unset, and their path in
  // the node's topology is within NCCL_P2P_LEVEL (GPUs the topology does not know:
  // CUDA decides when mapping).
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override;
  RegionProvider* regions() override { return this; }
  // One device buffer per rank, link and size, whoever maps it: every peer's region
  // of a rank is the same memory (the device mesh). Ranks of this process that map
  // it share its ownership: it is freed when the last of them lets go, so a late
  // flag store from a peer's kernel never lands in memory handed out again.
  SharedRegion createRegion(const ConnectRequest& req, size_t bytes, std::string* handle) override;
  SharedRegion attachRegion(const ConnectRequest& req, const std::string& handle) override;
  // Why canConnect refuses this pair ("" when it does not).
  static std::string refusal(const PeerInfo& self, const PeerInfo& peer);

 private:
  // A buffer of this process still alive at `pointer`, or null.
  std::shared_ptr<void> ownerOf(uintptr_t pointer);
  struct Owned {
    std::weak_ptr<void> buffer;
    std::string ipc;  // its CUDA IPC handle
  };
  std::mutex mu_;
  // Each rank's buffers, by (its connection pool, the link, bytes), and their pointers.
  std::map<std::tuple<uint64_t, uint64_t, size_t>, Owned> owned_;
};

}  // namespace strata::transport::cuda_ipc
