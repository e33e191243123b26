// Broadcast and all-gather on one host by direct reads: a rank exposes its input
// and the ranks that need it copy it straight out (CMA between processes, a plain
// copy between threads), all at once, while each rank copies its own piece.
// Every rank writes the S bytes of its output once. Broadcast: the ring's root
// writes 2S (its output and its successor's) and the chain waits chunk by chunk.
// All-gather: the same bytes as the ring's, but in one step instead of a chain of
// n - 1 in which a rank waits for its predecessor's copy before it can start its
// own (docs/perf.md, "Large ring writes through the slots": the figures by size
// and rank count, and why it is not preferred from 32 MiB). Where a pair has no one-sided reads (the kernel forbids CMA) the
// same transfers go through the slots.
#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/common/local_copy.h"
#include "algorithms/pairwise/p2p_plan.h"
#include "base/config.h"
#include "device/dtypes.h"

namespace strata::algorithms::direct_read {
namespace {

constexpr size_t kPreferredBelowBytes = size_t{32} << 20;

class DirectRead final : public Algorithm {
 public:
  const char* name() const override { return "DirectRead"; }
  bool serves(Collective c) const override { return c == Collective::kBroadcast || c == Collective::kAllGather; }

  // One host, host memory (not a GPU machine's prediction), and large enough to move
  // one-sided (STRATA_PUT_BYTES).
  bool applies(const TuneRequest& r) const override {
    size_t from = config().putBytes;
    return r.nodes == 1 && r.nranks > 1 && r.sharedMemory && !r.deviceBuffers && !r.gpuMachine && from > 0 &&
           r.bytes >= from;
  }
  // Between processes, smaller than the last-level cache (32 MiB, a constant so that
  // every rank and strata-topo agree). From there a read out of another process's
  // private memory runs from memory to memory at 0.4-0.6x memcpy's rate, and the
  // ring, whose writes there go through its slots, took 0.65-0.8x DirectRead's time
  // on 2 and 4 processes (32-128 MiB; docs/perf.md, "Large ring writes through the
  // slots"). Below, its reads out of ncclMemAlloc memory are plain copies, and those
  // of a balanced exchange out of private memory go through the slots (docs/perf.md,
  // "Exchanges through the slots from 256 KiB"). Threads read with plain copies:
  // there DirectRead's broadcast took 0.74-1.0x the ring's time. NCCL_ALGO may still
  // force it.
  bool linksEveryRank() const override { return true; }
  bool preferred(const TuneRequest& r) const override { return r.oneProcess || r.bytes < kPreferredBelowBytes; }

  double costUs(const TuneRequest& r, Protocol) const override {
    // One hop; the busiest rank (any of them) writes S, half of what the ring's root
    // writes, and the readers run in parallel.
    if (r.coll == Collective::kBroadcast) return r.intra.latencyUs + transferUs(r.bytes, r.intra) / 2;
    // All-gather: the ring's bytes in one step of two hops (the exposure, the reads'
    // completion): the ring's n - 1 hops cost no more up to 3 ranks, and win the tie.
    double n = r.nranks;
    return 2 * r.intra.latencyUs + transferUs((n - 1) / n * r.bytes, r.intra);
  }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    const RankLayout& l = ctx.layout();
    size_t bytes = op.count * device::dtypeSize(op.type);
    const char* src = static_cast<const char*>(op.sendbuff);
    char* dst = static_cast<char*>(op.recvbuff);
    // Balanced, so reads out of private memory may go through the slots: all-gather
    // (each rank reads as much as it serves) and a broadcast of two ranks (the root
    // serves one reader, so its copy into the slots costs what its reader's costs).
    const pairwise::P2pShape shape{.fanOut = true,
                                   .balanced = op.coll == Collective::kAllGather || l.nranks == 2};
    if (op.coll == Collective::kAllGather) {  // bytes: one rank's piece; in place, its own is there already
      for (int j = 0; j < l.nranks; ++j) {
        if (j == l.rank) continue;
        pairwise::addSend(ctx, op.fn, src, bytes, j, shape);
        pairwise::addRecv(ctx, op.fn, dst + j * bytes, bytes, j, shape);
      }
      return addLocalCopy(ctx, op.fn, dst + l.rank * bytes, src, bytes);
    }
    if (l.rank != op.root) return pairwise::addRecv(ctx, op.fn, dst, bytes, op.root, shape);
    for (int j = 0; j < l.nranks; ++j)
      if (j != l.rank) pairwise::addSend(ctx, op.fn, src, bytes, j, shape);
    addLocalCopy(ctx, op.fn, dst, src, bytes);
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const DirectRead directRead;
  return directRead;
}

}  // namespace strata::algorithms::direct_read
