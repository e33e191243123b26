#include "core/comm_handle.h"

#include <chrono>
#include <condition_variable>
#include <set>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "core/device_proxy.h"
#include "core/post_office.h"
#include "device/gpu.h"

namespace strata::core {
namespace {

// The registry of live handles and everyone's lifetime counters.
std::mutex gMutex;
std::condition_variable gLeft;  // a call left, or a reference was dropped
std::set<const ncclComm*>& live() {
  static std::set<const ncclComm*> s;
  return s;
}

// Called with gMutex held: frees the handle once nothing refers to it.
bool dropRef(ncclComm* h) { return --h->refs == 0; }

// Starts tearing down: refuses new calls. Returns false (and changes nothing)
// when another lifetime call got there first.
bool beginClose(ncclComm* h, const char* fn) {
  STRATA_REQUIRE(h != nullptr, ncclInvalidArgument, "%s: comm is NULL", fn);
  std::lock_guard<std::mutex> lock(gMutex);
  STRATA_REQUIRE(live().count(h), ncclInvalidArgument,
                 "%s: comm %p is not a live communicator (destroyed, aborted, or never created)", fn,
                 static_cast<const void*>(h));
  if (h->closedBy) return false;
  h->closedBy = fn;
  return true;
}

// Stops whatever runs on the communicator (init, collectives, splits) and says why.
// A nonblocking init may still be writing impl: it is touched only once init is over.
void stopCalls(ncclComm* h, const char* fn) {
  const char* expected = nullptr;
  h->abortedBy.compare_exchange_strong(expected, fn);
  core::PostOffice::instance().wakeAll();  // bootstrap waits that check it (after the rendezvous) see it now
  if (h->initState.load() != ncclInProgress && h->impl)
    h->impl->stop(format("%s was called on another thread while the call ran", fn));
}

// Waits until every call that was inside has left. They leave within ~100 ms of
// stopCalls; one that does not (a user callback stuck, a bug) is reported, and
// the communicator is then leaked rather than freed under it.
bool waitForCalls(ncclComm* h, const char* fn) {
  std::unique_lock<std::mutex> lock(gMutex);
  bool left = gLeft.wait_for(lock, std::chrono::duration<double>(config().timeoutSec),
                             [&] { return h->activeCalls == 0; });
  if (!left)
    STRATA_WARN(h->rank, "%s: %d call(s) on the communicator did not return within %.0f s of being stopped; its "
                "memory is kept", fn, h->activeCalls, config().timeoutSec);
  return left;
}

// Frees the communicator and unregisters the handle; the handle's own memory goes
// with the last reference (an open group may still hold one). Device work gets
// STRATA_TIMEOUT to finish, or, when aborting, a second.
void finish(ncclComm* h, bool aborting) {
  joinInit(h);
  bool workDone = false;
  if (h->impl && !aborting) {
    try {
      h->impl->waitStreamWork("ncclCommDestroy");  // the work its calls enqueued on their streams
      workDone = true;
    } catch (const Error& e) {
      STRATA_WARN(h->rank, "%s; destroying the communicator anyway", e.what());
    }
  }
  if (h->impl) h->impl->releaseDevice(aborting ? 1.0 : config().timeoutSec);
  if (h->impl) h->impl->releaseSharedDeviceMemory(workDone);
  h->impl.reset();
  std::lock_guard<std::mutex> lock(gMutex);
  live().erase(h);
  if (dropRef(h)) delete h;
}

bool callsRunning(ncclComm* h) {
  std::lock_guard<std::mutex> lock(gMutex);
  return h->activeCalls > 0;
}

}  // namespace

ncclComm* newHandle(int rank, int nranks, const CommOptions& opts) {
  auto* h = new ncclComm();
  h->rank = rank;
  h->nranks = nranks;
  h->opts = opts;
  std::lock_guard<std::mutex> lock(gMutex);
  live().insert(h);
  return h;
}

// On the communicator's GPU (an init thread of Strata's own has none set: restoring
// CUDA's "device 0" after a call would create device 0's context for it).
void runInit(ncclComm* h, const std::function<std::unique_ptr<Communicator>()>& job) {
  try {
    if (h->opts.device >= 0 && h->opts.device < device::gpuCount()) device::setCurrentDevice(h->opts.device);
    h->impl = job();
    h->initState.store(ncclSuccess);
  } catch (const Error& e) {
    h->initError = e.what();
    h->initState.store(e.code());
    STRATA_WARN(h->rank, "communicator init failed: %s", e.what());
  } catch (const std::exception& e) {
    h->initError = e.what();
    h->initState.store(ncclSystemError);
    STRATA_WARN(h->rank, "communicator init failed: %s", e.what());
  }
}

void joinInit(ncclComm* h) {
  std::lock_guard<std::mutex> lock(h->joinMutex);
  if (h->initThread.joinable()) h->initThread.join();
}

void discardHandle(ncclComm* h) {
  if (beginClose(h, "init")) finish(h, true);
}

CommUse::CommUse(ncclComm* h, const char* fn) : h_(h) {
  STRATA_REQUIRE(h != nullptr, ncclInvalidArgument, "%s: comm is NULL", fn);
  std::lock_guard<std::mutex> lock(gMutex);
  STRATA_REQUIRE(live().count(h), ncclInvalidArgument,
                 "%s: comm %p is not a live communicator (destroyed, aborted, or never created)", fn,
                 static_cast<const void*>(h));
  STRATA_REQUIRE(!h->closedBy, ncclInvalidUsage, "%s: rank %d: the communicator is being torn down (%s)", fn,
                 h->rank, h->closedBy);
  ++h->activeCalls;
}

CommUse::~CommUse() {
  if (!h_) return;
  std::lock_guard<std::mutex> lock(gMutex);
  --h_->activeCalls;
  gLeft.notify_all();
}

Communicator& CommUse::ready(const char* fn, bool allowRevoked) const { return readyComm(h_, fn, allowRevoked); }

Communicator& readyComm(ncclComm* h, const char* fn, bool allowRevoked) {
  if (h->initState.load() == ncclInProgress) joinInit(h);
  ncclResult_t st = h->initState.load();
  STRATA_REQUIRE(st != ncclInProgress, ncclInvalidUsage,
                 "%s: rank %d: the communicator is still initialising inside an open group; call ncclGroupEnd first",
                 fn, h->rank);
  STRATA_REQUIRE(st == ncclSuccess, ncclInvalidUsage, "%s: rank %d: the communicator failed to initialise: %s", fn,
                 h->rank, h->initError.c_str());
  STRATA_REQUIRE(allowRevoked || !h->impl->revoked(), ncclInvalidUsage,
                 "%s: rank %d: the communicator was revoked; only split, shrink and destroy are allowed", fn, h->rank);
  return *h->impl;
}

void throwIfAborted(const ncclComm* h) {
  if (const char* by = h->abortedBy.load())
    fail(ncclInvalidUsage, "rank %d: the parent communicator was stopped: %s was called on another thread", h->rank,
         by);
}

void retainHandle(ncclComm* h) {
  std::lock_guard<std::mutex> lock(gMutex);
  ++h->refs;
}

void releaseHandle(ncclComm* h) {
  std::lock_guard<std::mutex> lock(gMutex);
  if (dropRef(h)) delete h;
}

void abortHandle(ncclComm* h) {
  if (!beginClose(h, "ncclCommAbort")) return;  // a teardown is under way on another thread
  stopCalls(h, "ncclCommAbort");
  joinInit(h);
  stopCalls(h, "ncclCommAbort");  // an init that finished meanwhile
  if (waitForCalls(h, "ncclCommAbort")) finish(h, true);
}

void destroyHandle(ncclComm* h) {
  if (!beginClose(h, "ncclCommDestroy")) return;
  // Destroying a communicator that other threads are still using cannot let them
  // finish: stop them. Otherwise its device work completes first, as NCCL's does.
  bool running = callsRunning(h);
  if (running) stopCalls(h, "ncclCommDestroy");
  if (waitForCalls(h, "ncclCommDestroy")) finish(h, running);
}

void finalizeHandle(ncclComm* h) {
  CommUse use(h, "ncclCommFinalize");  // a destroy or abort on another thread waits for this call
  Communicator& comm = use.ready("ncclCommFinalize", true);
  std::unique_lock<std::mutex> lock(gMutex);
  if (h->activeCalls > 1) {  // calls running on other threads cannot complete under a finalize: stop them
    lock.unlock();
    stopCalls(h, "ncclCommFinalize");
    STRATA_WARN(h->rank, "ncclCommFinalize: calls were running on other threads; they were stopped");
    lock.lock();
    gLeft.wait_for(lock, std::chrono::duration<double>(config().timeoutSec), [&] { return h->activeCalls == 1; });
  }
  lock.unlock();
  comm.drainDevice();
  comm.waitStreamWork("ncclCommFinalize");
}

}  // namespace strata::core
