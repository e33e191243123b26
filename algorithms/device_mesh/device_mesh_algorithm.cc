// DeviceMesh: every collective on device buffers between the GPUs of a node (up to
// KernelPipe::kMaxMesh), as one pipelined kernel on the caller's stream
// (device/kernel_pipe.h, the mesh): all-reduce as two-shot (each rank reduces a
// slice of every rank's input and writes the result to its output and every peer's
// slot in one pass), the others as direct pushes. Three steps where the ring takes
// 2 (n - 1): the all-reduce of small and middling sizes, and what NCCL_ALGO=NVLS
// selects (NCCL's NVLS has the NVSwitch reduce; here the GPUs do).
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
  std::vector<Protocol> protocols() const override { return {Protocol::kSimple}; }
  double costUs(const TuneRequest& r, Protocol) const override { return pipeCostUs(r, KernelPipe::kMesh); }
  bool warmUp(PlanContext& ctx) const override { return pipeWarmUp(ctx); }
  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    planPipe(ctx, op, KernelPipe::kMesh);
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const DeviceMesh d;
  return d;
}

}  // namespace strata::algorithms::device_mesh
