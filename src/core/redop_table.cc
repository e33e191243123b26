// Reduction ops: NCCL's built-ins and the pre-multiplied sums users create.
#include <cstring>

#include "base/error.h"
#include "core/redop_table.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::core {
namespace {

// Reads a scalar of `type` into the op's integer or floating slot; one in device
// memory (ncclScalarDevice) is copied out first, at the time the operation runs.
void readScalar(const void* p, ncclDataType_t type, device::ReduceOp* op) {
  char v[8];
  if (device::isDevicePointer(p))
    device::copySync(v, p, device::dtypeSize(type));
  else
    memcpy(v, p, device::dtypeSize(type));
  device::loadScalar(v, type, op);
}

}  // namespace

ncclRedOp_t RedOpTable::createPreMulSum(const void* scalar, ncclDataType_t type, ncclScalarResidence_t residence) {
  UserOp u{type, residence, {}, scalar, true};
  u.op.kind = device::ReduceKind::kSum;
  u.op.preMultiply = true;
  if (residence == ncclScalarHostImmediate) readScalar(scalar, type, &u.op);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (!ops_[i].live) {  // reuse freed ids so create/destroy loops do not grow the table
      ops_[i] = u;
      return static_cast<ncclRedOp_t>(ncclNumOps + i);
    }
  }
  STRATA_REQUIRE(ops_.size() < 1u << 20, ncclInvalidUsage,
                 "ncclRedOpCreatePreMulSum: rank %d has 2^20 live ops; destroy some with ncclRedOpDestroy", rank_);
  ops_.push_back(u);
  return static_cast<ncclRedOp_t>(ncclNumOps + ops_.size() - 1);
}

bool RedOpTable::isUserOp(ncclRedOp_t op) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = static_cast<size_t>(op) - ncclNumOps;
  return op >= ncclNumOps && i < ops_.size() && ops_[i].live;
}

void RedOpTable::destroy(ncclRedOp_t op) {
  STRATA_REQUIRE(isUserOp(op), ncclInvalidArgument,
                 "ncclRedOpDestroy: rank %d: op %d was not created by ncclRedOpCreatePreMulSum on this communicator "
                 "(or was already destroyed)",
                 rank_, static_cast<int>(op));
  std::lock_guard<std::mutex> lock(mu_);
  ops_[op - ncclNumOps].live = false;
}

// Everything about an op but a device scalar's value, which is read when the
// operation runs; validates a user op against the datatype.
OpDesc::Pinned RedOpTable::pin(ncclRedOp_t op, ncclDataType_t type, const char* fn) const {
  OpDesc::Pinned p;
  p.set = true;
  switch (op) {
    case ncclSum: p.op.kind = device::ReduceKind::kSum; return p;
    case ncclProd: p.op.kind = device::ReduceKind::kProd; return p;
    case ncclMax: p.op.kind = device::ReduceKind::kMax; return p;
    case ncclMin: p.op.kind = device::ReduceKind::kMin; return p;
    case ncclAvg:
      p.op.kind = device::ReduceKind::kSum;
      p.op.postDivide = nranks_;
      return p;
    default: break;
  }
  STRATA_REQUIRE(isUserOp(op), ncclInvalidArgument, "%s: rank %d: unknown reduction op %d", fn, rank_,
                 static_cast<int>(op));
  std::lock_guard<std::mutex> lock(mu_);
  const UserOp& u = ops_[op - ncclNumOps];
  STRATA_REQUIRE(u.type == type, ncclInvalidArgument,
                 "%s: rank %d: op %d was created for %s but is used with %s", fn, rank_, static_cast<int>(op),
                 device::dtypeName(u.type), device::dtypeName(type));
  p.op = u.op;
  if (u.residence == ncclScalarDevice) p.deviceScalar = u.scalarPtr;
  return p;
}

device::ReduceOp RedOpTable::resolve(ncclRedOp_t op, ncclDataType_t type, const char* fn) const {
  OpDesc::Pinned p = pin(op, type, fn);
  if (p.deviceScalar) readScalar(p.deviceScalar, type, &p.op);
  return p.op;
}

OpDesc::Pinned RedOpTable::pin(const OpDesc& op) const { return pin(op.op, op.type, op.fn); }

device::ReduceOp RedOpTable::opFor(const OpDesc& op, bool deferDevice) const {
  OpDesc::Pinned p = op.pinned.set ? op.pinned : pin(op);
  device::ReduceOp r = p.op;
  if (p.deviceScalar && deferDevice) r.scalarAt = p.deviceScalar;
  else if (p.deviceScalar) readScalar(p.deviceScalar, op.type, &r);
  return r;
}

}  // namespace strata::core
