// Hierarchical all-reduce: reduce-scatter inside the node, all-reduce across
// nodes among the ranks with this local rank (a "rail": each carries 1/L of the
// data), all-gather inside the node; pipelined over pieces, each phase on its
// own links.
#include <algorithm>

#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/common/node_ring.h"
#include "algorithms/ring/ring_task.h"
#include "device/dtypes.h"

namespace strata::algorithms::hierarchical {
namespace {

// Pieces of this size let the three phases overlap.
constexpr size_t kPieceBytes = 4 << 20;

class Hierarchical final : public Algorithm {
 public:
  const char* name() const override { return "Hierarchical"; }
  bool serves(Collective c) const override { return c == Collective::kAllReduce; }
  bool applies(const TuneRequest& r) const override { return r.nodes > 1 && r.ranksPerNode > 1; }

  // 2(L-1) intra hops + 2(N-1) network hops; the phases are pipelined, so the slower
  // phase's transfer dominates (+10% of the other, for the pipeline's fill).
  double costUs(const TuneRequest& r, Protocol) const override {
    int L = r.ranksPerNode, N = r.nodes;
    double inside = 2.0 * (L - 1) * r.intra.latencyUs;
    double across = 2.0 * (N - 1) * r.net.latencyUs * kRingStepHops;
    double insideBytes = 2.0 * (L - 1) / L * r.bytes, acrossBytes = 2.0 * (N - 1) / N * r.bytes;
    double a = transferUs(insideBytes, r.intra), b = transferUs(acrossBytes, r.net);
    return inside + across + std::max(a, b) + 0.1 * std::min(a, b);
  }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    const RankLayout& l = ctx.layout();
    int L = l.ranksPerNode(), N = l.numNodes(), li = l.localRank, node = l.node();
    NodeRing ring = useNodeRing(ctx);
    int prevRail = l.nodeRanks((node + N - 1) % N)[li], nextRail = l.nodeRanks((node + 1) % N)[li];
    LinkKey railFrom{prevRail, linkId("rail")}, railTo{nextRail, linkId("rail")};
    ctx.needRecv(railFrom);
    ctx.needSend(railTo);

    size_t esize = device::dtypeSize(op.type);
    device::ReduceOp inside = op.op, across = op.op, plain = op.op;
    inside.postDivide = 0;  // avg divides once, at the end of the rail all-reduce
    across.preMultiply = false;
    plain.preMultiply = false;
    plain.postDivide = 0;
    size_t pieces = std::max<size_t>(1, op.count * esize / kPieceBytes);
    RingParams local;
    local.coll = Collective::kAllReduce;
    local.nranks = L;
    local.pos = li;
    local.chunk = ctx.slotBytes() / esize;
    RingParams rail = local;
    rail.nranks = N;
    rail.pos = node;
    int rank = l.rank;
    ctx.addTask(nodeLane(), [=](Links& ln) {
      std::vector<std::vector<std::unique_ptr<Task>>> tasks(pieces);
      auto* send = static_cast<const char*>(op.sendbuff);
      auto* recv = static_cast<char*>(op.recvbuff);
      for (size_t p = 0; p < pieces; ++p) {
        RingParams rs = local, ag = local, ar = rail;
        rs.begin = ag.begin = op.count * p / pieces;
        rs.length = ag.length = op.count * (p + 1) / pieces - rs.begin;
        rs.half = RingHalf::kReduceScatter;
        ag.half = RingHalf::kAllGather;
        Segment mine = ownedSegment(rs);
        ar.begin = mine.begin;
        ar.length = mine.length;
        tasks[p].push_back(ring::makeRingTask({op.fn, rank, ring.prev, ring.next, rs, send, recv, op.type, inside,
                                               &ln.recv(ring.rsFrom), &ln.send(ring.rsTo), false}));
        tasks[p].push_back(ring::makeRingTask({op.fn, rank, prevRail, nextRail, ar, recv, recv, op.type, across,
                                               &ln.recv(railFrom), &ln.send(railTo), false}));
        tasks[p].push_back(ring::makeRingTask({op.fn, rank, ring.prev, ring.next, ag, recv, recv, op.type, plain,
                                               &ln.recv(ring.agFrom), &ln.send(ring.agTo), false}));
      }
      return makePipelineTask(std::move(tasks));
    });
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const Hierarchical h;
  return h;
}

}  // namespace strata::algorithms::hierarchical
