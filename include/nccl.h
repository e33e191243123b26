/*
 * Strata: an NCCL-compatible collective communication library.
 *
 * This header declares the NCCL host API with the names, signatures, enum
 * values and struct layouts of NVIDIA NCCL 2.28, so that programs written for
 * NCCL compile against it and binaries built against NVIDIA's header run
 * against Strata's libnccl.so.2.
 *
 * Version: Strata reports API level 2.27.7 (see README, "API level"). NCCL
 * clients include nccl_device.h, the device-side API, when the header says
 * 2.28 or newer; Strata does not implement that API, so the version macros
 * stay below 2.28 and such clients compile their pre-2.28 paths. All 41 host
 * functions of 2.28 (including ncclAlltoAll, ncclGather, ncclScatter,
 * ncclCommRevoke) are declared and exported all the same.
 */
#ifndef NCCL_H_
#define NCCL_H_

/*
 * The CUDA types, as NVIDIA's header includes them: clients rely on getting
 * cudaStream_t, half (cuda_fp16.h), __nv_bfloat16 (cuda_bf16.h, CUDA >= 11) and,
 * in C++ with CUDA >= 11.8, the fp8 types (cuda_fp8.h) from nccl.h. Included
 * whenever the CUDA headers are on the include path, in C and C++, with or
 * without nvcc. Without them (or with STRATA_NCCL_NO_CUDA_HEADERS, which
 * Strata's own sources use to keep CUDA out of the layers above src/device), a
 * stream is the same opaque pointer type CUDA declares, so the ABI is the same.
 */
#if defined(__CUDACC__)
#define STRATA_NCCL_CUDA_HEADERS 1
#elif !defined(STRATA_NCCL_NO_CUDA_HEADERS) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define STRATA_NCCL_CUDA_HEADERS 1
#endif
#endif

#ifdef STRATA_NCCL_CUDA_HEADERS
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if __cplusplus && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#else
typedef struct CUstream_st* cudaStream_t;
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 27
#define NCCL_PATCH 7
#define NCCL_SUFFIX "strata"

#define NCCL_VERSION_CODE 22707
/* Versions up to 2.8 were encoded as X*1000+Y*100+Z, later ones as X*10000+Y*100+Z. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#define STRATA_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

#include <limits.h>
#include <stddef.h>

/* Opaque communicator handle. */
typedef struct ncclComm* ncclComm_t;
/* Opaque registered-window handle. */
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
/* Opaque bootstrap token made by ncclGetUniqueId and shared with every rank. */
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

#define NCCL_REVOKE_DEFAULT 0x00

/* Communicator options; initialise with NCCL_CONFIG_INITIALIZER. Layout of NCCL 2.28. */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                           \
  {                                                                                       \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),   \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,              \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,              \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,              \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,              \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                      \
  }

/* Output of ncclGroupSimulateEnd; initialise with NCCL_SIM_INFO_INITIALIZER. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime; /* microseconds */
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT }

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5, /* first id handed out by ncclRedOpCreatePreMulSum */
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
  ncclScalarDevice = 0,       /* read when the collective runs */
  ncclScalarHostImmediate = 1 /* read before ncclRedOpCreatePreMulSum returns */
} ncclScalarResidence_t;

/* Each function has a profiling alias pnccl<Name>; ncclX is a weak alias of pncclX. */
#define STRATA_DECLARE(ret, name, args) ret nccl##name args; ret pnccl##name args

STRATA_DECLARE(ncclResult_t, MemAlloc, (void** ptr, size_t size));
STRATA_DECLARE(ncclResult_t, MemFree, (void* ptr));
STRATA_DECLARE(ncclResult_t, GetVersion, (int* version));
STRATA_DECLARE(ncclResult_t, GetUniqueId, (ncclUniqueId* uniqueId));
STRATA_DECLARE(ncclResult_t, CommInitRankConfig,
               (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config));
STRATA_DECLARE(ncclResult_t, CommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank));
STRATA_DECLARE(ncclResult_t, CommInitAll, (ncclComm_t* comm, int ndev, const int* devlist));
STRATA_DECLARE(ncclResult_t, CommFinalize, (ncclComm_t comm));
STRATA_DECLARE(ncclResult_t, CommDestroy, (ncclComm_t comm));
STRATA_DECLARE(ncclResult_t, CommAbort, (ncclComm_t comm));
STRATA_DECLARE(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags));
STRATA_DECLARE(ncclResult_t, CommSplit,
               (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config));
STRATA_DECLARE(ncclResult_t, CommShrink,
               (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                ncclConfig_t* config, int shrinkFlags));
STRATA_DECLARE(ncclResult_t, CommInitRankScalable,
               (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                ncclConfig_t* config));
STRATA_DECLARE(const char*, GetErrorString, (ncclResult_t result));
STRATA_DECLARE(const char*, GetLastError, (ncclComm_t comm));
__attribute__((deprecated("ncclResetDebugInit is not part of the supported NCCL API"))) void ncclResetDebugInit(void);
__attribute__((deprecated("pncclResetDebugInit is not part of the supported NCCL API"))) void pncclResetDebugInit(void);
STRATA_DECLARE(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError));
STRATA_DECLARE(ncclResult_t, CommCount, (const ncclComm_t comm, int* count));
STRATA_DECLARE(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int* device));
STRATA_DECLARE(ncclResult_t, CommUserRank, (const ncclComm_t comm, int* rank));
STRATA_DECLARE(ncclResult_t, CommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle));
STRATA_DECLARE(ncclResult_t, CommDeregister, (const ncclComm_t comm, void* handle));
STRATA_DECLARE(ncclResult_t, CommWindowRegister,
               (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags));
STRATA_DECLARE(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win));
STRATA_DECLARE(ncclResult_t, RedOpCreatePreMulSum,
               (ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
                ncclComm_t comm));
STRATA_DECLARE(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm));
STRATA_DECLARE(ncclResult_t, Reduce,
               (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                int root, ncclComm_t comm, cudaStream_t stream));
STRATA_DECLARE(ncclResult_t, Bcast,
               (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                cudaStream_t stream));
STRATA_DECLARE(ncclResult_t, Broadcast,
               (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                ncclComm_t comm, cudaStream_t stream));
STRATA_DECLARE(ncclResult_t, AllReduce,
               (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                ncclComm_t comm, cudaStream_t stream));
STRATA_DECLARE(ncclResult_t, ReduceScatter,
               (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream));
STRATA_DECLARE(ncclResult_t, AllGather,
               (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                ncclComm_t comm, cudaStream_t stream));
STRATA_DECLARE(ncclResult_t, AlltoAll,
               (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                cudaStream_t stream));
STRATA_DECLARE(ncclResult_t, Gather,
               (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                ncclComm_t comm, cudaStream_t stream));
STRATA_DECLARE(ncclResult_t, Scatter,
               (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                ncclComm_t comm, cudaStream_t stream));
STRATA_DECLARE(ncclResult_t, Send,
               (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                cudaStream_t stream));
STRATA_DECLARE(ncclResult_t, Recv,
               (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                cudaStream_t stream));
STRATA_DECLARE(ncclResult_t, GroupStart, (void));
STRATA_DECLARE(ncclResult_t, GroupEnd, (void));
STRATA_DECLARE(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t* simInfo));

#undef STRATA_DECLARE

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
