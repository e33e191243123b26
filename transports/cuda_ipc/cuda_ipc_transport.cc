#include "transports/cuda_ipc/cuda_ipc_transport.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "device/gpu.h"
#include "topology/local.h"
#include "topology/planner.h"

namespace strata::transport::cuda_ipc {
namespace {

// What the owner sends: its process, the pointer (for ranks of that process) and
// the CUDA IPC handle (for the others).
struct Handle {
  uint64_t process;
  uintptr_t pointer;
  uint64_t bytes;
  char ipc[64];
};

int gpuNode(const topology::System& sys, const PeerInfo& p) {
  for (int g : sys.ofType(topology::NodeType::kGpu))
    if (sys.node(g).id == p.busId) return g;
  return -1;
}

template <typename F>
std::shared_ptr<void> owning(void* p, F release) {
  return std::shared_ptr<void>(p, [release](void* q) {
    try {
      release(q);
    } catch (const Error& e) {
      STRATA_WARN(-1, "cuda_ipc: %s", e.what());
    }
  });
}

}  // namespace

std::string CudaIpcTransport::refusal(const PeerInfo& self, const PeerInfo& peer) {
  if (!self.sameHost(peer)) return "ranks on different hosts";
  if (self.device < 0 || peer.device < 0) return "a rank has no GPU";
  if (device::gpuCount() == 0) return device::gpuUnavailableReason();
  if (self.sameProcess(peer) && !device::canAccessPeer(self.device, peer.device))
    return format("GPUs %d and %d of this process have no peer access (cudaDeviceCanAccessPeer)", self.device,
                  peer.device);
  const Config& cfg = config();
  if (cfg.p2pDisable) return "NCCL_P2P_DISABLE=1";
  topology::PlanOptions opts;
  if (!cfg.p2pLevel.empty() && !topology::parsePathType(cfg.p2pLevel, &opts.p2pLevel))
    return "NCCL_P2P_LEVEL=" + cfg.p2pLevel + " is not a path class (LOC NVL NVB PIX PXB PHB SYS)";
  auto topo = topology::localTopology(cfg.topoFile);
  int a = gpuNode(topo->sys, self), b = gpuNode(topo->sys, peer);
  if (a < 0 || b < 0 || a == b) return "";  // unknown to the topology (no NVML), or one GPU: CUDA decides
  if (topology::hopBetween(topo->sys, a, b, opts).staged)
    return format("GPUs %s and %s are %s apart, beyond NCCL_P2P_LEVEL %s or without peer access", self.busId,
                  peer.busId, topology::pathTypeName(topo->sys.path(a, b).type), topology::pathTypeName(opts.p2pLevel));
  return "";
}

bool CudaIpcTransport::canConnect(const PeerInfo& self, const PeerInfo& peer) const {
  return refusal(self, peer).empty();
}

SharedRegion CudaIpcTransport::createRegion(const ConnectRequest& req, size_t bytes, std::string* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = owned_.begin(); it != owned_.end();)  // communicators gone
    it = it->second.buffer.expired() ? owned_.erase(it) : std::next(it);
  Owned& o = owned_[{req.scope, req.link, bytes}];
  std::shared_ptr<void> buffer = o.buffer.lock();
  if (!buffer) {
    device::OnDevice on(req.self->device);
    buffer = owning(device::ipcAlloc(bytes, &o.ipc), [](void* q) { device::ipcFree(q); });
    // Zero-filled, as regions are promised: cudaMalloc hands back memory an earlier
    // communicator of this process used, and its flags would pass a new one's waits.
    device::memsetSync(buffer.get(), 0, bytes);
    o.buffer = buffer;
  }
  Handle h{req.self->processHash, reinterpret_cast<uintptr_t>(buffer.get()), bytes, {}};
  memcpy(h.ipc, o.ipc.data(), std::min(o.ipc.size(), sizeof h.ipc));
  handle->assign(reinterpret_cast<const char*>(&h), sizeof h);
  return SharedRegion{buffer.get(), bytes, buffer, nullptr};
}

std::shared_ptr<void> CudaIpcTransport::ownerOf(uintptr_t pointer) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, o] : owned_) {
    std::shared_ptr<void> b = o.buffer.lock();
    if (b && reinterpret_cast<uintptr_t>(b.get()) == pointer) return b;
  }
  return nullptr;
}

SharedRegion CudaIpcTransport::attachRegion(const ConnectRequest& req, const std::string& handle) {
  Handle h;
  STRATA_REQUIRE(handle.size() == sizeof h, ncclInternalError, "cuda_ipc: malformed handle from rank %d",
                 req.peer->rank);
  memcpy(static_cast<void*>(&h), handle.data(), sizeof h);
  device::OnDevice on(req.self->device);
  if (h.process == req.self->processHash) {  // the same address space: the pointer itself, peer access on
    std::string why;
    STRATA_REQUIRE(device::enablePeerAccess(req.peer->device, &why), ncclUnhandledCudaError,
                   "cuda_ipc: rank %d (GPU %d) cannot reach rank %d's GPU %d: %s", req.self->rank, req.self->device,
                   req.peer->rank, req.peer->device, why.c_str());
    std::shared_ptr<void> owner = ownerOf(h.pointer);
    STRATA_REQUIRE(owner, ncclInternalError, "cuda_ipc: rank %d's region for rank %d is gone before it was mapped",
                   req.peer->rank, req.self->rank);
    return SharedRegion{owner.get(), h.bytes, owner, nullptr};
  }
  std::string why;
  void* p = device::ipcOpen(std::string(h.ipc, sizeof h.ipc), &why);
  STRATA_REQUIRE(p, ncclUnhandledCudaError, "cuda_ipc: rank %d cannot map rank %d's device memory: %s",
                 req.self->rank, req.peer->rank, why.c_str());
  return SharedRegion{p, h.bytes, owning(p, [](void* q) { device::ipcClose(q); }), nullptr};
}

}  // namespace strata::transport::cuda_ipc
