// Buffers the worker reuses for the staging some collectives need (all-gather's
// flat output, reduce-scatter's flat input, gather's and scatter's at the root):
// a fresh allocation of tens of MiB costs a page fault per page on every call
// (glibc maps and unmaps such blocks), which halved all-gather's bandwidth at 64 MiB.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace strata::torch_backend {

class ScratchPool {
 public:
  // A contiguous 1-D tensor of `numel` elements of `dtype`; stays valid until recycle().
  at::Tensor get(int64_t numel, at::ScalarType dtype);
  // After a batch: every buffer handed out is free again (beyond kKeepBytes, released).
  void recycle();

 private:
  static constexpr size_t kKeepBytes = size_t{256} << 20;
  std::vector<at::Tensor> free_, used_;  // byte blocks
};

}  // namespace strata::torch_backend
