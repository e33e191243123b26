// all_gather_perf: nccl-tests' all_gather benchmark over Strata (see harness/perf_main.h).
#include "harness/perf_main.h"

int main(int argc, char** argv) { return strata::perf::perfMain(argc, argv, strata::perf::Coll::kAllGather); }
