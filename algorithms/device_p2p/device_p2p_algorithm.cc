// DeviceP2p: a group's sends and receives on device buffers between the
// GPUs of a node as one kernel on the caller's stream, no host in the loop
// (device/kernel_p2p.h has the protocol): Megatron's pipeline sends and receives
// need no proxy thread, run under CUDA_DEVICE_MAX_CONNECTIONS=1, and can be
// captured in CUDA graphs. One rank per GPU, as DeviceOneShot (same reasons).
#include <algorithm>
#include <cmath>
#include <memory>

#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/common/kernel_task.h"
#include "base/config.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::algorithms::device_p2p {
namespace {

using device::KernelP2p;

constexpr double kLaunchUs = 4.0;  // as DeviceOneShot's (estimates, docs/topology.md)
constexpr double kChunkUs = 1.0;   // a flag per chunk, mostly hidden behind the next chunk's copy
constexpr uint64_t kRegion = linkId("device.p2p");

// The group being planned: its transfers gather here and go out as one kernel at
// the first task's progress (the executor plans a whole group before it runs it).
struct Batch {
  KernelP2p k;
  bool launched = false;
};

// Per communicator: the chunk counts in device memory, the kernels' order across
// streams, and the batch of the group being planned. The group's tasks hold the
// batch: when a group fails before its launch, the batch goes with its tasks and
// the next group starts a new one.
struct P2pState : KernelState {
  std::weak_ptr<Batch> open;
};

class DeviceP2p final : public Algorithm {
 public:
  const char* name() const override { return "DeviceP2p"; }
  bool serves(Collective c) const override { return c == Collective::kSendRecv; }
  bool selectable() const override { return false; }
  bool deviceMemory() const override { return true; }
  bool streamOrdered() const override { return true; }
  bool optional() const override { return true; }
  bool applies(const TuneRequest& r) const override {
    return r.streamOrdered && r.ownGpus && r.nodes == 1 && r.nranks > 1 && r.nranks <= KernelP2p::kMaxRanks;
  }
  double costUs(const TuneRequest& r, Protocol) const override {
    double chunks = std::ceil(static_cast<double>(r.bytes) / KernelP2p::kChunk);
    return kLaunchUs + std::max(1.0, chunks) * kChunkUs + transferUs(static_cast<double>(r.bytes), r.intra);
  }

  bool warmUp(PlanContext& ctx) const override {
    // A block per lane at least: a group may send to and receive from every peer.
    if (!devicePeers(ctx, KernelP2p::kMaxRanks, 2 * (ctx.layout().nranks - 1))) return false;
    needRegions(ctx);
    P2pState& s = ctx.state<P2pState>();
    if (!s.ready()) {
      device::OnDevice on(ctx.device());
      s.init(2 * KernelP2p::kMaxRanks * KernelP2p::kParts, ctx.deviceWords());
    }
    return true;
  }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    const RankLayout& l = ctx.layout();
    needRegions(ctx);  // opened at init: registers nothing new
    P2pState* state = &ctx.state<P2pState>();
    std::shared_ptr<Batch> batch = state->open.lock();
    if (!batch || batch->launched) state->open = batch = newBatch(l, *state);
    bool send = op.kind == CollectiveOp::Kind::kSend;
    char* buf = send ? const_cast<char*>(static_cast<const char*>(op.sendbuff)) : static_cast<char*>(op.recvbuff);
    size_t bytes = op.count * device::dtypeSize(op.type);
    STRATA_REQUIRE(batch->k.add(op.root, send, buf, bytes), ncclInvalidUsage,
                   "%s: rank %d: more than %d sends and receives in one group on device buffers", op.fn, l.rank,
                   KernelP2p::kMaxOps);
    fitLanes(ctx, batch->k);
    ctx.addTask({kRegion, 0}, [batch, fn = op.fn, stream = ctx.deviceStream(), dev = ctx.device(), state](Links& ln) {
      for (int r = 0; r < batch->k.n; ++r)
        if (r != batch->k.rank) {
          batch->k.region[r] = static_cast<char*>(ln.regionOut({r, kRegion}).data);
          batch->k.region[batch->k.rank] = static_cast<char*>(ln.regionIn({r, kRegion}).data);
        }
      return std::make_unique<KernelTask>(fn, dev, [batch, stream, state] {
        if (batch->launched) return;  // the group's first task launched it
        batch->launched = true;
        state->launch(stream, [&] { device::launchKernelP2p(batch->k, stream); });
      });
    });
  }

 private:
  // Every block of the kernel must run at once (a lane's blocks wait for peers whose
  // lanes wait in turn): up to four blocks per lane, fewer where the GPUs hold fewer
  // (warm-up made sure of one per lane, on every rank alike).
  static void fitLanes(const PlanContext& ctx, KernelP2p& k) {
    k.blocksPerLane = std::max(1, std::min(KernelP2p::kParts, kernelRoom(ctx) / k.lanes));
  }
  static std::shared_ptr<Batch> newBatch(const RankLayout& l, const P2pState& s) {
    auto b = std::make_shared<Batch>();
    b->k.rank = l.rank;
    b->k.n = l.nranks;
    b->k.counts = s.words();
    b->k.stop = s.stopWord();
    b->k.error = s.errorWord();
    b->k.timeoutNs = kernelTimeoutNs(config().timeoutSec);
    return b;
  }
  static void needRegions(PlanContext& ctx) {
    needPeerRegions(ctx, kRegion, KernelP2p::regionBytes(ctx.layout().nranks));
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const DeviceP2p d;
  return d;
}

}  // namespace strata::algorithms::device_p2p
