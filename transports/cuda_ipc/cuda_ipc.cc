#include "transports/cuda_ipc/cuda_ipc.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "device/gpu.h"

namespace strata::transport::cuda_ipc {

Mesh::~Mesh() {
  try {
    for (size_t r = 0; r < buffer.size(); ++r)
      if (imported[r]) device::ipcClose(buffer[r]);
    if (own) device::ipcFree(own);
  } catch (const Error& e) {
    STRATA_WARN(-1, "cuda_ipc: %s", e.what());
  }
}

namespace {

// What a rank publishes: whether it could export, its process, and the handle.
struct Offer {
  uint8_t ok = 0;
  uint64_t process = 0;
  uintptr_t pointer = 0;  // for ranks of the same process
  char handle[64] = {};
  char why[160] = {};
};

}  // namespace

std::shared_ptr<Mesh> connect(int rank, const std::vector<PeerInfo>& peers, size_t bytes,
                              const std::function<std::vector<std::string>(const std::string&)>& allGather,
                              std::string* why) {
  int n = static_cast<int>(peers.size());
  auto mesh = std::make_shared<Mesh>();
  mesh->bytes = bytes;
  mesh->buffer.assign(n, nullptr);
  mesh->imported.assign(n, false);
  Offer mine;
  std::string handle;
  void* own = nullptr;
  try {
    own = device::ipcAlloc(bytes, &handle);
    mine.ok = handle.size() == sizeof mine.handle;
    memcpy(mine.handle, handle.data(), std::min(handle.size(), sizeof mine.handle));
  } catch (const Error& e) {
    snprintf(mine.why, sizeof mine.why, "rank %d: %s", rank, e.what());
  }
  mine.process = peers[rank].processHash;
  mine.pointer = reinterpret_cast<uintptr_t>(own);
  std::vector<std::string> offers = allGather(std::string(reinterpret_cast<const char*>(&mine), sizeof mine));
  // Map every peer; then agree, so that all ranks use the mesh or none does.
  std::string failure;
  for (int r = 0; r < n && failure.empty(); ++r) {
    Offer o;
    memcpy(&o, offers[r].data(), sizeof o);
    if (!o.ok) {
      failure = o.why[0] ? o.why : "rank " + std::to_string(r) + " could not export its buffer";
    } else if (r == rank || o.process == mine.process) {
      mesh->buffer[r] = reinterpret_cast<void*>(o.pointer);
    } else {
      std::string reason;
      mesh->buffer[r] = device::ipcOpen(std::string(o.handle, sizeof o.handle), &reason);
      mesh->imported[r] = mesh->buffer[r] != nullptr;
      if (!mesh->buffer[r]) failure = "rank " + std::to_string(rank) + " cannot map rank " + std::to_string(r) + ": " + reason;
    }
  }
  Offer verdict;
  verdict.ok = failure.empty();
  snprintf(verdict.why, sizeof verdict.why, "%s", failure.c_str());
  for (const std::string& v : allGather(std::string(reinterpret_cast<const char*>(&verdict), sizeof verdict))) {
    Offer o;
    memcpy(&o, v.data(), sizeof o);
    if (!o.ok && why->empty()) *why = o.why;
  }
  mesh->own = own;
  if (why->empty()) return mesh;
  return nullptr;  // the mesh's destructor closes what was opened and frees `own`
}

}  // namespace strata::transport::cuda_ipc
