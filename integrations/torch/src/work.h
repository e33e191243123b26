// The Work a strata_torch collective returns: completed (or failed) by the
// group's worker thread, waited for by the caller, and a Future for
// DistributedDataParallel's reducer and communication hooks.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <vector>

namespace strata::torch_backend {

class StrataWork : public c10d::Work {
 public:
  // `onWaitTimeout` runs when wait(timeout) gives up: the group aborts its
  // communicator, as NCCL's blocking wait does (the collective can no longer complete).
  StrataWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
             std::function<void(const std::string&)> onWaitTimeout);

  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override { return sourceRank_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // By the worker thread, exactly once.
  void complete();
  void fail(std::exception_ptr error);
  void setSourceRank(int rank) { sourceRank_ = rank; }
  const char* name() const { return name_; }

 private:
  const char* name_;
  std::vector<at::Tensor> outputs_;
  std::function<void(const std::string&)> onWaitTimeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  int sourceRank_ = -1;
};

}  // namespace strata::torch_backend
