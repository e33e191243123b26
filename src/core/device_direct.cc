#include "core/device_direct.h"

#include <algorithm>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "core/communicator.h"
#include "core/group.h"
#include "device/dtypes.h"
#include "device/gpu.h"
#include "topology/local.h"
#include "topology/planner.h"
#include "transports/cuda_ipc/cuda_ipc.h"

namespace strata::core::device_direct {
namespace {

using algorithms::Collective;

// Why the ranks' GPUs may not talk directly, from what every rank knows alike
// (peer info, the configuration, the node's topology); "" when they may.
std::string refusal(const Communicator& comm) {
  if (comm.nranks() < 2) return "one rank";
  if (comm.layout().numNodes() != 1) return "ranks on several nodes";
  for (int r = 0; r < comm.nranks(); ++r)
    if (comm.peer(r).device < 0) return "rank " + std::to_string(r) + " has no GPU";
  const Config& cfg = config();
  if (cfg.p2pDisable) return "NCCL_P2P_DISABLE=1";
  topology::PlanOptions opts;
  if (!cfg.p2pLevel.empty() && !topology::parsePathType(cfg.p2pLevel, &opts.p2pLevel))
    return "NCCL_P2P_LEVEL=" + cfg.p2pLevel + " is not a path class (LOC NVL NVB PIX PXB PHB SYS)";
  auto topo = topology::localTopology(cfg.topoFile);
  auto gpuNode = [&](int r) {
    for (int g : topo->sys.ofType(topology::NodeType::kGpu))
      if (topo->sys.node(g).id == comm.peer(r).busId) return g;
    return -1;
  };
  for (int a = 0; a < comm.nranks(); ++a)
    for (int b = 0; b < comm.nranks(); ++b) {
      int ga = gpuNode(a), gb = gpuNode(b);
      if (ga < 0 || gb < 0 || ga == gb) continue;  // unknown to the topology (no NVML): CUDA decides
      topology::Hop h = topology::hopBetween(topo->sys, ga, gb, opts);
      if (h.staged)
        return format("ranks %d and %d: GPUs %s and %s are %s apart, beyond NCCL_P2P_LEVEL %s or without peer access",
                      a, b, comm.peer(a).busId, comm.peer(b).busId, topology::pathTypeName(topo->sys.path(ga, gb).type),
                      topology::pathTypeName(opts.p2pLevel));
    }
  return "";
}

// A barrier of the communicator's ranks through the host path (a 4-byte all-reduce).
void barrier(ncclComm* h) {
  thread_local int word[2];
  OpDesc op;
  op.coll = Collective::kAllReduce;
  op.fn = "device path barrier";
  op.sendbuff = &word[0];
  op.recvbuff = &word[1];
  op.count = 1;
  op.type = ncclInt32;
  op.rawType = ncclInt32;
  group::runHostOps({{h, op}});
}

// Everything one collective needs from the mesh, with the halves of its buffers.
struct Step {
  ncclComm* h;
  const transport::cuda_ipc::Mesh& mesh;
  void* stream;
  int rank, n;
  size_t es, half;
  char* in(int r) const { return static_cast<char*>(mesh.buffer[r]); }
  char* partial(int r) const { return static_cast<char*>(mesh.buffer[r]) + half; }
  // Waits for this rank's kernels, then for every rank's.
  void sync() const {
    device::streamSynchronize(stream);
    barrier(h);
  }
};

// dst = in-order reduction of every rank's `in` region at byte offset `at`.
void reduceFromAll(const Step& s, void* dst, size_t at, size_t count, ncclDataType_t type, const device::ReduceOp& op) {
  std::vector<const void*> inputs;
  for (int r = 0; r < s.n; ++r) inputs.push_back(s.in(r) + at);
  device::ReduceOp plain = op;
  plain.preMultiply = false;  // applied when the rank staged its own input
  device::gpuReduceInOrder(dst, inputs.data(), s.n, count, type, plain, s.stream);
}

// Two-shot all-reduce per chunk: each rank reduces its slice from every rank's
// input, then gathers every slice: each GPU reads about 2 x the data, as a ring.
void allReduce(const Step& s, const OpDesc& op, const device::ReduceOp& rop) {
  size_t chunk = s.half / s.es;
  for (size_t o = 0; o < op.count; o += chunk) {
    size_t c = std::min(chunk, op.count - o), slice = (c + s.n - 1) / s.n;
    device::gpuPrepare(s.in(s.rank), static_cast<const char*>(op.sendbuff) + o * s.es, c, op.type, rop, s.stream);
    s.sync();
    size_t b = std::min(c, s.rank * slice), e = std::min(c, b + slice);
    if (e > b) reduceFromAll(s, s.partial(s.rank) + b * s.es, b * s.es, e - b, op.type, rop);
    s.sync();
    for (int r = 0; r < s.n; ++r) {
      size_t rb = std::min(c, r * slice), re = std::min(c, rb + slice);
      if (re > rb)
        device::gpuCopy(static_cast<char*>(op.recvbuff) + (o + rb) * s.es, s.partial(r) + rb * s.es, (re - rb) * s.es,
                        s.stream);
    }
    s.sync();
  }
}

void reduceScatter(const Step& s, const OpDesc& op, const device::ReduceOp& rop) {
  size_t chunk = s.half / (s.es * s.n);
  for (size_t o = 0; o < op.count; o += chunk) {
    size_t c = std::min(chunk, op.count - o);
    for (int r = 0; r < s.n; ++r)  // block r of the chunk: what rank r keeps
      device::gpuPrepare(s.in(s.rank) + r * c * s.es, static_cast<const char*>(op.sendbuff) + (r * op.count + o) * s.es,
                         c, op.type, rop, s.stream);
    s.sync();
    reduceFromAll(s, static_cast<char*>(op.recvbuff) + o * s.es, s.rank * c * s.es, c, op.type, rop);
    s.sync();
  }
}

void allGather(const Step& s, const OpDesc& op) {
  size_t chunk = s.half / s.es;
  for (size_t o = 0; o < op.count; o += chunk) {
    size_t c = std::min(chunk, op.count - o);
    device::gpuCopy(s.in(s.rank), static_cast<const char*>(op.sendbuff) + o * s.es, c * s.es, s.stream);
    s.sync();
    for (int r = 0; r < s.n; ++r)
      device::gpuCopy(static_cast<char*>(op.recvbuff) + (r * op.count + o) * s.es, s.in(r), c * s.es, s.stream);
    s.sync();
  }
}

// Broadcast and reduce from a root.
void rooted(const Step& s, const OpDesc& op, const device::ReduceOp& rop) {
  size_t chunk = s.half / s.es;
  bool reduce = op.coll == Collective::kReduce;
  for (size_t o = 0; o < op.count; o += chunk) {
    size_t c = std::min(chunk, op.count - o);
    const char* src = static_cast<const char*>(op.sendbuff) + o * s.es;
    char* dst = static_cast<char*>(op.recvbuff) + o * s.es;
    if (reduce) device::gpuPrepare(s.in(s.rank), src, c, op.type, rop, s.stream);
    else if (s.rank == op.root) device::gpuCopy(s.in(s.rank), src, c * s.es, s.stream);
    s.sync();
    if (!reduce) device::gpuCopy(dst, s.in(op.root), c * s.es, s.stream);
    else if (s.rank == op.root) reduceFromAll(s, dst, 0, c, op.type, rop);
    s.sync();
  }
}

}  // namespace

void setup(Communicator& comm) {
  if (device::gpuCount() == 0) return;
  std::string why = refusal(comm);
  if (why.empty()) {
    auto gather = [&](const std::string& mine) { return comm.bootstrap().allGather(mine); };
    int prev = device::setCurrentDevice(comm.device());
    comm.setDeviceMesh(transport::cuda_ipc::connect(comm.rank(), comm.peers(), kMeshBytes, gather, &why));
    device::setCurrentDevice(prev);
  }
  if (comm.deviceMesh())
    STRATA_INFO(kSubsysInit, comm.rank(), "cuda_ipc: %d ranks map each other's %zu MiB staging; device buffers go GPU to GPU",
                comm.nranks(), kMeshBytes >> 20);
  else
    STRATA_INFO(kSubsysInit, comm.rank(), "cuda_ipc: not used (%s); device buffers are staged through host memory",
                why.c_str());
}

bool fits(const std::vector<std::pair<ncclComm*, OpDesc>>& ops) {
  for (auto& [h, op] : ops) {
    // One communicator and one stream: the stream waits on the whole group at once.
    if (h != ops.front().first || op.stream != ops.front().second.stream || !h->impl->deviceMesh() ||
        op.kind != OpKind::kCollective)
      return false;
    switch (op.coll) {
      case Collective::kAllReduce: case Collective::kAllGather: case Collective::kReduceScatter:
      case Collective::kBroadcast: case Collective::kReduce: break;
      default: return false;
    }
    if (!device::isDevicePointer(op.sendbuff) || !device::isDevicePointer(op.recvbuff)) return false;
  }
  return true;
}

void run(const std::vector<std::pair<ncclComm*, OpDesc>>& ops, void** stream) {
  ncclComm* h = ops.front().first;
  Communicator& c = *h->impl;
  device::setCurrentDevice(c.device());
  if (!*stream) *stream = device::streamCreate();
  const transport::cuda_ipc::Mesh& mesh = *c.deviceMesh();
  for (auto& [handle, op] : ops) {
    size_t es = device::dtypeSize(op.type);
    Step s{h, mesh, *stream, c.rank(), c.nranks(), es, mesh.bytes / 2};
    device::ReduceOp rop = reduces(op) ? c.redops().opFor(op) : device::ReduceOp{};
    switch (op.coll) {
      case Collective::kAllReduce: allReduce(s, op, rop); break;
      case Collective::kReduceScatter: reduceScatter(s, op, rop); break;
      case Collective::kAllGather: allGather(s, op); break;
      default: rooted(s, op, rop); break;
    }
  }
}

}  // namespace strata::core::device_direct
