// Ring: every collective of the ring schedules (ring_schedule.h) on one or more
// channels, each channel a ring of links through the node-ordered rank ring.
#include <algorithm>

#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/ring/ring_task.h"
#include "device/dtypes.h"

namespace strata::algorithms::ring {
namespace {

constexpr size_t kBytesPerChannel = 512 << 10;  // below this, extra channels only add steps
// Outputs from this size on do not stay in the caches (1 MiB of L2 per core on the test
// machines), so they are written with streaming stores; not in place, where the output
// lines were just read and are still cached.
constexpr size_t kStreamingBytes = 8 << 20;
// Steps of all-gather and broadcast when every message is a one-sided write: large
// enough that a write's system call is noise, small enough to pipeline a chain.
constexpr size_t kPutChunkBytes = 1 << 20;

LinkKey channelFrom(const RankLayout& l, int c) { return {l.ringPrev(), linkId("ring", c)}; }
LinkKey channelTo(const RankLayout& l, int c) { return {l.ringNext(), linkId("ring", c)}; }

bool everyLinkPuts(const PlanContext& ctx) {
  const RankLayout& l = ctx.layout();
  for (int p = 0; p < l.nranks; ++p)
    if (!(ctx.linkCapabilities(l.ringOrder[p], l.ringOrder[(p + 1) % l.nranks]) & transport::kPut)) return false;
  return true;
}

class Ring final : public Algorithm {
 public:
  const char* name() const override { return "Ring"; }
  bool serves(Collective c) const override { return traits(c).scheduled; }

  // 2(n-1) hops for all-reduce, n-1 for the others; each hop carries bytes/n
  // (a whole-buffer chain for broadcast and reduce), pipelined in slot-sized chunks.
  // Ranks are ordered by node, so each node link carries the ring once each way.
  double costUs(const TuneRequest& r, Protocol) const override {
    int n = r.nranks;
    const LinkModel l = slowestLink(r);
    if (n <= 1) return r.intra.latencyUs;
    double hops, wireBytes;
    switch (r.coll) {
      case Collective::kAllReduce:
        hops = 2.0 * (n - 1);
        wireBytes = 2.0 * (n - 1) / n * r.bytes;
        break;
      case Collective::kBroadcast:
      case Collective::kReduce:
        hops = n - 1;
        wireBytes = r.bytes;
        break;
      default:
        hops = n - 1;
        wireBytes = static_cast<double>(n - 1) / n * r.bytes;
        break;
    }
    return hops * l.latencyUs * (r.nodes > 1 ? kRingStepHops : 1.0) + transferUs(wireBytes, l);
  }

  bool warmUp(PlanContext& ctx) const override {
    const RankLayout& l = ctx.layout();
    for (int c = 0; l.nranks > 1 && c < ctx.maxChannels(); ++c) {
      ctx.needRecv(channelFrom(l, c));
      ctx.needSend(channelTo(l, c));
    }
    return true;
  }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    const RankLayout& l = ctx.layout();
    int n = l.nranks;
    size_t esize = device::dtypeSize(op.type);
    bool segmented = op.coll == Collective::kAllGather || op.coll == Collective::kReduceScatter;
    RingParams base;
    base.coll = op.coll;
    base.nranks = n;
    base.pos = l.ringPos[l.rank];
    base.rootPos = l.ringPos[op.root];  // 0 unless rooted; validated by then
    base.stride = segmented ? op.count : 0;
    base.chunk = ctx.slotBytes() / esize;
    base.order = l.ringOrder.data();
    // One-sided writes for the copies, on each link whose transport has them.
    bool copies = op.coll == Collective::kAllGather || op.coll == Collective::kBroadcast ||
                  op.coll == Collective::kAllReduce;
    bool large = copies && n > 1 && ctx.putBytes() > 0 && op.bytes >= ctx.putBytes();
    bool putsIn = large && (ctx.linkCapabilities(l.ringPrev()) & transport::kPut);
    bool putsOut = large && (ctx.linkCapabilities(l.ringNext()) & transport::kPut);
    // Larger steps only where every message of the ring is a write (all ranks must step
    // alike), and no larger than all of a link's slots: a write that goes through them
    // (CMA refused, or not worth it) may then wait for free slots (FifoSender::ringCanWait).
    if (large && op.coll != Collective::kAllReduce && everyLinkPuts(ctx))
      base.chunk = std::max(base.chunk, std::min(kPutChunkBytes, ctx.slotBytes() * ctx.slots()) / esize);
    size_t outBytes = recvElements(op.coll, op.count, n) * esize;
    size_t region = op.count;
    int nch = 1;
    if (n > 1) {
      size_t wanted = (region * esize + kBytesPerChannel - 1) / kBytesPerChannel;
      wanted = std::max<size_t>(wanted, static_cast<size_t>(ctx.minChannels()));
      nch = static_cast<int>(std::min<size_t>({wanted, static_cast<size_t>(ctx.maxChannels()), region}));
    }
    for (int c = 0; c < nch; ++c) {
      RingParams p = base;
      p.begin = region * c / nch;
      p.length = region * (c + 1) / nch - p.begin;
      RingTaskArgs args{op.fn, l.rank, l.ringPrev(), l.ringNext(), p, static_cast<const char*>(op.sendbuff),
                        static_cast<char*>(op.recvbuff), op.type, op.op, nullptr, nullptr,
                        op.bytes >= kStreamingBytes && op.sendbuff != op.recvbuff};
      args.putsIn = putsIn;
      args.putsOut = putsOut;
      LinkKey from = channelFrom(l, c), to = channelTo(l, c);
      if (n > 1) {
        ctx.needRecv(from);
        ctx.needSend(to);
      }
      ctx.addTask({linkId("ring"), c}, [args, from, to, n, outBytes](Links& links) mutable {
        if (n > 1) {
          args.fromPrev = &links.recv(from);
          args.toNext = &links.send(to);
        }
        if (args.putsIn) args.outputReg = links.registration(from, args.recvbuff, outBytes);
        return makeRingTask(args);
      });
    }
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const Ring ring;
  return ring;
}

}  // namespace strata::algorithms::ring
