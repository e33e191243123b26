// The object behind ncclComm_t: a communicator that may still be initialising,
// and its lifetime. Every API call that works on a communicator holds a CommUse
// for as long as it runs; abort, destroy, finalize and revoke may come from any
// thread at any time: they stop the calls inside (which then return an error
// saying so) and free the communicator only after the last of them has left.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/communicator.h"

struct ncclComm {
  int rank = 0;
  int nranks = 0;
  strata::core::CommOptions opts;
  std::unique_ptr<strata::core::Communicator> impl;  // set once init succeeds
  std::atomic<ncclResult_t> initState{ncclInProgress};
  std::string initError;
  std::thread initThread;  // nonblocking init
  std::mutex joinMutex;
  strata::core::AbortSignal abortedBy{nullptr};  // stops an init (or a child's init) waiting in the bootstrap

  // Lifetime, guarded by the handle registry's mutex (comm_handle.cc).
  int activeCalls = 0;       // API calls inside the library working on this handle
  int refs = 1;              // the user's reference, plus one per operation queued in an open group
  const char* closedBy = nullptr;  // the call that started tearing it down; new calls are refused
};

namespace strata::core {

// A handle created but not initialised; registered as live.
ncclComm* newHandle(int rank, int nranks, const CommOptions& opts);
// Runs the init job on the handle, recording success or the error.
void runInit(ncclComm* h, const std::function<std::unique_ptr<Communicator>()>& job);
// Frees a handle whose creation failed (nobody else has seen it).
void discardHandle(ncclComm* h);
// Waits for a nonblocking init to finish.
void joinInit(ncclComm* h);

// One API call's use of a communicator: while it exists, the handle and its
// communicator stay allocated. Throws unless `h` is a live handle that no
// lifetime call is tearing down.
class CommUse {
 public:
  CommUse(ncclComm* h, const char* fn);
  ~CommUse();
  CommUse(CommUse&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  CommUse(const CommUse&) = delete;
  CommUse& operator=(const CommUse&) = delete;
  ncclComm* handle() const { return h_; }
  // The initialised communicator; throws if init failed, is still running inside an
  // open group, or (unless allowRevoked) the communicator was revoked.
  Communicator& ready(const char* fn, bool allowRevoked = false) const;

 private:
  ncclComm* h_;
};

// The initialised communicator of a handle the caller holds a CommUse on (or
// that the device path keeps alive): the checks of CommUse::ready.
Communicator& readyComm(ncclComm* h, const char* fn, bool allowRevoked = false);

// Throws once the handle was aborted (for waits on behalf of it, e.g. a child's
// init while the caller holds a CommUse on the parent).
void throwIfAborted(const ncclComm* h);

// A reference that keeps the handle allocated (not usable) while an open group
// holds operations on it; released at the group end.
void retainHandle(ncclComm* h);
void releaseHandle(ncclComm* h);

// The lifetime calls. Each stops the calls running on the handle on other
// threads (they return within ~100 ms with an error naming `fn`), waits for them
// to leave, then does its part. A second call while one runs returns at once.
// Abort: stops everything and frees. Destroy: waits for device work first when
// nothing else runs, then frees. Finalize: waits for device work; calls running
// on other threads are stopped. Revoke: stops in-flight work, keeps the handle.
void abortHandle(ncclComm* h);
void destroyHandle(ncclComm* h);
void finalizeHandle(ncclComm* h);

}  // namespace strata::core
