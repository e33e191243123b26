// One operation as the API received it.
#pragma once

#include <cstddef>

#include "algorithms/collective.h"
#include "nccl.h"

namespace strata::core {

enum class OpKind { kCollective, kSend, kRecv };

struct OpDesc {
  OpKind kind = OpKind::kCollective;
  algorithms::Collective coll = algorithms::Collective::kAllReduce;
  const char* fn = "";  // API name, for messages
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  // per NCCL's convention for the call (sendcount, recvcount, ...)
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;  // root for rooted collectives, peer for send/recv
};

// nccl-tests' "size" of an operation: bytes of the larger of one rank's input and output.
size_t opBytes(const OpDesc& op, int nranks);

}  // namespace strata::core
