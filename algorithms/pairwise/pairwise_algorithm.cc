// Pairwise transfers: ncclSend/ncclRecv, and all-to-all, gather and scatter as
// one send and one receive per peer pair plus the local piece. Not a choice
// NCCL_ALGO makes: it is how point-to-point work is done.
#include <cstring>

#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/common/local_copy.h"
#include "algorithms/pairwise/p2p_plan.h"
#include "algorithms/pairwise/p2p_task.h"
#include "base/mutation.h"
#include "device/dtypes.h"

namespace strata::algorithms::pairwise {
namespace {

bool overlaps(const void* a, const void* b, size_t bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

P2pTaskArgs::Mode modeFor(PlanContext& ctx, int peer, size_t bytes, bool fanOut) {
  if (ctx.putBytes() == 0 || bytes < ctx.putBytes()) return P2pTaskArgs::Mode::kSlots;
  uint32_t caps = ctx.linkCapabilities(peer);
  // Reads where the link has them: where one rank serves several (they copy in
  // parallel), and for a transfer of less than a slot, which the sender pushes
  // through the slots as it exposes it where a read would cost more than the two
  // copies (private memory between processes), with no wait for the offer that a
  // write waits for.
  if ((fanOut || bytes < ctx.slotBytes()) && (caps & transport::kGet)) return P2pTaskArgs::Mode::kGet;
  return caps & transport::kPut ? P2pTaskArgs::Mode::kPut : P2pTaskArgs::Mode::kSlots;
}

// The task's arguments both ends build alike from the count, the link and the shape.
P2pTaskArgs argsFor(PlanContext& ctx, const char* fn, char* buf, size_t bytes, int peer, P2pShape shape) {
  P2pTaskArgs a{fn, ctx.layout().rank, peer, buf, bytes, nullptr, nullptr};
  a.mode = modeFor(ctx, peer, bytes, shape.fanOut);
  a.kind = shape.balanced ? transport::Transfer::kBalanced : transport::Transfer::kIndependent;
  return a;
}

}  // namespace

void addSend(PlanContext& ctx, const char* fn, const char* buf, size_t bytes, int peer, P2pShape shape) {
  const RankLayout& l = ctx.layout();
  if (peer == l.rank) return ctx.selfSend(fn, buf, bytes);
  LinkKey k{peer, linkId("p2p")};
  ctx.needSend(k);
  P2pTaskArgs a = argsFor(ctx, fn, const_cast<char*>(buf), bytes, peer, shape);
  ctx.addTask({linkId("p2p.send"), peer}, [a, k](Links& ln) mutable {
    a.send = &ln.send(k);
    if (a.mode == P2pTaskArgs::Mode::kGet) a.reg = ln.registration(k, a.buffer, a.bytes);
    return makeP2pTask(a);
  });
}

void addRecv(PlanContext& ctx, const char* fn, char* buf, size_t bytes, int peer, P2pShape shape) {
  const RankLayout& l = ctx.layout();
  if (peer == l.rank) return ctx.selfRecv(fn, buf, bytes);
  LinkKey k{peer, linkId("p2p")};
  ctx.needRecv(k);
  P2pTaskArgs a = argsFor(ctx, fn, buf, bytes, peer, shape);
  ctx.addTask({linkId("p2p.recv"), peer}, [a, k](Links& ln) mutable {
    a.recv = &ln.recv(k);
    if (a.mode == P2pTaskArgs::Mode::kPut) a.reg = ln.registration(k, a.buffer, a.bytes);
    return makeP2pTask(a);
  });
}

namespace {

// Each peer's piece is sent and received; this rank's own piece is copied locally
// while they move. In place, the peers' pieces are sent from a copy (their places
// receive), and this rank's own piece is where it belongs already.
void planAllToAll(PlanContext& ctx, const char* fn, const char* src, char* dst, size_t piece) {
  int n = ctx.layout().nranks, r = ctx.layout().rank;
  const bool inPlace = src == dst && piece > 0;
  if (inPlace ? n > 1 : overlaps(src, dst, piece * n)) {
    char* copy = ctx.scratch(piece * n);
    if (inPlace) {
      memcpy(copy, src, piece * r);
      memcpy(copy + (r + 1) * piece, src + (r + 1) * piece, piece * (n - r - 1));
    } else {
      memcpy(copy, src, piece * n);
    }
    ctx.workedWhilePlanning();
    src = copy;
  }
  const int stays = mutated(Mutation::kAllToAllUntransposed) ? (r + 1) % n : -1;
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    if (j == stays) {  // the mutation stage's fault: the block for j stays, j's block goes nowhere
      addSend(ctx, fn, src + j * piece, piece, j);
      addRecv(ctx, fn, ctx.scratch(piece), piece, j);
      addLocalCopy(ctx, fn, dst + j * piece, src + j * piece, piece);
      continue;
    }
    // Not marked balanced: its one-sided writes through the slots wait for the
    // receiver's offer first, and took 1.03-1.18x CMA's time at 2 ranks, 512 KiB-2 MiB
    // (docs/perf.md, "Exchanges through the slots from 256 KiB").
    addSend(ctx, fn, src + j * piece, piece, j);
    addRecv(ctx, fn, dst + j * piece, piece, j);
  }
  if (!inPlace) addLocalCopy(ctx, fn, dst + r * piece, src + r * piece, piece);
}

class Pairwise final : public Algorithm {
 public:
  const char* name() const override { return "Pairwise"; }
  bool serves(Collective c) const override { return !traits(c).scheduled; }
  bool selectable() const override { return false; }

  // Every rank exchanges with its peers concurrently.
  double costUs(const TuneRequest& r, Protocol) const override {
    int n = r.nranks;
    const LinkModel l = slowestLink(r);
    double wireBytes = r.coll == Collective::kSendRecv ? r.bytes : static_cast<double>(n - 1) / n * r.bytes;
    return l.latencyUs * (n > 1 ? n - 1 : 1) + transferUs(wireBytes, l);
  }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    int n = ctx.layout().nranks, r = ctx.layout().rank;
    size_t piece = op.count * device::dtypeSize(op.type);
    const char* src = static_cast<const char*>(op.sendbuff);
    char* dst = static_cast<char*>(op.recvbuff);
    if (op.kind == CollectiveOp::Kind::kSend) return addSend(ctx, op.fn, src, piece, op.root);
    if (op.kind == CollectiveOp::Kind::kRecv) return addRecv(ctx, op.fn, dst, piece, op.root);
    switch (op.coll) {
      case Collective::kAllToAll:
        planAllToAll(ctx, op.fn, src, dst, piece);
        break;
      case Collective::kGather: {
        if (r != op.root) return addSend(ctx, op.fn, src, piece, op.root);
        // The mutation stage's fault: the pieces of the root's next two ranks change places.
        auto place = [&](int j) {
          int a = (r + 1) % n, b = (r + 2) % n;
          if (!mutated(Mutation::kGatherSwap) || n < 2) return j;
          return j == a ? b : j == b ? a : j;
        };
        for (int j = 0; j < n; ++j)
          if (j != r) addRecv(ctx, op.fn, dst + place(j) * piece, piece, j);
        addLocalCopy(ctx, op.fn, dst + place(r) * piece, src, piece);
        break;
      }
      default:  // scatter: the receivers read their pieces out of the root's buffer
        if (r != op.root) return addRecv(ctx, op.fn, dst, piece, op.root, {.fanOut = true});
        for (int j = 0; j < n; ++j)
          if (j != r) addSend(ctx, op.fn, src + j * piece, piece, j, {.fanOut = true});
        addLocalCopy(ctx, op.fn, dst, src + r * piece, piece);
        break;
    }
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const Pairwise pairwise;
  return pairwise;
}

}  // namespace strata::algorithms::pairwise
