#include "worker.h"

#include <stdexcept>

#include "tensors.h"

namespace strata::torch_backend {
namespace {

std::chrono::milliseconds longest(const Batch& batch) {
  std::chrono::milliseconds t{0};
  for (const Job& j : batch) t = std::max(t, j.timeout);
  return t;
}

}  // namespace

Worker::Worker(ncclComm_t comm, int rank) : rank_(rank), comm_(comm) {
  thread_ = std::thread([this] { loop(); });
  watchdog_ = std::thread([this] { watch(); });
}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  wake_.notify_all();
  watchWake_.notify_all();
  thread_.join();
  watchdog_.join();
  if (!abortedWhy_.empty()) return;  // the abort freed it
  // A communicator whose peers may be gone is aborted: destroy would wait for them.
  if (failed_ || ncclCommDestroy(comm_) != ncclSuccess) ncclCommAbort(comm_);
}

void Worker::submit(Batch batch) {
  std::vector<Batch> spent;
  {
    std::lock_guard<std::mutex> lock(m_);
    spent.swap(spent_);
  }
  spent.clear();  // outside the lock, and before the new batch can stage copies of its own
  {
    std::lock_guard<std::mutex> lock(m_);
    queue_.push_back(std::move(batch));
  }
  wake_.notify_one();
}

void Worker::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(m_);
  if (!abortedWhy_.empty()) return;
  abortedWhy_ = why;
  failed_ = true;
  ncclCommAbort(comm_);  // the call in progress on the worker thread returns with an error
}

void Worker::loop() {
  std::unique_lock<std::mutex> lock(m_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) {  // stopping, and everything queued has run
      done_ = true;
      watchWake_.notify_all();
      return;
    }
    Batch batch = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    ++batchesStarted_;
    deadline_ = std::chrono::steady_clock::now() + longest(batch);
    runningName_ = batch.front().work->name();
    lock.unlock();
    watchWake_.notify_all();
    run(batch);
    lock.lock();
    running_ = false;
    // A tensor whose Python object is gone needs the GIL to be freed: on this thread
    // that deadlocks against a caller destroying the group with the GIL held, and
    // while the interpreter finalizes it ends this thread inside a destructor
    // (std::terminate). The caller's thread drops it instead.
    spent_.push_back(std::move(batch));
  }
}

// Aborts the communicator when a batch runs past its deadline.
void Worker::watch() {
  std::unique_lock<std::mutex> lock(m_);
  while (!done_) {  // the drain at destruction is watched too
    if (!running_ || !abortedWhy_.empty()) {
      watchWake_.wait_for(lock, std::chrono::seconds(1));
      continue;
    }
    uint64_t batch = batchesStarted_;
    auto deadline = deadline_;
    if (watchWake_.wait_until(lock, deadline, [&] { return done_ || batchesStarted_ != batch || !running_; }))
      continue;
    std::string why = "Strata backend: rank " + std::to_string(rank_) + ": " + runningName_ +
                      " did not complete within the process group's timeout; the communicator was aborted";
    lock.unlock();
    abort(why);
    lock.lock();
  }
}

void Worker::run(Batch& batch) {
  try {
    {
      std::lock_guard<std::mutex> lock(m_);
      if (!abortedWhy_.empty()) throw std::runtime_error(abortedWhy_);
    }
    issue(batch);
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    {
      std::lock_guard<std::mutex> lock(m_);
      failed_ = true;
      // The watchdog's or a waiter's reason is what the caller needs, not "aborted".
      if (!abortedWhy_.empty()) error = std::make_exception_ptr(std::runtime_error(abortedWhy_));
    }
    scratch_.recycle();
    for (Job& j : batch) j.work->fail(error);
    return;
  }
  scratch_.recycle();
  for (Job& j : batch) j.work->complete();
}

void Worker::issue(Batch& batch) {
  if (batch.size() == 1) {
    batch[0].issue(comm_);
  } else {
    grouped(rank_, "coalesced operations", [&] {
      for (Job& j : batch) j.issue(comm_);
    });
  }
  for (Job& j : batch) j.finish();
}

}  // namespace strata::torch_backend
