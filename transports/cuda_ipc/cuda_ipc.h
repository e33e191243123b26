// The cuda_ipc transport: one device buffer per rank of a node, mapped by every
// other rank (CUDA IPC between processes; the pointer itself inside one process),
// so that kernels read peers' data straight over NVLink or PCIe peer-to-peer.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/peer_info.h"

namespace strata::transport::cuda_ipc {

struct Mesh {
  size_t bytes = 0;
  std::vector<void*> buffer;   // rank -> its buffer as this rank addresses it (its own included)
  std::vector<bool> imported;  // opened with CUDA IPC (closed at the end)
  void* own = nullptr;         // this rank's allocation (freed at the end)
  ~Mesh();
};

// All ranks of the communicator call this together (it exchanges with allGather).
// Returns the mesh when every rank mapped every other rank's buffer; otherwise null
// and *why says what stopped it (the same answer on every rank).
std::shared_ptr<Mesh> connect(int rank, const std::vector<PeerInfo>& peers, size_t bytes,
                              const std::function<std::vector<std::string>(const std::string&)>& allGather,
                              std::string* why);

}  // namespace strata::transport::cuda_ipc
