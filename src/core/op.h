// One operation as the API received it.
#pragma once

#include <cstddef>

#include "common/collective.h"
#include "device/cpu_reduce.h"
#include "nccl.h"

namespace strata::core {

enum class OpKind { kCollective, kSend, kRecv };

struct OpDesc {
  OpKind kind = OpKind::kCollective;
  Collective coll = Collective::kAllReduce;
  const char* fn = "";  // API name, for messages
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  // per NCCL's convention for the call (sendcount, recvcount, ...)
  ncclDataType_t type = ncclFloat32;  // valid once validateOp has checked rawType
  ncclRedOp_t op = ncclSum;
  int rawType = ncclFloat32;  // the datatype as the caller passed it, possibly out of range
  int root = 0;  // root for rooted collectives, peer for send/recv
  void* stream = nullptr;  // the caller's cudaStream_t (device buffers are ordered on it)
  // The reduction resolved when the call was made (device buffers run later, and
  // a user's op may be destroyed as soon as the call returns, as NCCL allows); a
  // scalar in device memory is still read when the operation runs.
  struct Pinned {
    bool set = false;
    device::ReduceOp op;
    const void* deviceScalar = nullptr;
  } pinned;
};

// Reads an enum argument as the integer the caller passed: a C caller can pass any
// value, and loading an out-of-range value as the enum type is undefined in C++.
template <typename Enum>
int rawEnum(const Enum& e) {
  int v;
  static_assert(sizeof(Enum) == sizeof(int));
  __builtin_memcpy(&v, &e, sizeof(v));
  return v;
}

// The operation's rules from the collective traits table (common/collective.h);
// a send or receive counts as kSendRecv with only one of its buffers.
inline Collective opCollective(const OpDesc& op) {
  return op.kind == OpKind::kCollective ? op.coll : Collective::kSendRecv;
}
// nccl-tests' "size" of an operation: bytes of the larger of one rank's input and output.
size_t opBytes(const OpDesc& op, int nranks);
// Bytes of this rank's send and receive buffers.
size_t sendBytes(const OpDesc& op, int nranks);
size_t recvBytes(const OpDesc& op, int nranks);
// Whether this rank reads its send buffer and writes its receive buffer.
bool readsSendBuffer(const OpDesc& op, int rank);
bool writesRecvBuffer(const OpDesc& op, int rank);
// The stream an operation's kernels go to: the caller's, stream 0 being the legacy stream.
void* opStream(const OpDesc& op);

inline bool reduces(const OpDesc& op) { return op.kind == OpKind::kCollective && traits(op.coll).reducing; }

}  // namespace strata::core
