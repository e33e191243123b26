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

// Per communicator: the step count in device memory, and the stream of the last
// kernel with an event after it. A communicator's kernels share the count, flags
// and slots, so they must run one at a time: a kernel on another stream than the
// last one waits for that event (as NCCL orders a communicator's work across
// streams).
struct KernelState {
  uint64_t* words = nullptr;  // KernelColl::counter
  uint32_t* hostWords = nullptr;  // the communicator's stop and error words, as kernels address them
  void* event = nullptr;
  void* lastStream = nullptr;
  ~KernelState() {
    try {
      if (words) device::gpuFree(words);
      if (event) device::eventDestroy(event);
    } catch (const Error& e) {
      STRATA_WARN(-1, "DeviceOneShot: freeing the step counter: %s", e.what());
    }
  }
};

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

// Enqueues the kernel at its first progress (on the caller's thread and stream).
// Across streams it is ordered after the communicator's previous kernel; inside a
// graph capture it is not (the capture cannot wait for work outside it): a graph
// must capture a communicator's operations on one stream.
class LaunchTask final : public Task {
 public:
  LaunchTask(const char* fn, KernelColl k, void* stream, int device, KernelState* state)
      : fn_(fn), k_(k), stream_(stream), device_(device), state_(state) {}
  bool progress() override {
    if (launched_) return false;
    device::OnDevice on(device_);
    launch();
    return launched_ = true;
  }
  bool done() const override { return launched_; }
  int waitingOn() const override { return -1; }
  bool peerAborted() const override { return false; }
  const char* fn() const override { return fn_; }

 private:
  void launch() {
    bool captured = stream_ != device::kLegacyStream && device::streamCapturing(stream_);
    if (!captured && state_->lastStream && state_->lastStream != stream_)
      device::streamWaitEvent(stream_, state_->event);
    device::launchKernelColl(k_, stream_);
    if (captured) return;
    device::eventRecord(state_->event, stream_);
    state_->lastStream = stream_;
  }

  const char* fn_;
  KernelColl k_;
  void* stream_;
  int device_;
  KernelState* state_;
  bool launched_ = false;
};

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
    const RankLayout& l = ctx.layout();
    if (l.nranks < 2 || l.nranks > KernelColl::kMaxRanks || ctx.device() < 0) return false;
    for (int a = 0; a < l.nranks; ++a)
      for (int b = 0; b < l.nranks; ++b)
        if (a != b && !ctx.reachable(a, b, transport::kDeviceMemory)) return false;
    needRegions(ctx);
    KernelState& c = ctx.state<KernelState>();
    if (!c.words) {  // each piece once, even when a step throws and a later warm-up retries
      device::OnDevice on(ctx.device());
      if (!c.event) c.event = device::eventCreate();
      c.hostWords = static_cast<uint32_t*>(device::mappedPointer(ctx.deviceWords()));
      auto* words = static_cast<uint64_t*>(device::gpuAlloc(2 * sizeof(uint64_t)));
      try {
        device::memsetSync(words, 0, 2 * sizeof(uint64_t));
      } catch (const Error&) {
        device::gpuFree(words);
        throw;
      }
      c.words = words;
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
    k.shapeRounds(kBlockBytes);
    KernelState* state = &ctx.state<KernelState>();
    k.counter = state->words;
    k.stop = state->hostWords;
    k.error = state->hostWords + 1;
    k.timeoutNs = config().timeoutSec < 1.8e10 ? static_cast<uint64_t>(config().timeoutSec * 1e9) : UINT64_MAX;
    ctx.addTask({kRegion, 0}, [k, fn = op.fn, stream = ctx.deviceStream(), dev = ctx.device(), state](Links& ln) mutable {
      for (int r = 0; r < k.n; ++r)
        if (r != k.rank) {
          k.region[r] = static_cast<char*>(ln.regionOut({r, kRegion}).data);
          k.region[k.rank] = static_cast<char*>(ln.regionIn({r, kRegion}).data);
        }
      return std::make_unique<LaunchTask>(fn, k, stream, dev, state);
    });
  }

 private:
  static void needRegions(PlanContext& ctx) {
    const RankLayout& l = ctx.layout();
    for (int j = 0; j < l.nranks; ++j)
      if (j != l.rank) ctx.needRegion({j, kRegion}, KernelColl::regionBytes(l.nranks, kSlotBytes), true);
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const DeviceOneShot d;
  return d;
}

}  // namespace strata::algorithms::device_one_shot
