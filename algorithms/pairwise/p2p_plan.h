// Planning one point-to-point transfer (a send to or a receive from one peer), for
// the pairwise collectives and for algorithms built from such transfers.
#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"

namespace strata::algorithms::pairwise {

// How a transfer sits in its collective. Both ends of a transfer pass the same.
struct P2pShape {
  bool fanOut = false;    // one rank serves several at once, who then copy in parallel
  bool balanced = false;  // both ends would copy anyway (transport::Transfer::kBalanced)
};

// A large transfer moves once where the link allows: one one-sided write, or, with
// `fanOut`, one read by the receiver; else slot-sized messages. Both ends decide alike
// from the byte count (equal by NCCL's rules) and the link's capabilities.
void addSend(PlanContext& ctx, const char* fn, const char* buf, size_t bytes, int peer, P2pShape shape = {});
void addRecv(PlanContext& ctx, const char* fn, char* buf, size_t bytes, int peer, P2pShape shape = {});

}  // namespace strata::algorithms::pairwise
