// Operations on device buffers, ordered on the caller's CUDA stream, through a
// proxy thread the communicator owns (docs/gpu.md).
//
// At the group end each stream gets its part of a job: copies of the inputs to
// pinned staging (staged jobs), a host callback telling the proxy they are there,
// a one-thread kernel holding the stream until the proxy raises the job's flag,
// and the copies back. The proxy runs the operations through an executor: on the
// staging buffers with every host algorithm and transport, or on the device
// buffers themselves with an algorithm that works on device memory (GPU to GPU
// over device regions, on the proxy's own stream). The call returns once all of
// that is enqueued.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/op.h"

struct ncclComm;

namespace strata::core {

class Communicator;
struct DeviceJob;
struct DevicePart;

class DeviceProxy {
 public:
  explicit DeviceProxy(Communicator& comm);
  ~DeviceProxy();

  // Enqueues a group (one callback and one wait per stream) and returns; the
  // first communicator's proxy runs it. Throws ncclInvalidUsage for a stream under
  // CUDA graph capture. A group on a communicator whose ranks share a GPU runs
  // before the call returns instead (runBlocking).
  static void enqueue(const std::vector<std::pair<ncclComm*, OpDesc>>& ops);

  // Waits until this communicator's device operations have finished (host side
  // and the copies back), at most `waitSec` (negative: STRATA_TIMEOUT).
  void drain(double waitSec = -1);
  // Drains (at most `waitSec`), then stops the proxy thread; false when jobs are
  // still on a stream, whose callbacks use this object (the caller then keeps it).
  bool release(double waitSec);

  // Pinned staging and flag words, pooled (callbacks return them; no CUDA calls there).
  void* acquireStaging(size_t bytes, std::vector<std::pair<void*, size_t>>* owned);
  uint64_t* acquireFlag();
  void returnStaging(const std::vector<std::pair<void*, size_t>>& buffers, const std::vector<uint64_t*>& flags);
  // Job bookkeeping, for the stream callbacks.
  void jobStarted();
  void jobFinished();
  // One stream's inputs for `part` are staged (CUDA's callback thread).
  void inputStaged(DevicePart* part);
  // The job, out of this proxy's keeping (null if it was not kept).
  std::shared_ptr<DeviceJob> forget(const DeviceJob* job);
  void queue(std::shared_ptr<DeviceJob> job);

 private:
  void loop();
  void run(DeviceJob& job, size_t part);
  // Ranks sharing a GPU: nothing waits on the device. A stream held by a wait for
  // another rank's host work can hold the hardware queue that rank's own work is
  // queued on (streams share CUDA_DEVICE_MAX_CONNECTIONS queues; one under
  // Megatron), and every rank waits: on an H200, 2 ranks as threads on one GPU hung
  // on the first all-reduce. So the call waits for its streams, stages the inputs,
  // runs the host algorithm on this thread and copies the outputs back.
  static void runBlocking(const std::vector<std::pair<ncclComm*, OpDesc>>& ops);

  Communicator& comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<DeviceJob>> queue_;
  std::map<const DeviceJob*, std::shared_ptr<DeviceJob>> jobs_;  // alive until their last callback
  std::multimap<size_t, void*> pool_;                           // free pinned buffers by size
  std::vector<uint64_t*> freeFlags_, flagSlabs_;
  int unfinished_ = 0;  // jobs touching this communicator that have not finished
  bool stop_ = false;
  void* stream_ = nullptr;  // the proxy's own, for device-memory algorithms
  std::thread thread_;
};

}  // namespace strata::core
