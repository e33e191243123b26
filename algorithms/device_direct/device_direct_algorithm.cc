// DeviceDirect: all-reduce, reduce-scatter, all-gather, broadcast and reduce on
// device buffers GPU to GPU inside a node. Every rank's device staging buffer is
// mapped by every other (regions in device memory: the cuda_ipc transport);
// kernels read the peers' buffers directly. All-reduce is two-shot (each rank
// reduces its slice from every rank's input, then copies every rank's reduced
// slice), so each GPU reads about twice the data, as a ring does. Steps are
// separated by barriers over small host links, chunk by chunk.
#include <algorithm>

#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/device_direct/device_steps_task.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::algorithms::device_direct {
namespace {

// Bytes of each rank's mapped staging buffer (two halves: inputs, partial results).
constexpr size_t kMeshBytes = 32 << 20;
constexpr LinkShape kTokenShape{64, 4};
// A step: kernels, the stream drained, then a barrier of host messages.
constexpr double kStepUs = 30.0;

using Steps = std::vector<std::function<void()>>;

// What the steps of one collective work on.
struct Mesh {
  std::vector<char*> buffer;  // by rank: its staging as this rank addresses it
  size_t half = kMeshBytes / 2;
  int rank = 0, n = 1;
  void* stream = nullptr;
  char* in(int r) const { return buffer[r]; }
  char* partial(int r) const { return buffer[r] + half; }
};

// Elements of `es` bytes rounded up to whole 16-byte vectors: slices and staging
// blocks start 16-byte aligned, so that the kernels stay on their vector path for
// every type (a 2-byte slice of 1000 / 3 elements would start off it).
size_t vectorRound(size_t elements, size_t es) {
  size_t v = 16 / es;  // es is 1, 2, 4 or 8
  return (elements + v - 1) / v * v;
}

// dst = in-order reduction of every rank's input region at byte offset `at`.
void reduceFromAll(const Mesh& m, void* dst, size_t at, size_t count, ncclDataType_t type, const device::ReduceOp& op) {
  std::vector<const void*> inputs;
  for (int r = 0; r < m.n; ++r) inputs.push_back(m.in(r) + at);
  device::ReduceOp plain = op;
  plain.preMultiply = false;  // applied when the rank staged its own input
  device::gpuReduceInOrder(dst, inputs.data(), m.n, count, type, plain, m.stream);
}

Steps allReduce(const Mesh& m, const CollectiveOp& op, size_t es) {
  Steps steps;
  auto* send = static_cast<const char*>(op.sendbuff);
  auto* recv = static_cast<char*>(op.recvbuff);
  for (size_t o = 0; o < op.count; o += m.half / es) {
    size_t c = std::min(m.half / es, op.count - o), slice = vectorRound((c + m.n - 1) / m.n, es);
    steps.push_back([=] { device::gpuPrepare(m.in(m.rank), send + o * es, c, op.type, op.op, m.stream); });
    steps.push_back([=] {
      size_t b = std::min(c, m.rank * slice), e = std::min(c, b + slice);
      if (e > b) reduceFromAll(m, m.partial(m.rank) + b * es, b * es, e - b, op.type, op.op);
    });
    steps.push_back([=] {
      for (int r = 0; r < m.n; ++r) {
        size_t rb = std::min(c, r * slice), re = std::min(c, rb + slice);
        if (re > rb) device::gpuCopy(recv + (o + rb) * es, m.partial(r) + rb * es, (re - rb) * es, m.stream);
      }
    });
  }
  return steps;
}

Steps reduceScatter(const Mesh& m, const CollectiveOp& op, size_t es) {
  Steps steps;
  auto* send = static_cast<const char*>(op.sendbuff);
  auto* recv = static_cast<char*>(op.recvbuff);
  size_t chunk = m.half / (es * m.n) / (16 / es) * (16 / es);  // whole vectors: every block stays aligned
  for (size_t o = 0; o < op.count; o += chunk) {
    size_t c = std::min(chunk, op.count - o), block = vectorRound(c, es) * es;
    steps.push_back([=] {
      for (int r = 0; r < m.n; ++r)  // block r of the chunk: what rank r keeps
        device::gpuPrepare(m.in(m.rank) + r * block, send + (r * op.count + o) * es, c, op.type, op.op, m.stream);
    });
    steps.push_back([=] { reduceFromAll(m, recv + o * es, m.rank * block, c, op.type, op.op); });
  }
  return steps;
}

Steps allGather(const Mesh& m, const CollectiveOp& op, size_t es) {
  Steps steps;
  auto* send = static_cast<const char*>(op.sendbuff);
  auto* recv = static_cast<char*>(op.recvbuff);
  for (size_t o = 0; o < op.count; o += m.half / es) {
    size_t c = std::min(m.half / es, op.count - o);
    steps.push_back([=] { device::gpuCopy(m.in(m.rank), send + o * es, c * es, m.stream); });
    steps.push_back([=] {
      for (int r = 0; r < m.n; ++r) device::gpuCopy(recv + (r * op.count + o) * es, m.in(r), c * es, m.stream);
    });
  }
  return steps;
}

// Broadcast and reduce from a root.
Steps rooted(const Mesh& m, const CollectiveOp& op, size_t es) {
  Steps steps;
  bool reduce = op.coll == Collective::kReduce;
  for (size_t o = 0; o < op.count; o += m.half / es) {
    size_t c = std::min(m.half / es, op.count - o);
    const char* src = static_cast<const char*>(op.sendbuff) + o * es;
    char* dst = static_cast<char*>(op.recvbuff) + o * es;
    steps.push_back([=] {
      if (reduce) device::gpuPrepare(m.in(m.rank), src, c, op.type, op.op, m.stream);
      else if (m.rank == op.root) device::gpuCopy(m.in(m.rank), src, c * es, m.stream);
    });
    steps.push_back([=] {
      if (!reduce) device::gpuCopy(dst, m.in(op.root), c * es, m.stream);
      else if (m.rank == op.root) reduceFromAll(m, dst, 0, c, op.type, op.op);
    });
  }
  return steps;
}

class DeviceDirect final : public Algorithm {
 public:
  const char* name() const override { return "DeviceDirect"; }
  bool serves(Collective c) const override { return traits(c).scheduled; }
  bool deviceMemory() const override { return true; }
  bool optional() const override { return true; }
  bool applies(const TuneRequest& r) const override { return r.nodes == 1 && r.nranks > 1; }

  // Per chunk of half a staging buffer: 2-3 steps of a launch and a barrier, and
  // each rank reads and writes about twice the bytes (two-shot), over the node's links.
  double costUs(const TuneRequest& r, Protocol) const override {
    double chunks = std::max(1.0, static_cast<double>(r.bytes) / (kMeshBytes / 2));
    return chunks * 3 * kStepUs + transferUs(2.0 * r.bytes, r.intra);
  }

  // Every rank's staging, mapped by every other, where each pair has device memory to share.
  bool warmUp(PlanContext& ctx) const override {
    const RankLayout& l = ctx.layout();
    if (l.nranks < 2) return false;
    for (int a = 0; a < l.nranks; ++a)
      for (int b = 0; b < l.nranks; ++b)
        if (a != b && !ctx.reachable(a, b, transport::kDeviceMemory)) return false;
    forEachPeer(l, [&](int j) {
      ctx.needRegion({j, linkId("device.mesh")}, kMeshBytes, true);
      ctx.needSend({j, linkId("device.sync")}, kTokenShape);
      ctx.needRecv({j, linkId("device.sync")}, kTokenShape);
    });
    return true;
  }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    const RankLayout& l = ctx.layout();
    warmUp(ctx);  // opened at init: registers nothing new
    void* stream = ctx.deviceStream();
    ctx.addTask({linkId("device.sync"), 0}, [op, stream, rank = l.rank, n = l.nranks](Links& ln) {
      Mesh m;
      m.rank = rank;
      m.n = n;
      m.stream = stream;
      m.buffer.assign(n, nullptr);
      DeviceStepsArgs a{op.fn, rank, stream, {}, std::vector<transport::SendConnection*>(n),
                        std::vector<transport::RecvConnection*>(n)};
      for (int j = 0; j < n; ++j) {
        if (j == rank) continue;
        m.buffer[j] = static_cast<char*>(ln.regionOut({j, linkId("device.mesh")}).data);
        m.buffer[rank] = static_cast<char*>(ln.regionIn({j, linkId("device.mesh")}).data);
        a.to[j] = &ln.send({j, linkId("device.sync")});
        a.from[j] = &ln.recv({j, linkId("device.sync")});
      }
      size_t es = device::dtypeSize(op.type);
      switch (op.coll) {
        case Collective::kAllReduce: a.steps = allReduce(m, op, es); break;
        case Collective::kReduceScatter: a.steps = reduceScatter(m, op, es); break;
        case Collective::kAllGather: a.steps = allGather(m, op, es); break;
        default: a.steps = rooted(m, op, es); break;
      }
      return makeDeviceStepsTask(std::move(a));
    });
  }

 private:
  template <typename F>
  static void forEachPeer(const RankLayout& l, F f) {
    for (int j = 0; j < l.nranks; ++j)
      if (j != l.rank) f(j);
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const DeviceDirect d;
  return d;
}

}  // namespace strata::algorithms::device_direct
