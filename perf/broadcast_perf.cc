// broadcast_perf: nccl-tests' broadcast benchmark over Strata (see harness/perf_main.h).
#include "harness/perf_main.h"

int main(int argc, char** argv) { return strata::perf::perfMain(argc, argv, strata::perf::Coll::kBroadcast); }
