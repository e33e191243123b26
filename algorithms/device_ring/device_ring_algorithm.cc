// DeviceRing: all-reduce, all-gather, reduce-scatter, broadcast and reduce on device
// buffers between the GPUs of a node, as one pipelined kernel on the caller's stream
// (device/kernel_pipe.h, the ring): channels on most SMs, each a ring of FIFOs whose
// every message is flagged on its own, the combine and the push to the next rank in
// one pass. Any number of ranks, each mapping only its neighbours' regions. The
// device algorithm NCCL_ALGO=Ring (and Tree: a node's tree is a chain in NCCL too) selects.
#include "algorithms/algorithm.h"
#include "algorithms/common/pipe_plan.h"

namespace strata::algorithms::device_ring {
namespace {

using device::KernelPipe;

class DeviceRing final : public Algorithm {
 public:
  const char* name() const override { return "DeviceRing"; }
  std::vector<const char*> aliases() const override { return {"Ring", "Tree"}; }
  bool serves(Collective c) const override { return traits(c).scheduled; }
  bool deviceMemory() const override { return true; }
  bool streamOrdered() const override { return true; }
  bool optional() const override { return true; }
  bool applies(const TuneRequest& r) const override {
    return r.streamOrdered && r.ownGpus && r.nodes == 1 && r.nranks > 1;
  }
  std::vector<Protocol> protocols() const override { return {Protocol::kSimple}; }
  double costUs(const TuneRequest& r, Protocol) const override { return pipeCostUs(r, KernelPipe::kRing); }
  bool warmUp(PlanContext& ctx) const override { return pipeWarmUp(ctx); }
  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    planPipe(ctx, op, KernelPipe::kRing);
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const DeviceRing d;
  return d;
}

}  // namespace strata::algorithms::device_ring
