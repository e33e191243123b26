// Copy and element-wise reduction on host memory for every NCCL type and op.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"

namespace strata::device {

enum class ReduceKind { kSum, kProd, kMax, kMin };

// A reduction as the executor applies it: a base operation, an optional
// scalar that multiplies each rank's own input (ncclRedOpCreatePreMulSum),
// and an optional divisor applied to the final result (ncclAvg).
struct ReduceOp {
  ReduceKind kind = ReduceKind::kSum;
  bool preMultiply = false;
  double scalarF = 1.0;  // scalar for floating types
  int64_t scalarI = 1;   // scalar for integer types
  int postDivide = 0;    // 0: none; n: divide the result by n
  // ncclScalarDevice on the device-driven path: the scalar's address, read by the
  // kernel when it runs (so in stream order, and anew at every graph replay).
  const void* scalarAt = nullptr;
};

// The op's scalar slots from a value of `type` at `p` (host-readable memory).
void loadScalar(const void* p, ncclDataType_t type, ReduceOp* op);

// dst[i] = prepare(src[i]): a copy, or src * scalar for a pre-multiplied sum.
void prepare(void* dst, const void* src, size_t count, ncclDataType_t type, const ReduceOp& op);
// dst[i] = acc[i] OP prepare(local[i]). dst may equal acc or local.
void reduce(void* dst, const void* acc, const void* local, size_t count, ncclDataType_t type, const ReduceOp& op);
// memcpy that bypasses the caches (non-temporal stores) where dst allows it: for
// outputs too large to stay cached, it saves reading each line before writing it.
void copyStreaming(void* dst, const void* src, size_t bytes);

// dst = inputs[0] OP inputs[1] OP ... OP inputs[n-1], in that order (so every rank
// that combines the same inputs gets the same bits), then finalize(). The inputs are
// already prepared: the op's pre-multiplication is not applied again.
void reduceInOrder(void* dst, const void* const* inputs, int n, size_t count, ncclDataType_t type,
                   const ReduceOp& op);

// dst[i] = dst[i] / postDivide, when the op asks for it.
void finalize(void* dst, size_t count, ncclDataType_t type, const ReduceOp& op);

}  // namespace strata::device
