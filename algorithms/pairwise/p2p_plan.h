// Planning one point-to-point transfer (a send to or a receive from one peer), for
// the pairwise collectives and for algorithms built from such transfers.
#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"

namespace strata::algorithms::pairwise {

// A large transfer moves once where the link allows: one one-sided write, or,
// with `fanOut` (one rank serving several at once, who then copy in parallel),
// one read by the receiver; else slot-sized messages. Both ends decide alike from
// the byte count (equal by NCCL's rules) and the link's capabilities.
void addSend(PlanContext& ctx, const char* fn, const char* buf, size_t bytes, int peer, bool fanOut = false);
void addRecv(PlanContext& ctx, const char* fn, char* buf, size_t bytes, int peer, bool fanOut = false);

}  // namespace strata::algorithms::pairwise
