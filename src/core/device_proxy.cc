#include "core/device_proxy.h"

#include <algorithm>
#include <chrono>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "core/comm_handle.h"
#include "core/communicator.h"
#include "core/device_job.h"
#include "core/executor.h"
#include "device/gpu.h"

namespace strata::core {
namespace {

size_t sizeClass(size_t bytes) {
  size_t c = 4096;
  while (c < bytes) c *= 2;
  return c;
}

void raise(uint64_t* flag) { __atomic_store_n(flag, uint64_t{1}, __ATOMIC_RELEASE); }

// As the host path fails (Executor::failAll): the error is the communicator's, and
// its connections close, so that peers waiting for this rank fail now, not at the timeout.
void failPart(const DevicePart& part, ncclResult_t code, const char* what, int rank) {
  for (auto& [h, op] : part.ops) {
    Communicator& c = *h->impl;
    if (c.asyncError() == ncclSuccess) c.setAsyncError(code);
    c.abortConnections();
  }
  STRATA_WARN(rank, "device path: %s; the stream goes on with undefined output (ncclCommGetAsyncError reports it)",
              what);
}

}  // namespace

DeviceProxy::DeviceProxy(Communicator& comm) : comm_(comm) {
  thread_ = std::thread([this] { loop(); });
  STRATA_INFO(kSubsysInit, comm.rank(), "device path: proxy thread started (device %d)", comm.device());
}

DeviceProxy::~DeviceProxy() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<void*> unused;
  for (auto& [bytes, p] : pool_) unused.push_back(p);
  for (uint64_t* slab : flagSlabs_) unused.push_back(slab);
  try {
    if (stream_) device::streamDestroy(stream_);
    for (void* p : unused) device::pinnedFree(p);
  } catch (const Error& e) {
    STRATA_WARN(comm_.rank(), "device path: %s", e.what());
  }
}

void* DeviceProxy::acquireStaging(size_t bytes, std::vector<std::pair<void*, size_t>>* owned) {
  if (bytes == 0) return nullptr;
  size_t c = sizeClass(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pool_.find(c);
    if (it != pool_.end()) {
      p = it->second;
      pool_.erase(it);
    }
  }
  if (!p) p = device::pinnedAlloc(c);
  owned->emplace_back(p, c);
  return p;
}

uint64_t* DeviceProxy::acquireFlag() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!freeFlags_.empty()) {
      uint64_t* f = freeFlags_.back();
      freeFlags_.pop_back();
      *f = 0;
      return f;
    }
  }
  auto* slab = static_cast<uint64_t*>(device::pinnedAlloc(4096));  // 512 flags at a time
  std::lock_guard<std::mutex> lock(mu_);
  flagSlabs_.push_back(slab);
  for (int i = 1; i < 512; ++i) freeFlags_.push_back(slab + i);
  slab[0] = 0;
  return slab;
}

void DeviceProxy::returnStaging(const std::vector<std::pair<void*, size_t>>& buffers,
                                const std::vector<uint64_t*>& flags) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [p, bytes] : buffers) pool_.emplace(bytes, p);
  for (uint64_t* f : flags) freeFlags_.push_back(f);
}

// While a job's flag waits hold streams, frees that synchronise the device are kept
// (device::holdFrees): another rank on this GPU may free before joining the job.
void DeviceProxy::jobStarted() {
  device::holdFrees();
  std::lock_guard<std::mutex> lock(mu_);
  ++unfinished_;
}

void DeviceProxy::jobFinished() {
  device::releaseFrees();
  std::lock_guard<std::mutex> lock(mu_);
  --unfinished_;
  cv_.notify_all();
}

// Under the lock, which the proxy holds when it looks: it sees the last stream's
// inputs only once this call no longer touches the part, the job or the proxy (the
// job may finish, and the communicator go, as soon as the proxy has run it).
void DeviceProxy::inputStaged(DevicePart* part) {
  std::lock_guard<std::mutex> lock(mu_);
  if (part->waiting.fetch_sub(1) == 1) cv_.notify_all();
}

std::shared_ptr<DeviceJob> DeviceProxy::forget(const DeviceJob* job) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return nullptr;
  std::shared_ptr<DeviceJob> last = std::move(it->second);
  jobs_.erase(it);
  return last;
}

void DeviceProxy::queue(std::shared_ptr<DeviceJob> job) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.emplace(job.get(), job);
  queue_.push_back(std::move(job));
  cv_.notify_all();
}

// The proxy runs host-memory operations through an executor like any call, and
// device-memory ones on its own stream (made on its thread, on the communicator's GPU).
void DeviceProxy::run(DeviceJob& job, size_t k) {
  DevicePart& part = *job.parts[k];
  try {
    if (job.direct && !stream_) stream_ = device::streamCreate();
    Executor ex(job.direct ? stream_ : nullptr);
    for (auto& [h, op] : part.ops) {
      Communicator& c = readyComm(h, op.fn);
      STRATA_REQUIRE(c.asyncError() == ncclSuccess, ncclInvalidUsage,
                     "%s: rank %d: the communicator is in an error state after an earlier failure", op.fn, c.rank());
      ex.add(c, op);
    }
    ex.run();
  } catch (const Error& e) {
    failPart(part, e.code(), e.what(), comm_.rank());
  } catch (const std::exception& e) {  // the proxy must outlive any failure: streams wait on it
    failPart(part, ncclInternalError, e.what(), comm_.rank());
  }
  raise(part.flag);
  if (k + 1 == job.parts.size()) onOutputsCopied(&job);  // the proxy's share: done with the staging
}

// On the communicator's GPU from the start: any CUDA call this thread makes would
// otherwise create (and use) device 0's context, in every process of the job.
void DeviceProxy::loop() {
  try {
    if (comm_.device() >= 0) device::setCurrentDevice(comm_.device());
  } catch (const Error& e) {  // its calls fail alike later, each with its own message
    STRATA_WARN(comm_.rank(), "device path: the proxy cannot use GPU %d: %s", comm_.device(), e.what());
  }
  auto ready = [&] {
    if (queue_.empty()) return false;
    DeviceJob& j = *queue_.front();
    return j.parts[j.next]->waiting.load() == 0;
  };
  for (;;) {
    std::shared_ptr<DeviceJob> job;
    size_t part = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || ready(); });
      if (stop_) {  // release() gave up waiting: free the streams, the outputs are lost
        std::vector<std::shared_ptr<DeviceJob>> left(queue_.begin(), queue_.end());
        for (auto& j : left)
          for (auto& p : j->parts) raise(p->flag);
        lock.unlock();
        for (auto& j : left) onOutputsCopied(j.get());  // the proxy's share of each
        return;
      }
      job = queue_.front();
      part = job->next++;
      if (job->next == job->parts.size()) queue_.pop_front();
    }
    run(*job, part);
  }
}

void DeviceProxy::drain(double waitSec) {
  std::unique_lock<std::mutex> lock(mu_);
  double timeout = waitSec >= 0 ? waitSec : config().timeoutSec;
  bool done = cv_.wait_for(lock, std::chrono::duration<double>(timeout), [&] { return unfinished_ == 0; });
  STRATA_REQUIRE(done, ncclSystemError,
                 "rank %d: %d operation(s) on device buffers did not finish within %.0f s (STRATA_TIMEOUT): is the "
                 "stream they were enqueued on blocked?",
                 comm_.rank(), unfinished_, timeout);
}

bool DeviceProxy::release(double waitSec) {
  try {
    drain(waitSec);
  } catch (const Error& e) {
    STRATA_WARN(comm_.rank(), "%s; destroying the communicator anyway", e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return unfinished_ == 0;
}

}  // namespace strata::core
