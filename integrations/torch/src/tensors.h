// From torch tensors and c10d options to what NCCL's calls take: data types,
// reduction operators, and contiguous buffers for tensors that are not.
#pragma once

#include <nccl.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <functional>
#include <string>
#include <vector>

namespace strata::torch_backend {

// Throws std::runtime_error("Strata backend: rank R: <call>: <what>").
[[noreturn]] void fail(int rank, const char* call, const std::string& what);
// Throws with NCCL's last error unless `r` is ncclSuccess.
void check(ncclResult_t r, int rank, const char* call);
// Runs `calls` between ncclGroupStart and ncclGroupEnd; the group is closed even
// when one of them throws.
void grouped(int rank, const char* call, const std::function<void()>& calls);

// One CPU dense tensor per call, as NCCL's process group takes one per device.
const at::Tensor& single(const std::vector<at::Tensor>& tensors, int rank, const char* call);
void checkCpu(const at::Tensor& t, int rank, const char* call);

// A tensor's data as one contiguous buffer: the tensor itself when it is
// contiguous, else a contiguous copy that writeBack() copies into it.
class Staged {
 public:
  Staged() = default;
  explicit Staged(const at::Tensor& t) : user_(t), buf_(t.is_contiguous() ? t : t.contiguous()) {}
  void* data() const { return buf_.data_ptr(); }
  size_t bytes() const { return buf_.numel() * buf_.element_size(); }
  const at::Tensor& buffer() const { return buf_; }
  void writeBack() const {
    if (!buf_.is_same(user_)) user_.copy_(buf_);
  }

 private:
  at::Tensor user_, buf_;
};

// How a reduction runs in NCCL: the data type and operator, and the type its
// buffers are in: the user's, or a wider or plainer one where NCCL has no such
// type (int16 as int32, bool as uint8 with SUM as MAX and PRODUCT as MIN,
// complex as pairs of reals for SUM and AVG). Results are exact either way.
struct ReduceSpec {
  ncclDataType_t type;
  ncclRedOp_t op;
  at::ScalarType wire;   // the element type of the buffers NCCL sees
  bool complex = false;  // buffers are view_as_real of the user's
  bool premul = false;   // PREMUL_SUM: each input times `factor` (as NCCL does it), then SUM
  double factor = 1;
};
// Throws when NCCL cannot reduce `t` with `op`.
ReduceSpec reduceSpec(at::ScalarType t, const c10d::ReduceOp& op, int rank, const char* call);
// The user's tensor as a contiguous buffer of the wire type (the tensor's own
// memory where it already is one, unless PREMUL_SUM scales it), and the copy back
// into the user's tensor.
at::Tensor toWire(const at::Tensor& t, const ReduceSpec& spec);
void fromWire(const at::Tensor& user, const at::Tensor& wire, const ReduceSpec& spec);
// Wire elements per user element (2 for complex).
inline int64_t wireWidth(const ReduceSpec& spec) { return spec.complex ? 2 : 1; }
// Copies (converts, scales) the user's tensor into `dst`, a 1-D wire buffer of its size.
void copyToWire(const at::Tensor& t, const at::Tensor& dst, const ReduceSpec& spec);

}  // namespace strata::torch_backend
