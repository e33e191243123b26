// DeviceSelf: every collective of a one-rank communicator on device buffers, on
// the caller's stream: the output is the input (a reduction of one input is that
// input, an average divides by one), so it is one copy, or the pre-multiplication
// of ncclRedOpCreatePreMulSum, and nothing in place; a send to itself meets its
// receive as one copy on the stream, in call order. Without it such a call went
// through the device proxy, staged through host memory: on an H200, 85 us for 8
// bytes and 2.6 GB/s at 128 MiB, where NVIDIA's NCCL copies at 1970 GB/s.
#include "algorithms/algorithm.h"
#include "algorithms/common/kernel_task.h"
#include "base/error.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::algorithms::device_self {
namespace {

// A kernel launch; and the copy's rate in bytes read plus written per microsecond
// (a device-to-device copy, about 4 TB/s read + written on an H200).
constexpr double kLaunchUs = 3.0;
constexpr double kCopyBytesPerUs = 2.0e6;
constexpr uint64_t kLane = linkId("device.self");

class DeviceSelf final : public Algorithm {
 public:
  const char* name() const override { return "DeviceSelf"; }
  bool serves(Collective) const override { return true; }
  bool deviceMemory() const override { return true; }
  bool streamOrdered() const override { return true; }
  bool applies(const TuneRequest& r) const override { return r.streamOrdered && r.nranks == 1; }
  double costUs(const TuneRequest& r, Protocol) const override {
    return kLaunchUs + 2.0 * static_cast<double>(r.bytes) / kCopyBytesPerUs;
  }
  // Only a one-rank communicator without a GPU goes without it (larger ones never ask).
  bool warmUp(PlanContext& ctx) const override { return ctx.layout().nranks > 1 || ctx.device() >= 0; }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    if (op.coll == Collective::kSendRecv) return planSelf(ctx, op);
    if (op.recvbuff == op.sendbuff && !op.op.preMultiply) return;  // in place: already the result
    const void* src = op.sendbuff;
    void* dst = op.recvbuff;
    size_t count = op.count;
    ncclDataType_t type = op.type;
    bool scale = traits(op.coll).reducing && op.op.preMultiply;
    device::ReduceOp how = op.op;
    void* stream = ctx.deviceStream();
    ctx.addTask({kLane, 0}, [=, fn = op.fn, dev = ctx.device()](Links&) {
      return std::make_unique<KernelTask>(fn, dev, [=] {
        if (scale) device::gpuPrepare(dst, src, count, type, how, stream);
        else device::gpuCopy(dst, src, count * device::dtypeSize(type), stream);
      });
    });
  }

 private:
  static void planSelf(PlanContext& ctx, const CollectiveOp& op) {
    STRATA_REQUIRE(op.root == 0, ncclInvalidArgument, "%s: rank 0: peer %d is not a rank of this communicator of 1",
                   op.fn, op.root);
    size_t bytes = op.count * device::dtypeSize(op.type);
    if (op.kind == CollectiveOp::Kind::kSend) ctx.selfSend(op.fn, op.sendbuff, bytes);
    else ctx.selfRecv(op.fn, op.recvbuff, bytes);
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const DeviceSelf d;
  return d;
}

}  // namespace strata::algorithms::device_self
