// Broadcast on one host by direct reads: the root exposes its input and every
// other rank copies the whole buffer straight out of it at once (CMA between
// processes, a plain copy between threads), while the root copies its own output.
// Every rank writes the S bytes of its output once and no rank writes more, where
// the ring's root writes 2S (its output and its successor's) and the chain waits
// chunk by chunk. Where a pair has no one-sided reads (the kernel forbids CMA)
// the same transfers go through the slots.
#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/common/local_copy.h"
#include "algorithms/pairwise/p2p_plan.h"
#include "base/config.h"
#include "device/dtypes.h"

namespace strata::algorithms::direct_read {
namespace {

class DirectRead final : public Algorithm {
 public:
  const char* name() const override { return "DirectRead"; }
  bool serves(Collective c) const override { return c == Collective::kBroadcast; }

  // One host, host memory (not a GPU machine's prediction), and large enough to
  // move one-sided (STRATA_PUT_BYTES).
  bool applies(const TuneRequest& r) const override {
    size_t from = config().putBytes;
    return r.nodes == 1 && r.nranks > 1 && r.sharedMemory && !r.deviceBuffers && !r.gpuMachine && from > 0 &&
           r.bytes >= from;
  }

  // One hop; the busiest rank (any of them) writes S, half of what the ring's root
  // writes, and the readers run in parallel.
  double costUs(const TuneRequest& r, Protocol) const override {
    return r.intra.latencyUs + transferUs(r.bytes, r.intra) / 2;
  }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    const RankLayout& l = ctx.layout();
    size_t bytes = op.count * device::dtypeSize(op.type);
    const char* src = static_cast<const char*>(op.sendbuff);
    char* dst = static_cast<char*>(op.recvbuff);
    if (l.rank != op.root) return pairwise::addRecv(ctx, op.fn, dst, bytes, op.root, true);
    for (int j = 0; j < l.nranks; ++j)
      if (j != l.rank) pairwise::addSend(ctx, op.fn, src, bytes, j, true);
    addLocalCopy(ctx, op.fn, dst, src, bytes);
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const DirectRead directRead;
  return directRead;
}

}  // namespace strata::algorithms::direct_read
