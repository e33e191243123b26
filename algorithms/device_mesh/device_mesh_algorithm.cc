// DeviceMesh: every collective on device buffers between the GPUs of a node (up to
// KernelPipe::kMaxMesh), as one pipelined kernel on the caller's stream
// (device/kernel_pipe.h, the mesh): all-reduce as two-shot (each rank reduces a
// slice of every rank's input and writes the result to its output and every peer's
// slot in one pass), the others as direct pushes. Three steps where the ring takes
// 2 (n - 1): the all-reduce of small and middling sizes, and what NCCL_ALGO=NVLS
// selects (NCCL's NVLS has the NVSwitch reduce; here the GPUs do). Protocol LL (the
// smallest all-reduces, all-gathers and reduce-scatters; NCCL_PROTO=LL) is the LL
// kernel: one trip per round and no fence (device/kernel_ll.h).
#include "algorithms/algorithm.h"
#include "algorithms/common/pipe_plan.h"

namespace strata::algorithms::device_mesh {
namespace {

using device::KernelPipe;

class DeviceMesh final : public Algorithm {
 public:
  const char* name() const override { return "DeviceMesh"; }
  std::vector<const char*> aliases() const override { return {"NVLS"}; }
  bool serves(Collective c) const override { return c != Collective::kSendRecv; }
  bool deviceMemory() const override { return true; }
  bool streamOrdered() const override { return true; }
  bool optional() const override { return true; }
  bool applies(const TuneRequest& r) const override {
    return r.streamOrdered && r.ownGpus && r.nodes == 1 && r.nranks > 1 && r.nranks <= KernelPipe::kMaxMesh;
  }
  std::vector<Protocol> protocols() const override { return {Protocol::kSimple, Protocol::kLL}; }
  double costUs(const TuneRequest& r, Protocol p) const override { return pipeCostUs(r, algoOf(p)); }
  bool warmUp(PlanContext& ctx) const override { return pipeWarmUp(ctx); }
  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol p) const override { planPipe(ctx, op, algoOf(p)); }

 private:
  // LL (all-reduce, all-gather, reduce-scatter: pipeCostUs has any other cost nothing)
  // is its own kernel.
  static int algoOf(Protocol p) { return p == Protocol::kLL ? KernelPipe::kMeshLL : KernelPipe::kMesh; }
};

}  // namespace

const Algorithm& algorithm() {
  static const DeviceMesh d;
  return d;
}

}  // namespace strata::algorithms::device_mesh
