// What each perf tool measures: byte counts, the bus-bandwidth factor, the
// call, in-place buffer placement and the exact data to check.
#pragma once

#include <cstddef>

#include "common/collective.h"
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

// Buffer sizes, in-place offsets and the bus factor come from the collective
// traits table (common/collective.h); each tool adds its call and its exact data.
class PerfColl {
 public:
  explicit PerfColl(Collective c) : coll_(c) {}
  virtual ~PerfColl() = default;
  Collective collective() const { return coll_; }
  bool hasOp() const { return traits(coll_).reducing; }
  bool hasRoot() const { return traits(coll_).rooted; }
  // nccl-tests does not check in-place send/recv (its send and receive buffers are the same).
  bool inPlaceUnchecked() const { return coll_ == Collective::kSendRecv; }
  // nccl-tests' counts: the whole size per rank, or for collectives with an n-times
  // wider buffer, size / n rounded down to a multiple of 16 bytes.
  Counts counts(size_t bytes, size_t esize, int nranks) const;
  // algbw bytes per rank and the busbw factor, as nccl-tests defines them.
  double algBytes(const Counts& c, size_t esize, int nranks) const;
  double busFactor(int nranks) const { return strata::busFactor(coll_, nranks); }
  virtual ncclResult_t call(const CallArgs& a) const = 0;
  // Element offsets that make a call in place: send within recv, or recv within send.
  size_t inPlaceSendOffset(const Counts& c, int rank) const { return strata::inPlaceSendOffset(coll_, c.count, rank); }
  size_t inPlaceRecvOffset(const Counts& c, int rank) const { return strata::inPlaceRecvOffset(coll_, c.count, rank); }
  // The value of input element i on `rank`, and the expected output element i
  // (false when this rank's output is not defined, e.g. a reduce's non-root).
  virtual double input(int rank, int nranks, int root, size_t i, ncclDataType_t type, ncclRedOp_t op,
                       const Counts& c) const = 0;
  virtual bool expected(int rank, int nranks, int root, size_t i, ncclDataType_t type, ncclRedOp_t op,
                        const Counts& c, double* value) const = 0;
  // True when every rank's expected output is the same (the check computes it once:
  // an all-reduce's reference costs n inputs per element).
  virtual bool sameOnEveryRank() const { return false; }

 private:
  Collective coll_;
};

const PerfColl& perfColl(Coll c);

}  // namespace strata::perf
