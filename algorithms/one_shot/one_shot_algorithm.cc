// One-shot all-reduce for small messages: every rank sends its (pre-multiplied)
// input to every peer and reduces the n contributions itself in rank order, over
// a mesh of small FIFOs (Simple) or, where every rank maps every other's memory,
// over flag-tagged words stored straight into the peers' regions (LL).
#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/one_shot/one_shot_task.h"

namespace strata::algorithms::one_shot {
namespace {

// The mesh carries small messages only: a few small slots keep n-1 of them cheap.
constexpr size_t kMeshSlotBytes = 64 << 10;
constexpr int kMeshSlots = 4;
constexpr size_t kLlRegionBytes = 2 * kLlWordsPerSlot * sizeof(uint64_t);

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
  bool serves(Collective c) const override { return c == Collective::kAllReduce; }
  std::vector<Protocol> protocols() const override { return {Protocol::kSimple, Protocol::kLL}; }

  // One hop, but every rank writes its input to n-1 peers and reads n-1 inputs back,
  // so it moves (n-1) x bytes each way; across nodes a node link carries L x (n - L)
  // copies, and each network message costs its system calls. LL skips the FIFO
  // handshake (a fifth of the hop latency, measured) and doubles the bytes.
  double costUs(const TuneRequest& r, Protocol p) const override {
    int n = r.nranks;
    if (r.nodes > 1) {
      double L = averageRanksPerNode(r);
      double messages = (n - L) * r.net.latencyUs * kNetMessageHops + (L - 1) * r.intra.latencyUs;
      return r.net.latencyUs + messages + transferUs(L * (n - L) * r.bytes, r.net);
    }
    double bytes = 2.0 * (n > 1 ? n - 1 : 0) * r.bytes * (p == Protocol::kLL ? 2 : 1);
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
    OneShotArgs args{op.fn, l.rank, static_cast<const char*>(op.sendbuff), static_cast<char*>(op.recvbuff), op.count,
                     op.type, op.op, &state.to, &state.from, state.scratch.data(), state.scratch.size()};
    ctx.addTask({mesh, 0}, [args, n, ll, s = &state](Links& ln) mutable {
      s->to.assign(n, nullptr);  // the same links every call: no allocation after the first
      s->from.assign(n, nullptr);
      for (int j = 0; j < n; ++j)
        if (j != args.rank) {
          s->to[j] = &ln.send({j, mesh});
          s->from[j] = &ln.recv({j, mesh});
        }
      LlMesh* llMesh = &s->ll;
      if (!ll) return makeOneShotTask(std::move(args));
      llMesh->in.assign(n, nullptr);
      llMesh->out.assign(n, nullptr);
      llMesh->outBells.assign(n, nullptr);
      llMesh->staging.resize(n * kLlWordsPerSlot * 4);
      for (int j = 0; j < n; ++j)
        if (j != args.rank) {
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
