// The object behind ncclComm_t: a communicator that may still be initialising.
#pragma once

#include <atomic>
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
  std::atomic<bool> abortFlag{false};
};

namespace strata::core {

// A handle created but not initialised; registered as live.
ncclComm* newHandle(int rank, int nranks, const CommOptions& opts);
// Runs the init job on the handle, recording success or the error.
void runInit(ncclComm* h, const std::function<std::unique_ptr<Communicator>()>& job);
// Unregisters and frees (joins a pending init first).
void deleteHandle(ncclComm* h);
// Throws unless `h` is a live handle.
void checkHandle(const ncclComm* h, const char* fn);
// Waits for a nonblocking init to finish.
void joinInit(ncclComm* h);
// The initialised communicator; throws if init failed, is still running
// (after waiting for it), or the communicator was revoked and `allowRevoked` is false.
Communicator& ready(ncclComm* h, const char* fn, bool allowRevoked = false);

}  // namespace strata::core
