// What each perf tool measures: byte counts, the bus-bandwidth factor, the
// call, in-place buffer placement and the exact data to check.
#pragma once

#include <cstddef>

#include "nccl.h"

namespace strata::perf {

enum class Coll { kAllReduce, kAllGather, kBroadcast, kReduce, kReduceScatter, kAllToAll, kSendRecv, kGather, kScatter };

// Element counts for one rank at one size.
struct Counts {
  size_t count;      // the count argument of the call
  size_t sendCount;  // elements in the send buffer
  size_t recvCount;  // elements in the receive buffer
  size_t sizeBytes;  // nccl-tests' "size" column
};

struct CallArgs {
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  int rank;
  int nranks;
  ncclComm_t comm;
  void* stream = nullptr;  // cudaStream_t for device buffers
};

class PerfColl {
 public:
  virtual ~PerfColl() = default;
  virtual bool hasOp() const { return false; }
  virtual bool hasRoot() const { return false; }
  // nccl-tests does not check in-place send/recv (its send and receive buffers are the same).
  virtual bool inPlaceUnchecked() const { return false; }
  virtual Counts counts(size_t bytes, size_t esize, int nranks) const = 0;
  // algbw bytes per rank and the busbw factor, as nccl-tests defines them.
  virtual double algBytes(const Counts& c, size_t esize, int nranks) const = 0;
  virtual double busFactor(int nranks) const = 0;
  virtual ncclResult_t call(const CallArgs& a) const = 0;
  // Element offsets that make a call in place: send within recv, or recv within send.
  virtual size_t inPlaceSendOffset(const Counts&, int /*rank*/, int /*root*/) const { return 0; }
  virtual size_t inPlaceRecvOffset(const Counts&, int /*rank*/, int /*root*/) const { return 0; }
  // The value of input element i on `rank`, and the expected output element i
  // (false when this rank's output is not defined, e.g. a reduce's non-root).
  virtual double input(int rank, int root, size_t i, ncclDataType_t type, ncclRedOp_t op,
                       const Counts& c) const = 0;
  virtual bool expected(int rank, int nranks, int root, size_t i, ncclDataType_t type, ncclRedOp_t op,
                        const Counts& c, double* value) const = 0;
};

const PerfColl& perfColl(Coll c);

}  // namespace strata::perf
