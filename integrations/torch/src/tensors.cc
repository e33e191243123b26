#include "tensors.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace strata::torch_backend {
namespace {

ncclDataType_t nativeType(at::ScalarType t) {
  switch (t) {
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    default: return ncclNumTypes;
  }
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    default: return "this operator";
  }
}

double premulFactor(const c10d::ReduceOp& op, int rank, const char* call) {
  auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  if (!sup) fail(rank, call, "PREMUL_SUM without its factor (make it with torch.distributed._make_nccl_premul_sum)");
  return sup->tensor_factors.empty() ? sup->double_factor : sup->tensor_factors.at(0).item<double>();
}

}  // namespace

void fail(int rank, const char* call, const std::string& what) {
  throw std::runtime_error("Strata backend: rank " + std::to_string(rank) + ": " + call + ": " + what);
}

void check(ncclResult_t r, int rank, const char* call) {
  if (r == ncclSuccess) return;
  const char* last = ncclGetLastError(nullptr);
  fail(rank, call, std::string(ncclGetErrorString(r)) + (last && *last ? std::string(": ") + last : std::string()));
}

void grouped(int rank, const char* call, const std::function<void()>& calls) {
  check(ncclGroupStart(), rank, call);
  try {
    calls();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  check(ncclGroupEnd(), rank, call);
}

void checkCpu(const at::Tensor& t, int rank, const char* call) {
  if (!t.defined()) fail(rank, call, "a tensor is undefined");
  if (!t.device().is_cpu())
    fail(rank, call, "tensors must be on the CPU (this backend serves host memory; use \"nccl\" for GPU tensors)");
  if (t.layout() != at::kStrided) fail(rank, call, "sparse tensors are not supported");
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, int rank, const char* call) {
  if (tensors.size() != 1)
    fail(rank, call, "expects exactly one tensor per call, got " + std::to_string(tensors.size()));
  checkCpu(tensors[0], rank, call);
  return tensors[0];
}

ReduceSpec reduceSpec(at::ScalarType t, const c10d::ReduceOp& op, int rank, const char* call) {
  ReduceSpec s{nativeType(t), ncclSum, t};
  auto kind = static_cast<c10d::ReduceOp::RedOpType>(op.op_);
  if (t == at::kShort) {
    s = {ncclInt32, ncclSum, at::kInt};  // exact: int16 arithmetic is int32's modulo 2^16
  } else if (t == at::kBool) {
    s = {ncclUint8, ncclSum, at::kByte};
    if (kind == c10d::ReduceOp::SUM) kind = c10d::ReduceOp::MAX;  // logical or
    else if (kind == c10d::ReduceOp::PRODUCT) kind = c10d::ReduceOp::MIN;  // logical and
    else if (kind == c10d::ReduceOp::AVG || kind == c10d::ReduceOp::PREMUL_SUM)
      fail(rank, call, "AVG and PREMUL_SUM are not defined on bool tensors");
  } else if (at::isComplexType(t)) {
    if (kind != c10d::ReduceOp::SUM && kind != c10d::ReduceOp::AVG && kind != c10d::ReduceOp::PREMUL_SUM)
      fail(rank, call, "complex tensors reduce with SUM, AVG or PREMUL_SUM only");
    at::ScalarType real = at::toRealValueType(t);
    s = {nativeType(real), ncclSum, real, true};
  }
  if (s.type == ncclNumTypes)
    fail(rank, call, std::string("NCCL has no data type for ") + c10::toString(t) + " to reduce");
  switch (kind) {
    case c10d::ReduceOp::SUM: s.op = ncclSum; break;
    case c10d::ReduceOp::PRODUCT: s.op = ncclProd; break;
    case c10d::ReduceOp::MIN: s.op = ncclMin; break;
    case c10d::ReduceOp::MAX: s.op = ncclMax; break;
    case c10d::ReduceOp::AVG: s.op = ncclAvg; break;
    case c10d::ReduceOp::PREMUL_SUM:
      s.op = ncclSum;
      s.premul = true;
      s.factor = premulFactor(op, rank, call);
      break;
    default:
      fail(rank, call, std::string("NCCL has no ") + opName(kind) + " reduction (SUM, PRODUCT, MIN, MAX, AVG and "
                       "PREMUL_SUM are supported)");
  }
  return s;
}

at::Tensor toWire(const at::Tensor& t, const ReduceSpec& spec) {
  at::Tensor c = t.contiguous();
  at::Tensor w = spec.complex ? at::view_as_real(c)
                 : c.scalar_type() == at::kBool ? c.view(at::kByte)
                 : c.scalar_type() == spec.wire ? c
                                                : c.to(spec.wire);
  if (spec.premul) w = w * at::scalar_tensor(spec.factor, w.options());  // a new buffer: the input stays as it was
  return w;
}

void fromWire(const at::Tensor& user, const at::Tensor& wire, const ReduceSpec& spec) {
  if (user.is_contiguous() && user.data_ptr() == wire.data_ptr() && user.element_size() * user.numel() ==
      wire.element_size() * wire.numel())
    return;  // the user's own memory
  // The wire is contiguous: its elements in the user's logical order.
  if (spec.complex) user.copy_(at::view_as_complex(wire.reshape({-1, 2})).view(user.sizes()));
  else if (user.scalar_type() == at::kBool) user.copy_(wire.view(at::kBool).view(user.sizes()));
  else user.copy_(wire.view(user.sizes()));
}

void copyToWire(const at::Tensor& t, const at::Tensor& dst, const ReduceSpec& spec) {
  if (spec.complex) dst.copy_(at::view_as_real(t.contiguous()).reshape({-1}));
  else if (t.scalar_type() == at::kBool) dst.copy_(t.contiguous().view(at::kByte).reshape({-1}));
  else dst.copy_(t.reshape({-1}));  // converts int16 to int32
  if (spec.premul) dst.mul_(at::scalar_tensor(spec.factor, dst.options()));
}

}  // namespace strata::torch_backend
