// A communicator's reduction ops: NCCL's built-ins and the pre-multiplied sums
// users create (ncclRedOpCreatePreMulSum), as the device layer applies them.
#pragma once

#include <mutex>
#include <vector>

#include "core/op.h"
#include "device/cpu_reduce.h"
#include "nccl.h"

namespace strata::core {

class RedOpTable {
 public:
  RedOpTable(int rank, int nranks) : rank_(rank), nranks_(nranks) {}

  ncclRedOp_t createPreMulSum(const void* scalar, ncclDataType_t type, ncclScalarResidence_t residence);
  void destroy(ncclRedOp_t op);
  bool isUserOp(ncclRedOp_t op) const;
  // The op as the device layer applies it; validates it against the datatype.
  device::ReduceOp resolve(ncclRedOp_t op, ncclDataType_t type, const char* fn) const;
  // Resolves now what can be (a device scalar's address is kept, not read).
  OpDesc::Pinned pin(const OpDesc& op) const;
  // The reduction an operation runs with: its pinned one (reading a device scalar
  // now), else resolved now.
  // `deferDevice`: an ncclScalarDevice scalar is not read here but left to the
  // kernel (ReduceOp::scalarAt).
  device::ReduceOp opFor(const OpDesc& op, bool deferDevice = false) const;

 private:
  OpDesc::Pinned pin(ncclRedOp_t op, ncclDataType_t type, const char* fn) const;

  struct UserOp {
    ncclDataType_t type;
    ncclScalarResidence_t residence;
    device::ReduceOp op;    // with the scalar, for ncclScalarHostImmediate
    const void* scalarPtr;  // read when the op runs, for ncclScalarDevice
    bool live;
  };
  int rank_, nranks_;
  mutable std::mutex mu_;
  std::vector<UserOp> ops_;
};

}  // namespace strata::core
