// Version, error strings, memory and registration calls.
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <mutex>

#include "api/api_boundary.h"
#include "base/config.h"
#include "base/log.h"
#include "base/shared_buffers.h"
#include "core/comm_handle.h"
#include "device/gpu.h"

namespace strata::api {
namespace {

thread_local std::string tLastError;

std::mutex gMemMutex;
std::map<void*, size_t>& allocations() {
  static std::map<void*, size_t> m;
  return m;
}

}  // namespace

void noteLastError(const std::string& message) { tLastError = message; }

void recordError(ncclResult_t code, const std::string& message) {
  tLastError = message;
  STRATA_WARN(-1, "%s (%s)", message.c_str(), pncclGetErrorString(code));
}

}  // namespace strata::api

using namespace strata;

STRATA_API ncclResult_t pncclGetVersion(int* version) {
  return api::guarded([&] {
    STRATA_REQUIRE(version, ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
  });
}

STRATA_API const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the Strata developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

// NCCL keeps one process-wide string; Strata keeps the calling thread's last
// error, so that ranks running as threads do not overwrite each other's.
STRATA_API const char* pncclGetLastError(ncclComm_t) { return api::tLastError.c_str(); }

STRATA_API void pncclResetDebugInit() {
  reloadConfig();
  resetLogging();
}

// Device memory on the current GPU, as NCCL. Without a GPU, host memory: page-aligned
// and pre-faulted, since page faults cost 13-24 us each on VMs.
STRATA_API ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  return api::guarded([&] {
    STRATA_REQUIRE(ptr, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
    STRATA_REQUIRE(size > 0, ncclInvalidArgument, "ncclMemAlloc: size is 0");
    // Host memory lives in a shared segment: peers on this host write into it with a plain copy.
    void* p = device::currentDevice() >= 0 ? device::gpuAlloc(size) : allocateShared(size);
    if (!p) {
      p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
      if (p == MAP_FAILED) failErrno("ncclMemAlloc: mmap");
    }
    std::lock_guard<std::mutex> lock(api::gMemMutex);
    api::allocations()[p] = size;
    *ptr = p;
  });
}

STRATA_API ncclResult_t pncclMemFree(void* ptr) {
  return api::guarded([&] {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(api::gMemMutex);
    auto it = api::allocations().find(ptr);
    STRATA_REQUIRE(it != api::allocations().end(), ncclInvalidArgument,
                   "ncclMemFree: %p was not returned by ncclMemAlloc", ptr);
    if (device::isDevicePointer(ptr))
      device::gpuFree(ptr);
    else if (!freeShared(ptr))
      munmap(ptr, it->second);
    api::allocations().erase(it);
  });
}

STRATA_API ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return api::guarded([&] {
    core::CommUse use(comm, "ncclCommRegister");
    STRATA_REQUIRE(handle, ncclInvalidArgument, "ncclCommRegister: handle is NULL");
    STRATA_REQUIRE(buff || size == 0, ncclInvalidArgument, "ncclCommRegister: buff is NULL with size %zu", size);
    *handle = use.ready("ncclCommRegister").pool().registerBuffer(buff, size);
  });
}

STRATA_API ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  return api::guarded([&] {
    core::CommUse use(comm, "ncclCommDeregister");
    use.ready("ncclCommDeregister", true).pool().deregisterBuffer(handle, "ncclCommDeregister");
  });
}

STRATA_API ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                int winFlags) {
  return api::guarded([&] {
    core::CommUse use(comm, "ncclCommWindowRegister");
    STRATA_REQUIRE(win, ncclInvalidArgument, "ncclCommWindowRegister: win is NULL");
    STRATA_REQUIRE(winFlags == NCCL_WIN_DEFAULT || winFlags == NCCL_WIN_COLL_SYMMETRIC, ncclInvalidArgument,
                   "ncclCommWindowRegister: unknown winFlags 0x%x", winFlags);
    STRATA_REQUIRE(buff || size == 0, ncclInvalidArgument, "ncclCommWindowRegister: buff is NULL with size %zu",
                   size);
    *win = static_cast<ncclWindow_t>(use.ready("ncclCommWindowRegister").pool().registerBuffer(buff, size));
  });
}

STRATA_API ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return api::guarded([&] {
    core::CommUse use(comm, "ncclCommWindowDeregister");
    use.ready("ncclCommWindowDeregister", true).pool().deregisterBuffer(win, "ncclCommWindowDeregister");
  });
}

STRATA_ALIAS(ncclGetVersion)
STRATA_ALIAS(ncclGetErrorString)
STRATA_ALIAS(ncclGetLastError)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
STRATA_ALIAS(ncclResetDebugInit)
#pragma GCC diagnostic pop
STRATA_ALIAS(ncclMemAlloc)
STRATA_ALIAS(ncclMemFree)
STRATA_ALIAS(ncclCommRegister)
STRATA_ALIAS(ncclCommDeregister)
STRATA_ALIAS(ncclCommWindowRegister)
STRATA_ALIAS(ncclCommWindowDeregister)
