// The host functions of NCCL 2.28's device API (nccl_device.h). Strata does not
// implement that API (README, "API level"), but binaries built against NCCL 2.28
// reference these symbols (PyTorch 2.x's libtorch_cuda.so does, and fails to load
// without them), so they are exported and refuse every call with ncclInvalidUsage
// and a message naming what is missing. The device-side structs are opaque here.
#include "api/api_boundary.h"
#include "base/error.h"
#include "core/comm_handle.h"

struct ncclDevCommRequirements;
struct ncclDevComm;

using namespace strata;

namespace {

constexpr const char* kNoDeviceApi =
    "NCCL's device API (nccl_device.h) is not implemented by Strata; see the README, \"API level\"";

// Checks the handle as every call does, then refuses.
ncclResult_t refuseOnComm(ncclComm_t comm, const char* call) {
  return api::guarded([&] {
    core::CommUse use(comm, call);
    fail(ncclInvalidUsage, "%s: %s", call, kNoDeviceApi);
  });
}

ncclResult_t refusePointer(void** outPtr, const char* call) {
  if (outPtr) *outPtr = nullptr;
  return api::guarded([&] { fail(ncclInvalidUsage, "%s: %s", call, kNoDeviceApi); });
}

}  // namespace

STRATA_API ncclResult_t pncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements*, ncclDevComm*) {
  return refuseOnComm(comm, "ncclDevCommCreate");
}

STRATA_API ncclResult_t pncclDevCommDestroy(ncclComm_t comm, const ncclDevComm*) {
  return refuseOnComm(comm, "ncclDevCommDestroy");
}

STRATA_API ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t, size_t, void** outPtr) {
  return refusePointer(outPtr, "ncclGetLsaMultimemDevicePointer");
}

STRATA_API ncclResult_t pncclGetLsaDevicePointer(ncclWindow_t, size_t, int, void** outPtr) {
  return refusePointer(outPtr, "ncclGetLsaDevicePointer");
}

STRATA_API ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t, size_t, int, void** outPtr) {
  return refusePointer(outPtr, "ncclGetPeerDevicePointer");
}

STRATA_ALIAS(ncclDevCommCreate)
STRATA_ALIAS(ncclDevCommDestroy)
STRATA_ALIAS(ncclGetLsaMultimemDevicePointer)
STRATA_ALIAS(ncclGetLsaDevicePointer)
STRATA_ALIAS(ncclGetPeerDevicePointer)
