// DeviceOneShot: every collective on device buffers between the GPUs of a node
// (all-reduce, all-gather, reduce-scatter, broadcast, reduce, all-to-all, gather,
// scatter), one kernel on the caller's stream and no host in the loop
// (device/kernel_coll.h has the protocol). In rounds of up to a slot per source,
// each rank's kernel writes its data into the peers' slots that need it, raises a
// flag in each peer's region, waits for the peers' flags in its own, then finishes
// from its own slots. An all-reduce, broadcast or reduce of more than
// kTwoShotBytes on 3 or more ranks is two-shot (each rank gathers, and reduces, a
// slice; then the slices are spread), so each GPU moves about twice the data
// rather than n - 1 times it. One rank per GPU: kernels of ranks sharing a GPU
// would wait for each other and need not be co-resident (nor, with
// CUDA_DEVICE_MAX_CONNECTIONS=1, even started), so those keep the proxy.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/common/kernel_task.h"
#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::algorithms::device_one_shot {
namespace {

using device::KernelColl;

// Bytes of a slot: what one source writes to one rank per round.
constexpr size_t kSlotBytes = 512 << 10;
// A launch, per operation; and a barrier (flags' round trip between GPUs) per step.
constexpr double kLaunchUs = 4.0;
constexpr double kStepUs = 2.0;
// All-reduces, broadcasts and reduces larger than this (3 or more ranks) are two-shot.
constexpr size_t kTwoShotBytes = 256 << 10;
// Bytes of a slot per block (1 to KernelColl::kMaxBlocks blocks).
constexpr size_t kBlockBytes = 16 << 10;
constexpr uint64_t kRegion = linkId("device.oneshot");

// Per communicator: the step count in device memory (KernelColl::counter), the
// event that orders its kernels across streams (kernel_task.h).
struct CollState : KernelState {};

// What one rank contributes (or receives) per peer: nccl-tests' size over n where
// one buffer holds a piece per rank.
size_t pieceBytes(Collective c, size_t bytes, int nranks) {
  return traits(c).wide == Wide::kNone ? bytes : bytes / nranks;
}

bool twoShot(Collective c, size_t bytes, int nranks) {
  bool splits = c == Collective::kAllReduce || c == Collective::kBroadcast || c == Collective::kReduce;
  return splits && nranks > 2 && bytes > kTwoShotBytes;
}

int kernelColl(Collective c) {
  switch (c) {
    case Collective::kAllGather: return KernelColl::kAllGather;
    case Collective::kReduceScatter: return KernelColl::kReduceScatter;
    case Collective::kBroadcast: return KernelColl::kBroadcast;
    case Collective::kReduce: return KernelColl::kReduce;
    case Collective::kAllToAll: return KernelColl::kAllToAll;
    case Collective::kGather: return KernelColl::kGather;
    case Collective::kScatter: return KernelColl::kScatter;
    default: return KernelColl::kAllReduce;
  }
}

class DeviceOneShot final : public Algorithm {
 public:
  const char* name() const override { return "DeviceOneShot"; }
  bool serves(Collective c) const override { return c != Collective::kSendRecv; }
  bool deviceMemory() const override { return true; }
  bool streamOrdered() const override { return true; }
  bool optional() const override { return true; }
  bool applies(const TuneRequest& r) const override {
    return r.streamOrdered && r.ownGpus && r.nodes == 1 && r.nranks > 1 && r.nranks <= KernelColl::kMaxRanks;
  }
  // One-shot: every rank writes its piece to each of the n - 1 others over its links
  // (a broadcast's or scatter's root all of them; a reduce's or gather's root takes
  // them all in), a step per
  // slot's worth. Two-shot: 2 (n - 1) / n of the data through the busiest GPU, two
  // steps per round. The fixed cost is the kernel's own launch (kLaunchUs), not the
  // proxy path's base latency (the tuner leaves that out for stream-ordered work).
  double costUs(const TuneRequest& r, Protocol) const override {
    double n = r.nranks, piece = static_cast<double>(pieceBytes(r.coll, r.bytes, r.nranks));
    bool two = twoShot(r.coll, r.bytes, r.nranks);
    double round = two ? n * kSlotBytes : kSlotBytes, steps = std::max(1.0, std::ceil(piece / round)) * (two ? 2 : 1);
    double moved = two ? 2 * (n - 1) / n * piece : (n - 1) * piece;
    return kLaunchUs + steps * kStepUs + transferUs(moved, r.intra);
  }

  // Each rank's region, mapped by every peer, and the operation counter.
  bool warmUp(PlanContext& ctx) const override {
    if (!devicePeers(ctx, KernelColl::kMaxRanks, 1)) return false;
    needRegions(ctx);
    CollState& c = ctx.state<CollState>();
    if (!c.ready()) {
      device::OnDevice on(ctx.device());
      c.init(2, ctx.deviceWords());
    }
    return true;
  }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    const RankLayout& l = ctx.layout();
    needRegions(ctx);  // opened at init: registers nothing new
    KernelColl k;
    k.coll = kernelColl(op.coll);
    k.split = twoShot(op.coll, op.bytes, l.nranks);
    k.rank = l.rank;
    k.n = l.nranks;
    k.root = op.root;
    k.type = op.type;
    k.es = static_cast<int>(device::dtypeSize(op.type));
    k.op = op.op;
    k.send = static_cast<const char*>(op.sendbuff);
    k.recv = static_cast<char*>(op.recvbuff);
    k.count = op.count;
    k.slotBytes = kSlotBytes;
    k.shapeRounds(kBlockBytes, kernelRoom(ctx));
    CollState* state = &ctx.state<CollState>();
    k.counter = state->words();
    k.stop = state->stopWord();
    k.error = state->errorWord();
    k.timeoutNs = kernelTimeoutNs(config().timeoutSec);
    ctx.addTask({kRegion, 0}, [k, fn = op.fn, stream = ctx.deviceStream(), dev = ctx.device(), state](Links& ln) mutable {
      for (int r = 0; r < k.n; ++r)
        if (r != k.rank) {
          k.region[r] = static_cast<char*>(ln.regionOut({r, kRegion}).data);
          k.region[k.rank] = static_cast<char*>(ln.regionIn({r, kRegion}).data);
        }
      return std::make_unique<KernelTask>(fn, dev, [k, stream, state] {
        state->launch(stream, [&] { device::launchKernelColl(k, stream); });
      });
    });
  }

 private:
  static void needRegions(PlanContext& ctx) {
    needPeerRegions(ctx, kRegion, KernelColl::regionBytes(ctx.layout().nranks, kSlotBytes));
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const DeviceOneShot d;
  return d;
}

}  // namespace strata::algorithms::device_one_shot
