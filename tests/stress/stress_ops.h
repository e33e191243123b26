// One random collective of the stress test: drawn from a seed that every rank
// shares (so all ranks draw the same call), with buffers whose expected
// contents are exact (verify/reference.h), issued alone or inside a group and
// checked after the group ends.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "nccl.h"
#include "verify/reference.h"

namespace strata::test {

enum class StressColl { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kGather, kScatter,
                        kSendRecv, kCount };
const char* stressCollName(StressColl c);

struct StressCase {
  StressColl coll;
  ncclDataType_t type;
  verify::TestOp op;
  size_t count;  // per rank's piece, as NCCL counts it
  int root;
  bool inPlace;
  std::string describe() const;
};

// Draws a case: sizes 0 .. maxBytes (most small, few large), every type and built-in op.
StressCase drawCase(std::mt19937_64& rng, int nranks, size_t maxBytes);

class PreparedOp {
 public:
  PreparedOp(const StressCase& c, int rank, int nranks);
  ncclResult_t issue(ncclComm_t comm);  // the NCCL call(s); inside the caller's group, if any
  std::string check() const;            // "" when this rank's output is exact
  size_t bytesMoved() const;            // this rank's output bytes

 private:
  StressCase c_;
  int rank_, n_;
  std::vector<char> in_, out_, expected_;
  const void* send_ = nullptr;
  void* recv_ = nullptr;
  size_t checked_ = 0;  // elements of recv_ compared with expected_ (0: nothing to check on this rank)
};

}  // namespace strata::test
