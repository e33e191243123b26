// DeviceP2p: a group's sends and receives on device buffers between the
// GPUs of a node as one kernel on the caller's stream, no host in the loop
// (device/kernel_p2p.h has the protocol): Megatron's pipeline sends and receives
// need no proxy thread, run under CUDA_DEVICE_MAX_CONNECTIONS=1, and can be
// captured in CUDA graphs. One rank per GPU, as DeviceRing and DeviceMesh (same reasons).
#include <algorithm>
#include <cmath>
#include <memory>

#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/common/kernel_task.h"
#include "algorithms/device_p2p/p2p_windows.h"
#include "base/config.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::algorithms::device_p2p {
namespace {

using device::KernelP2p;

constexpr double kLaunchUs = 4.0;  // a launch (estimates, docs/topology.md)
constexpr double kChunkUs = 1.0;   // a flag per chunk, mostly hidden behind the next chunk's copy
constexpr uint64_t kRegion = linkId("device.p2p");

// The group being planned: its transfers gather here and go out at the first task's
// progress (the executor plans a whole group before it runs it), as one kernel or,
// past a kernel's kMaxOps, several in turn (p2p_windows.h).
struct Batch {
  KernelP2p base;  // what every kernel of the group shares
  std::vector<KernelP2p::Op> ops;
  int room = 0;  // blocks a kernel may take
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
    STRATA_REQUIRE(op.root >= 0 && op.root < l.nranks, ncclInvalidArgument,
                   "%s: rank %d: peer %d is not a rank of this communicator of %d", op.fn, l.rank, op.root, l.nranks);
    size_t bytes = op.count * device::dtypeSize(op.type);
    if (op.root == l.rank) {  // to itself: a copy on the stream, its send and receive met in call order
      if (send) ctx.selfSend(op.fn, buf, bytes);
      else ctx.selfRecv(op.fn, buf, bytes);
      return;
    }
    batch->ops.push_back({op.root, send, buf, bytes});
    batch->room = kernelRoom(ctx);
    ctx.addTask({kRegion, 0}, [batch, fn = op.fn, stream = ctx.deviceStream(), dev = ctx.device()](Links& ln) {
      KernelP2p& k = batch->base;
      for (int r = 0; r < k.n; ++r)
        if (r != k.rank) {
          k.region[r] = static_cast<char*>(ln.regionOut({r, kRegion}).data);
          k.region[k.rank] = static_cast<char*>(ln.regionIn({r, kRegion}).data);
        }
      return std::make_unique<KernelTask>(fn, dev, [batch, stream] {
        if (batch->launched) return;  // the group's first task launched it
        batch->launched = true;
        for (const KernelP2p& w : windowsOf(batch->base, batch->ops, batch->room)) device::launchKernelP2p(w, stream);
      });
    });
  }

 private:
  static std::shared_ptr<Batch> newBatch(const RankLayout& l, const P2pState& s) {
    auto b = std::make_shared<Batch>();
    b->base.rank = l.rank;
    b->base.n = l.nranks;
    b->base.counts = s.words();
    b->base.stop = s.stopWord();
    b->base.error = s.errorWord();
    b->base.timeoutNs = kernelTimeoutNs(config().timeoutSec);
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
