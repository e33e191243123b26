#include "work.h"

#include <ATen/core/ivalue.h>

#include <stdexcept>

namespace strata::torch_backend {

StrataWork::StrataWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                       std::function<void(const std::string&)> onWaitTimeout)
    : c10d::Work(rank, type), name_(name), outputs_(std::move(outputs)), onWaitTimeout_(std::move(onWaitTimeout)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

bool StrataWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    lock.unlock();
    std::string why = std::string("Strata backend: rank ") + std::to_string(rank_) + ": " + name_ +
                      " did not complete within Work.wait's timeout of " + std::to_string(timeout.count()) +
                      " ms; the group's communicator is aborted";
    onWaitTimeout_(why);
    throw std::runtime_error(why);
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> StrataWork::result() {
  wait(kNoTimeout);
  return outputs_;
}

void StrataWork::complete() {
  future_->markCompleted(c10::IValue(outputs_));
  finish();
}

void StrataWork::fail(std::exception_ptr error) {
  future_->setError(error);
  finish(error);
}

}  // namespace strata::torch_backend
