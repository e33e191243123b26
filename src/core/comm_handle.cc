#include "core/comm_handle.h"

#include <set>

#include "base/error.h"
#include "base/log.h"
#include "core/device_path.h"

namespace strata::core {
namespace {

std::mutex gMutex;
std::set<const ncclComm*>& live() {
  static std::set<const ncclComm*> s;
  return s;
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

void runInit(ncclComm* h, const std::function<std::unique_ptr<Communicator>()>& job) {
  try {
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

void deleteHandle(ncclComm* h) {
  joinInit(h);
  if (h->impl) device_path::release(*h->impl);  // its device operations first
  {
    std::lock_guard<std::mutex> lock(gMutex);
    live().erase(h);
  }
  delete h;
}

void checkHandle(const ncclComm* h, const char* fn) {
  STRATA_REQUIRE(h != nullptr, ncclInvalidArgument, "%s: comm is NULL", fn);
  std::lock_guard<std::mutex> lock(gMutex);
  STRATA_REQUIRE(live().count(h), ncclInvalidArgument,
                 "%s: comm %p is not a live communicator (destroyed, aborted, or never created)", fn,
                 static_cast<const void*>(h));
}

Communicator& ready(ncclComm* h, const char* fn, bool allowRevoked) {
  checkHandle(h, fn);
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

}  // namespace strata::core
