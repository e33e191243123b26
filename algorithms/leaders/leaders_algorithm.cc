// Leaders: small all-reduces across nodes. A chain reduce inside each node to its
// first rank (the leader), a one-shot among the leaders (one network message per
// pair of nodes, not per pair of ranks), a chain broadcast inside the node. It
// shares the node ring's links and lane with the hierarchical all-reduce.
#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/common/node_ring.h"
#include "algorithms/one_shot/one_shot_task.h"
#include "algorithms/ring/ring_task.h"
#include "device/dtypes.h"

namespace strata::algorithms::leaders {
namespace {

// The leader's scratch and links for the one-shot among leaders (its operations run one at a time).
struct LeaderState {
  std::vector<char> scratch;
  std::vector<transport::SendConnection*> to;  // by node
  std::vector<transport::RecvConnection*> from;
};

class Leaders final : public Algorithm {
 public:
  const char* name() const override { return "Leaders"; }
  bool serves(Collective c) const override { return c == Collective::kAllReduce; }
  bool applies(const TuneRequest& r) const override { return r.nodes > 1; }

  // (L-1) intra hops each way and N-1 network messages per leader, each carrying S.
  double costUs(const TuneRequest& r, Protocol) const override {
    double L = averageRanksPerNode(r);
    int N = r.nodes;
    double inside = 2 * (L - 1) * r.intra.latencyUs + 2 * transferUs(r.bytes, r.intra);
    double across = r.net.latencyUs * (1 + (N - 2) * kNetMessageHops) + transferUs((N - 1) * double(r.bytes), r.net);
    return inside + across;
  }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    const RankLayout& l = ctx.layout();
    int node = l.node(), li = l.localRank, N = l.numNodes();
    NodeRing nr = useNodeRing(ctx);
    uint64_t leaderId = linkId("leader");
    if (li == 0)
      for (int k = 0; k < N; ++k)
        if (k != node) {
          ctx.needRecv({l.nodeRanks(k)[0], leaderId});
          ctx.needSend({l.nodeRanks(k)[0], leaderId});
        }
    device::ReduceOp inside = op.op, across = op.op;
    inside.postDivide = 0;  // avg divides once, among the leaders
    across.preMultiply = false;
    RingParams ring;
    ring.nranks = nr.size;
    ring.pos = li;
    ring.length = op.count;
    ring.chunk = ctx.slotBytes() / device::dtypeSize(op.type);
    LeaderState& state = ctx.state<LeaderState>();
    if (state.scratch.size() < ctx.slotBytes()) state.scratch.resize(ctx.slotBytes());
    std::vector<int> leaders;
    for (int k = 0; k < N; ++k) leaders.push_back(l.nodeRanks(k)[0]);
    int rank = l.rank;
    char* scratch = state.scratch.data();
    size_t scratchBytes = state.scratch.size();
    LeaderState* s = &state;
    ctx.addTask(nodeLane(), [=](Links& ln) {
      std::vector<std::vector<std::unique_ptr<Task>>> tasks(1);
      RingParams reduce = ring, bcast = ring;
      reduce.coll = Collective::kReduce;
      bcast.coll = Collective::kBroadcast;
      bool several = nr.size > 1;
      auto* send = static_cast<const char*>(op.sendbuff);
      auto* recv = static_cast<char*>(op.recvbuff);
      tasks[0].push_back(ring::makeRingTask({op.fn, rank, nr.prev, nr.next, reduce, send, recv, op.type, inside,
                                             several ? &ln.recv(nr.rsFrom) : nullptr,
                                             several ? &ln.send(nr.rsTo) : nullptr, false}));
      if (li == 0) {  // the one-shot among leaders, indexed by node
        s->to.assign(N, nullptr);
        s->from.assign(N, nullptr);
        for (int k = 0; k < N; ++k)
          if (k != node) {
            s->to[k] = &ln.send({leaders[k], leaderId});
            s->from[k] = &ln.recv({leaders[k], leaderId});
          }
        one_shot::Exchange x{Collective::kAllReduce, node, N, 0, op.count, device::dtypeSize(op.type)};
        tasks[0].push_back(one_shot::makeOneShotTask(
            {op.fn, x, recv, recv, op.type, across, &s->to, &s->from, scratch, scratchBytes}));
      }
      if (several)
        tasks[0].push_back(ring::makeRingTask({op.fn, rank, nr.prev, nr.next, bcast, recv, recv, op.type,
                                               device::ReduceOp{}, &ln.recv(nr.agFrom), &ln.send(nr.agTo), false}));
      return makePipelineTask(std::move(tasks));
    });
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const Leaders leaders;
  return leaders;
}

}  // namespace strata::algorithms::leaders
