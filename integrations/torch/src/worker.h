// The thread that runs a process group's operations on its communicator, one
// batch at a time in the order they were submitted (every rank submits the same
// order, as NCCL requires), and the watchdog that aborts the communicator when an
// operation outlives its timeout. Strata's calls on host memory block until they
// are done; this thread is what makes them asynchronous to Python.
#pragma once

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "scratch.h"
#include "work.h"

namespace strata::torch_backend {

// One operation: the NCCL calls (issued inside a group when the batch has
// several), then what makes the results visible in the caller's tensors.
struct Job {
  std::function<void(ncclComm_t)> issue;
  std::function<void()> finish;
  c10::intrusive_ptr<StrataWork> work;
  std::chrono::milliseconds timeout;
};
using Batch = std::vector<Job>;

class Worker {
 public:
  Worker(ncclComm_t comm, int rank);
  ~Worker();  // runs what is queued, then destroys (or, after a failure, aborts) the communicator
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // First drops, on the caller's thread, the batches that have run since the last submit.
  void submit(Batch batch);
  // Aborts the communicator once (from any thread; the calls inside return with
  // an error); every later operation fails with `why`.
  void abort(const std::string& why);
  // Staging buffers for the jobs (used on the worker thread only).
  ScratchPool& scratch() { return scratch_; }

 private:
  void loop();
  void watch();
  void run(Batch& batch);
  void issue(Batch& batch);

  const int rank_;
  ncclComm_t comm_;
  std::mutex m_;
  std::condition_variable wake_, watchWake_;
  std::deque<Batch> queue_;
  // Batches that have run, maybe with the last references to the caller's tensors and
  // Works: dropped on a caller's thread (the next submit, or the destructor), never on
  // the worker's, since freeing a tensor whose Python object the caller has dropped
  // takes the GIL (see worker.cc).
  std::vector<Batch> spent_;
  bool stop_ = false;
  bool done_ = false;          // the worker thread has left
  bool failed_ = false;        // an operation failed: the communicator is aborted, not destroyed, at the end
  std::string abortedWhy_;     // non-empty once aborted
  bool running_ = false;
  uint64_t batchesStarted_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::string runningName_;
  ScratchPool scratch_;
  std::thread thread_, watchdog_;
};

}  // namespace strata::torch_backend
