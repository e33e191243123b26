// The shared driver of the perf tools.
#pragma once

#include "harness/perf_colls.h"

namespace strata::perf {

// Runs the nccl-tests-style sweep of one collective; returns the exit code.
int perfMain(int argc, char** argv, Coll coll);

}  // namespace strata::perf
