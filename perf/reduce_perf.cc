// reduce_perf: nccl-tests' reduce benchmark over Strata (see harness/perf_main.h).
#include "harness/perf_main.h"

int main(int argc, char** argv) { return strata::perf::perfMain(argc, argv, strata::perf::Coll::kReduce); }
