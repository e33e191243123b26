#include "algorithms/ring/ring_schedule.h"

#include <algorithm>

#include "base/mutation.h"

namespace strata::algorithms {

static size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

RingSchedule::RingSchedule(const RingParams& p) : p_(p) {
  if (p_.chunk == 0) p_.chunk = 1;
  int n = p_.nranks;
  if (n == 1) {  // one local copy (plus the op's pre/post processing)
    numSteps_ = 1;
    return;
  }
  switch (p_.coll) {
    case Collective::kAllReduce:
      segLen_ = ceilDiv(p_.length, n);
      loops_ = std::max<size_t>(1, ceilDiv(segLen_, p_.chunk));
      stepsPerLoop_ = p_.half == RingHalf::kBoth ? 2 * n - 1 : n;
      break;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      loops_ = std::max<size_t>(1, ceilDiv(p_.length, p_.chunk));
      stepsPerLoop_ = n;
      break;
    default:
      loops_ = std::max<size_t>(1, ceilDiv(p_.length, p_.chunk));
      stepsPerLoop_ = 1;
      break;
  }
  numSteps_ = loops_ * static_cast<size_t>(stepsPerLoop_);
}

RingStep RingSchedule::step(size_t i) const {
  if (p_.nranks == 1) {
    RingStep s;
    s.readLocal = s.writeOut = s.final = true;
    s.srcOffset = s.dstOffset = p_.begin;
    s.count = p_.length;
    return s;
  }
  size_t loop = i / stepsPerLoop_;
  int k = static_cast<int>(i % stepsPerLoop_);
  if (p_.coll == Collective::kAllReduce) return allReduceStep(loop, k);
  if (p_.coll == Collective::kAllGather || p_.coll == Collective::kReduceScatter) return segmentedStep(loop, k);
  return chainStep(loop);
}

Segment ownedSegment(const RingParams& p) {
  size_t segLen = ceilDiv(p.length, static_cast<size_t>(p.nranks));
  size_t start = static_cast<size_t>((p.pos + 1) % p.nranks) * segLen;
  Segment s;
  s.begin = p.begin + std::min(start, p.length);
  s.length = std::min(segLen, p.length - std::min(start, p.length));
  return s;
}

// Reduce-scatter over n-1 steps, then all-gather of the reduced chunks over n-1 more.
// Step n-1 completes chunk pos+1: it is the last step of the reduce-scatter half
// (which keeps it) and the first of the all-gather half (which sends it from the output).
RingStep RingSchedule::allReduceStep(size_t loop, int k) const {
  int n = p_.nranks;
  RingStep s;
  int chunkOffset;
  if (p_.half == RingHalf::kAllGather) k += n - 1;
  if (p_.half == RingHalf::kReduceScatter && k == n - 1) {
    s.recv = s.reduceLocal = s.writeOut = s.final = true;
    chunkOffset = -k;
  } else if (p_.half == RingHalf::kAllGather && k == n - 1) {
    s.send = s.readLocal = s.writeOut = true;  // reads the output: the caller passes it as the input
    chunkOffset = -k;
  } else if (k == 0) {
    s.send = s.readLocal = true;
    chunkOffset = 0;
  } else if (k < n - 1) {
    s.recv = s.reduceLocal = s.send = true;
    chunkOffset = -k;
  } else if (k == n - 1) {
    s.recv = s.reduceLocal = s.send = s.writeOut = s.final = true;
    chunkOffset = -k;
  } else if (k < 2 * n - 2) {
    s.recv = s.send = s.writeOut = true;
    chunkOffset = 1 - (k - (n - 1));
  } else {
    s.recv = s.writeOut = true;
    chunkOffset = 2 - n;
  }
  size_t j = static_cast<size_t>(chunkIndex(chunkOffset));
  size_t o = loop * p_.chunk;
  size_t segStart = j * segLen_ + o;
  size_t inSeg = segLen_ > o ? std::min(p_.chunk, segLen_ - o) : 0;
  size_t inRegion = p_.length > segStart ? p_.length - segStart : 0;
  s.count = std::min(inSeg, inRegion);
  s.srcOffset = s.dstOffset = p_.begin + segStart;
  if (mutated(Mutation::kRingChunkShift) && s.writeOut && !s.reduceLocal) {  // the all-gather half, misplaced
    size_t shifted = ((j + 1) % static_cast<size_t>(n)) * segLen_ + o;
    if (shifted + s.count <= p_.length) s.dstOffset = p_.begin + shifted;
  }
  return s;
}

RingStep RingSchedule::segmentedStep(size_t loop, int k) const {
  int n = p_.nranks;
  bool rs = p_.coll == Collective::kReduceScatter;
  RingStep s;
  if (k == 0) {
    s.send = s.readLocal = true;
    s.writeOut = !rs;  // all-gather copies its own piece into place
  } else if (k < n - 1) {
    s.recv = s.send = true;
    s.reduceLocal = rs;
    s.writeOut = !rs;
  } else {
    s.recv = s.writeOut = true;
    s.reduceLocal = s.final = rs;
  }
  // Reduce-scatter ends with chunk `pos` at this rank; all-gather starts from it.
  bool rotate = rs && mutated(Mutation::kReduceScatterRotate);  // ends with chunk pos + 1
  size_t j = static_cast<size_t>(chunkIndex(rs && !rotate ? -1 - k : -k));
  size_t o = loop * p_.chunk;
  s.count = p_.length > o ? std::min(p_.chunk, p_.length - o) : 0;
  if (p_.order) j = static_cast<size_t>(p_.order[j]);
  if (rs) {
    s.srcOffset = j * p_.stride + p_.begin + o;
    s.dstOffset = p_.begin + o;
  } else {
    s.srcOffset = p_.begin + o;
    s.dstOffset = j * p_.stride + p_.begin + o;
  }
  return s;
}

// A chain through the ring: broadcast flows out of the root, reduce flows into it.
RingStep RingSchedule::chainStep(size_t loop) const {
  int n = p_.nranks;
  bool reduce = p_.coll == Collective::kReduce;
  int q = reduce ? ((p_.pos - p_.rootPos - 1) % n + n) % n : ((p_.pos - p_.rootPos) % n + n) % n;
  RingStep s;
  if (q == 0) {
    s.send = s.readLocal = true;
    s.writeOut = !reduce;
  } else if (q < n - 1) {
    s.recv = s.send = true;
    s.reduceLocal = reduce;
    s.writeOut = !reduce;
  } else {
    s.recv = s.writeOut = true;
    s.reduceLocal = s.final = reduce;
  }
  size_t o = loop * p_.chunk;
  s.count = p_.length > o ? std::min(p_.chunk, p_.length - o) : 0;
  s.srcOffset = s.dstOffset = p_.begin + o;
  return s;
}

}  // namespace strata::algorithms
