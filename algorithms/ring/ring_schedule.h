// Who sends which chunk where, at every step of a pipelined ring. Pure
// arithmetic, no I/O: the executor asks for step i and moves the data.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/collective.h"

namespace strata::algorithms {

// One step for one rank, in absolute element offsets into its own buffers.
struct RingStep {
  bool recv = false;         // take a message from the previous rank
  bool send = false;         // pass a message to the next rank
  bool readLocal = false;    // the data starts from the local input (no recv)
  bool reduceLocal = false;  // combine the received data with the local input
  bool writeOut = false;     // store the result in the output buffer
  bool final = false;        // the result is complete: apply the op's post-division
  size_t srcOffset = 0;      // into the input buffer
  size_t dstOffset = 0;      // into the output buffer
  size_t count = 0;          // elements
};

// Which part of a ring all-reduce to run: both halves, or only the
// reduce-scatter half (each rank ends with one reduced segment of the region in
// its output) or only the all-gather half (which starts from that segment). The
// hierarchical all-reduce runs the halves inside a node around a step across nodes.
enum class RingHalf { kBoth, kReduceScatter, kAllGather };

// The part of a collective one channel carries.
struct RingParams {
  Collective coll = Collective::kAllReduce;  // kAllReduce ... kReduce
  int nranks = 1;
  int pos = 0;         // this rank's position in the ring
  int rootPos = 0;     // broadcast / reduce root's position
  size_t begin = 0;    // first element of this channel's region (within a rank's segment for AG/RS)
  size_t length = 0;   // elements in the region
  size_t stride = 0;   // AG/RS: elements between rank segments (sendcount / recvcount)
  size_t chunk = 1;    // most elements per step (one staging slot)
  RingHalf half = RingHalf::kBoth;  // all-reduce only
  // AG/RS: the rank at each ring position, when the ring does not visit ranks in
  // rank order (it enters each node once); null means position = rank.
  const int* order = nullptr;
};

// All-reduce: the segment of [begin, begin + length) that the reduce-scatter
// half leaves complete at ring position `pos` (and the all-gather half starts from).
struct Segment {
  size_t begin = 0, length = 0;
};
Segment ownedSegment(const RingParams& p);

class RingSchedule {
 public:
  explicit RingSchedule(const RingParams& p);
  size_t numSteps() const { return numSteps_; }
  RingStep step(size_t i) const;

 private:
  RingStep allReduceStep(size_t loop, int k) const;
  RingStep segmentedStep(size_t loop, int k) const;  // reduce-scatter and all-gather
  RingStep chainStep(size_t loop) const;             // broadcast and reduce
  int chunkIndex(int offset) const { return ((p_.pos + offset) % p_.nranks + p_.nranks) % p_.nranks; }

  RingParams p_;
  size_t segLen_ = 0;  // all-reduce: elements per rank segment of the region
  size_t loops_ = 0;
  int stepsPerLoop_ = 1;
  size_t numSteps_ = 0;
};

}  // namespace strata::algorithms
