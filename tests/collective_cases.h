// The exact-results collective cases, shared by the single-host matrix and the netns test bed.
#pragma once

#include <string>

#include "nccl.h"

namespace strata::test {

// Runs every case on this rank; "" on success, else the first mismatch or failed call.
std::string runAll(ncclComm_t comm, int rank, int n);

// A rank's whole body for runRanks: makes a communicator, runs every case, destroys it.
std::string runAllOnNewComm(int rank, int nranks, const ncclUniqueId& id);

}  // namespace strata::test
