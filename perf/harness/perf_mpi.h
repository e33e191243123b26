// The same collectives through MPI (--backend mpi), for side-by-side comparison.
#pragma once

#include <string>

#include "harness/perf_colls.h"

namespace strata::perf {

// Why MPI cannot run this case ("" when it can): the type or op has no MPI
// equivalent, the tool was built without MPI, or in-place has another meaning.
std::string mpiUnsupported(Coll coll, ncclDataType_t type, ncclRedOp_t op, bool inPlace, bool launchedByMpi);

// Runs one collective with MPI on MPI_COMM_WORLD; returns false on an MPI error.
bool mpiCollective(Coll coll, const CallArgs& a, bool inPlace);

}  // namespace strata::perf
