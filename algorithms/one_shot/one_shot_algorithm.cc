// One-shot collectives for small messages: every rank sends each peer its
// contribution to that peer's result (its pre-multiplied input for an all-reduce,
// piece j for rank j of a reduce-scatter, its piece of an all-gather; a broadcast's
// root to every rank, a reduce's ranks to the root) and finishes its own result from
// what arrives, reducing in rank order, over a mesh of small FIFOs (Simple) or, where
// every rank maps every other's memory, over flag-tagged words stored straight into
// the peers' regions (LL). So every collective the ring serves has an LL protocol
// on one host, as NCCL's ring has (NCCL_PROTO=LL).
#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/one_shot/one_shot_task.h"
#include "device/dtypes.h"

namespace strata::algorithms::one_shot {
namespace {

// The mesh carries small messages only: a few small slots keep n-1 of them cheap.
constexpr size_t kMeshSlotBytes = 64 << 10;
constexpr int kMeshSlots = 4;
constexpr size_t kLlRegionBytes = 2 * kLlWordsPerSlot * sizeof(uint64_t);
constexpr size_t kPreferredBytes = 1 << 20;

// Per communicator: this rank's prepared input (Simple), and the LL rounds.
struct OneShotState {
  std::vector<char> scratch = std::vector<char>(kMeshSlotBytes);
  std::vector<transport::SendConnection*> to;    // the mesh links, by rank
  std::vector<transport::RecvConnection*> from;
  LlMesh ll;
};

class OneShot final : public Algorithm {
 public:
  const char* name() const override { return "OneShot"; }
  bool serves(Collective c) const override { return traits(c).scheduled; }
  // The small-message algorithm: past kPreferredBytes it moves n - 1 copies where a
  // ring or a direct read moves one, and is taken only if NCCL_ALGO leaves nothing else.
  bool linksEveryRank() const override { return true; }
  bool preferred(const TuneRequest& r) const override { return r.bytes <= kPreferredBytes; }
  std::vector<Protocol> protocols() const override { return {Protocol::kSimple, Protocol::kLL}; }

  // One hop. An all-reduce rank writes its input to n-1 peers and reads n-1 inputs
  // back, (n-1) x bytes each way; a reduce-scatter or all-gather rank moves (n-1)/n of
  // the bytes each way; a broadcast's root writes, and a reduce's root reads, n-1
  // copies. Across nodes a node link carries L x (n - L) of those messages, and each
  // costs its system calls. LL skips the FIFO handshake (a fifth of the hop latency,
  // measured) and doubles the bytes.
  double costUs(const TuneRequest& r, Protocol p) const override {
    int n = r.nranks;
    double share = r.coll == Collective::kReduceScatter || r.coll == Collective::kAllGather ? 1.0 / n : 1.0;
    double perMessage = r.bytes * share;
    if (r.nodes > 1) {
      double L = averageRanksPerNode(r);
      double messages = (n - L) * r.net.latencyUs * kNetMessageHops + (L - 1) * r.intra.latencyUs;
      return r.net.latencyUs + messages + transferUs(L * (n - L) * perMessage, r.net);
    }
    double bytes = 2.0 * (n > 1 ? n - 1 : 0) * perMessage * (p == Protocol::kLL ? 2 : 1);
    double latency = r.intra.latencyUs * (p == Protocol::kLL ? 0.2 : 1.0);
    return latency + transferUs(bytes, r.intra);
  }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol p) const override {
    const RankLayout& l = ctx.layout();
    int n = l.nranks;
    bool ll = p == Protocol::kLL;
    constexpr uint64_t mesh = linkId("oneshot"), llId = linkId("oneshot.ll");
    for (int j = 0; j < n; ++j) {
      if (j == l.rank) continue;
      ctx.needSend({j, mesh}, {kMeshSlotBytes, kMeshSlots});
      ctx.needRecv({j, mesh}, {kMeshSlotBytes, kMeshSlots});
      if (ll) ctx.needRegion({j, llId}, kLlRegionBytes);
    }
    OneShotState& state = ctx.state<OneShotState>();
    Exchange x{op.coll, l.rank, n, op.root, op.count, device::dtypeSize(op.type)};
    OneShotArgs args{op.fn, x, static_cast<const char*>(op.sendbuff), static_cast<char*>(op.recvbuff),
                     op.type, op.op, &state.to, &state.from, state.scratch.data(), state.scratch.size()};
    ctx.addTask({mesh, 0}, [args, n, ll, s = &state](Links& ln) mutable {
      s->to.assign(n, nullptr);  // the same links every call: no allocation after the first
      s->from.assign(n, nullptr);
      for (int j = 0; j < n; ++j)
        if (j != args.x.rank) {
          s->to[j] = &ln.send({j, mesh});
          s->from[j] = &ln.recv({j, mesh});
        }
      LlMesh* llMesh = &s->ll;
      if (!ll) return makeOneShotTask(std::move(args));
      llMesh->in.assign(n, nullptr);
      llMesh->out.assign(n, nullptr);
      llMesh->outBells.assign(n, nullptr);
      llMesh->staging.resize((n + 1) * kLlWordsPerSlot * 4);
      for (int j = 0; j < n; ++j)
        if (j != args.x.rank) {
          llMesh->in[j] = static_cast<const uint64_t*>(ln.regionIn({j, llId}).data);
          transport::SharedRegion& out = ln.regionOut({j, llId});
          llMesh->out[j] = static_cast<uint64_t*>(out.data);
          llMesh->outBells[j] = out.peerBell.get();
        }
      return makeLlOneShotTask(std::move(args), llMesh);
    });
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const OneShot oneShot;
  return oneShot;
}

}  // namespace strata::algorithms::one_shot
