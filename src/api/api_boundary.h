// The one error boundary: every exported function runs its body through
// guarded(), which turns a thrown strata::Error into its ncclResult_t and
// records the message for ncclGetLastError.
#pragma once

#include <new>
#include <string>
#include <type_traits>

#include "base/error.h"
#include "nccl.h"

namespace strata::api {

// Stores the text ncclGetLastError returns (per thread) and logs it as a warning.
void recordError(ncclResult_t code, const std::string& message);
// Sets the text ncclGetLastError returns without failing the call (an asynchronous
// error reported by ncclCommGetAsyncError).
void noteLastError(const std::string& message);

template <typename F>
ncclResult_t guarded(F&& body) {
  try {
    if constexpr (std::is_same_v<decltype(body()), ncclResult_t>) {
      return body();
    } else {
      body();
      return ncclSuccess;
    }
  } catch (const Error& e) {
    recordError(e.code(), e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    recordError(ncclSystemError, "out of host memory");
    return ncclSystemError;
  } catch (const std::exception& e) {
    recordError(ncclInternalError, e.what());
    return ncclInternalError;
  }
}

}  // namespace strata::api

// pncclX is the implementation; ncclX is a weak alias of it, as in NCCL, so a
// profiling layer can define ncclX and call pncclX.
#define STRATA_API extern "C" __attribute__((visibility("default")))
#define STRATA_ALIAS(name) \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name))) decltype(p##name) name;
