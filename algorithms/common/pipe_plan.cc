#include "algorithms/common/pipe_plan.h"

#include <algorithm>
#include <cmath>

#include "algorithms/common/cost_model.h"
#include "base/config.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::algorithms {
namespace {

using device::KernelColl;
using device::KernelPipe;

constexpr uint64_t kRegion = linkId("device.pipe");

// The counts both algorithms' kernels keep between launches, and the event that
// orders a communicator's kernels across streams (kernel_task.h).
struct PipeState : KernelState {};

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

// The region pairs: with every peer when the region has a mesh part, else with the
// ring's neighbours only (a rank of 72 maps 2 peers, not 71).
void needRegions(PlanContext& ctx, const PipeGeometry& g) {
  const RankLayout& l = ctx.layout();
  if (g.mesh) return needPeerRegions(ctx, kRegion, g.regionBytes());
  int prev = (l.rank + l.nranks - 1) % l.nranks, next = (l.rank + 1) % l.nranks;
  ctx.needRegion({prev, kRegion}, g.regionBytes(), true);
  if (next != prev) ctx.needRegion({next, kRegion}, g.regionBytes(), true);
}

// Elements of one rank's piece (KernelColl's count) for nccl-tests' size of `op`.
int blocksFor(size_t bytes, size_t per, int channels) {
  size_t want = (bytes + per - 1) / per;
  return static_cast<int>(std::clamp<size_t>(want, 1, static_cast<size_t>(channels)));
}

}  // namespace

PipeGeometry pipeGeometry(const PlanContext& ctx) {
  PipeGeometry g;
  g.n = ctx.layout().nranks;
  g.channels = std::min(ctx.pipeChannels(), KernelPipe::kMaxChannels);
  g.mesh = g.n <= KernelPipe::kMaxMesh;
  return g;
}

bool pipeWarmUp(PlanContext& ctx) {
  PipeGeometry g = pipeGeometry(ctx);
  if (g.channels < 1 || !devicePeers(ctx, 1 << 20, 1)) return false;
  needRegions(ctx, g);
  PipeState& s = ctx.state<PipeState>();
  if (!s.ready()) {
    device::OnDevice on(ctx.device());
    s.init(g.stateWords(), ctx.deviceWords());
  }
  return true;
}

void planPipe(PlanContext& ctx, const CollectiveOp& op, int algo) {
  const RankLayout& l = ctx.layout();
  PipeGeometry g = pipeGeometry(ctx);
  needRegions(ctx, g);  // opened at init: registers nothing new
  KernelPipe k;
  k.coll = kernelColl(op.coll);
  k.algo = algo;
  k.rank = l.rank;
  k.n = l.nranks;
  k.root = op.root;
  bool ring = algo == KernelPipe::kRing, ll = algo == KernelPipe::kMeshLL;
  STRATA_REQUIRE(!ll || llServes(op.coll), ncclInternalError, "rank %d: the LL kernel has no %s", l.rank,
                 collectiveName(op.coll));
  k.channels = ll ? g.llChannels() : g.channels;
  // LL: by what each rank sends each peer (one rank's piece), as its cost model counts.
  k.blocks = ll ? blocksFor(op.count * device::dtypeSize(op.type), PipeGeometry::kLLChannelBytes, k.channels)
                : blocksFor(op.bytes, PipeGeometry::kChannelBytes, k.channels);
  k.type = op.type;
  k.es = static_cast<int>(device::dtypeSize(op.type));
  k.op = op.op;
  k.send = static_cast<const char*>(op.sendbuff);
  k.recv = static_cast<char*>(op.recvbuff);
  k.count = op.count;
  k.depth = ring ? PipeGeometry::kRingDepth : PipeGeometry::kMeshDepth;  // (LL's layout is its own)
  k.slotBytes = ring ? PipeGeometry::kRingSlot : PipeGeometry::kMeshSlot;
  k.conns = ring ? 1 : k.n;
  k.part = PipeGeometry::kHeader + (ring ? 0 : g.ringBytes()) + (ll ? g.meshBytes() : 0);
  PipeState* state = &ctx.state<PipeState>();
  k.state = state->words() + (ring ? 0 : KernelPipe::stateWords(g.channels, 1)) +
            (ll ? KernelPipe::stateWords(g.channels, k.n) : 0);
  k.stop = state->stopWord();
  k.error = state->errorWord();
  k.timeoutNs = config().deviceTimeoutSec > 0 ? kernelTimeoutNs(config().deviceTimeoutSec) : 0;
  ctx.addTask({kRegion, 0}, [k, fn = op.fn, stream = ctx.deviceStream(), dev = ctx.device()](Links& ln) mutable {
    auto mapped = [&](int peer) { return static_cast<char*>(ln.regionOut({peer, kRegion}).data); };
    if (k.algo == KernelPipe::kRing) {
      int prev = (k.rank + k.n - 1) % k.n, next = (k.rank + 1) % k.n;
      k.region[KernelPipe::kSelf] = static_cast<char*>(ln.regionIn({next, kRegion}).data);
      k.region[KernelPipe::kPrev] = mapped(prev);
      k.region[KernelPipe::kNext] = mapped(next);
    } else {
      for (int r = 0; r < k.n; ++r)
        k.region[r] = r == k.rank ? static_cast<char*>(ln.regionIn({(k.rank + 1) % k.n, kRegion}).data) : mapped(r);
    }
    return std::make_unique<KernelTask>(fn, dev, [k, stream] { device::launchKernelPipe(k, stream); });
  });
}

// The model (docs/gpu.md derives it). A launch, and per step of the algorithm a
// flag's round trip between GPUs (a system fence, a release store over NVLink, the
// peer's acquire poll): the pipeline's fill. Then the bytes through each GPU's links
// at the link's rate (the topology's, which for NVLink is NCCL's own per-link figure)
// times the share the per-message flags leave: each message's fence and flag store
// (kFlagUs) against its slot's time at the link's share per channel (the FIFOs hide
// the round trip itself: a sender is up to `depth` messages ahead). The channels keep
// enough in flight: 512 threads x 4 loads of 16 bytes = 32 KiB per channel, 1 MiB
// over 32, against NVLink's ~1 us; kChannelGBps is that per channel.
bool llServes(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kAllGather || c == Collective::kReduceScatter;
}

namespace {

// LL: per round of a channel (ll::kUnits units of 16 bytes) one trip over NVLink
// (kTripUs: a store and the peer's poll, no fence), every unit sent to every peer as
// twice its bytes (half of a line is flags). The stores need no reply, so the
// channels' rate is the link's, each channel's capped as Simple's are.
double llCostUs(const TuneRequest& r, double launchUs, double channelGBps) {
  constexpr double kTripUs = 1.0;
  constexpr double kRoundBytes = device::ll::kUnits * 16.0;
  double n = r.nranks, bytes = static_cast<double>(r.bytes);
  double piece = r.coll == Collective::kAllReduce ? bytes : bytes / n;  // what each rank sends each peer
  double channels = std::clamp(std::ceil(piece / PipeGeometry::kLLChannelBytes), 1.0,
                               static_cast<double>(device::ll::kMaxChannels));
  double rounds = std::max(1.0, std::ceil(piece / channels / kRoundBytes));
  double link = std::min(r.intra.bandwidthGBps, channels * channelGBps) * 1e3;  // bytes per us
  return launchUs + rounds * kTripUs + 2 * (n - 1) * piece / link;
}

}  // namespace

double pipeCostUs(const TuneRequest& r, int algo) {
  constexpr double kLaunchUs = 3.0, kStepUs = 1.5, kFlagUs = 0.5, kChannelGBps = 32.0;
  if (algo == KernelPipe::kMeshLL) return llServes(r.coll) ? llCostUs(r, kLaunchUs, kChannelGBps) : HUGE_VAL;
  double n = r.nranks, bytes = static_cast<double>(r.bytes);
  bool wide = traits(r.coll).wide != Wide::kNone;  // nccl-tests' size counts every rank's piece
  double piece = wide ? bytes / n : bytes;
  double channels = std::clamp(std::ceil(bytes / PipeGeometry::kChannelBytes), 1.0, 32.0);
  double link = std::min(r.intra.bandwidthGBps, channels * kChannelGBps) * 1e3;  // bytes per us
  bool ring = algo == KernelPipe::kRing;
  double slot = ring ? PipeGeometry::kRingSlot : PipeGeometry::kMeshSlot * (n - 1);
  double slotUs = slot / (link / channels);
  double rate = link * slotUs / (slotUs + kFlagUs);
  double steps, moved;
  if (ring) {
    bool chain = r.coll == Collective::kBroadcast || r.coll == Collective::kReduce;
    steps = r.coll == Collective::kAllReduce ? 2 * (n - 1) : n - 1;
    moved = r.coll == Collective::kAllReduce ? 2 * (n - 1) / n * bytes : chain ? bytes : (n - 1) * piece;
  } else {
    steps = r.coll == Collective::kAllReduce ? 3 : 2;
    bool funnel = r.coll == Collective::kBroadcast || r.coll == Collective::kReduce;
    moved = r.coll == Collective::kAllReduce ? 2 * (n - 1) / n * bytes : funnel ? (n - 1) * bytes : (n - 1) * piece;
  }
  return kLaunchUs + steps * kStepUs + moved / rate;
}

}  // namespace strata::algorithms
