#!/usr/bin/env bash
# Checks that dependencies point down only (shared/DESIGN.md, docs/design.md):
#   transports/   includes nothing from src/core or algorithms/
#   src/core      includes no concrete transport (transports/<name>/) and no
#                 concrete algorithm (algorithms/<name>/)
#   algorithms/   includes only algorithms/, the transport interface, src/device,
#                 the topology's data types, src/base, src/common and nccl.h
#   src/topology  includes nothing from algorithms/, transports/ or src/core
#   src/device, src/base, src/common include nothing from the layers above them
#   perf/         includes only nccl.h, src/common, src/verify and its harness
#   CUDA headers  only in src/device (and the tools and tests that drive a GPU)
#   hwloc         only in src/topology/discover_hwloc.cc
#   libibverbs    only in transports/ib (loaded with dlopen) and the tests' verbs device
# Prints every include that crosses a layer on purpose, with the reason, then the
# violations; exits 1 if there are any.
set -uo pipefail
cd "${1:-$(dirname "$0")/..}"  # a tree to check (default: this one)
violations=0

includes() {  # file:line:header for every quoted include under the given paths
  grep -rn --include='*.h' --include='*.cc' --include='*.cu' '^#include "' "$@" 2>/dev/null |
    sed 's/^\([^:]*\):\([0-9]*\):#include "\([^"]*\)".*/\1:\2:\3/'
}

bad() {
  echo "VIOLATION: $1"
  violations=$((violations + 1))
}

while IFS=: read -r file line header; do
  case $header in src/core/*|core/*|algorithms/*) bad "$file:$line includes $header (transports sit below core and algorithms)";; esac
done < <(includes transports)

while IFS=: read -r file line header; do
  case $header in
    transports/transport.h) ;;
    transports/*) bad "$file:$line includes $header (core knows transports through transports/transport.h only)";;
    algorithms/*/*) bad "$file:$line includes $header (core knows algorithms through algorithms/*.h only)";;
  esac
done < <(includes src/core src/api)

while IFS=: read -r file line header; do
  case $header in
    algorithms/*|transports/transport.h|device/*|base/*|common/*|nccl.h|topology/planner.h|topology/system.h|topology/xml.h) ;;
    *) bad "$file:$line includes $header (algorithms see the transport interface, src/device and topology data only)";;
  esac
done < <(includes algorithms)

while IFS=: read -r file line header; do
  case $header in algorithms/*|transports/*|core/*|api/*) bad "$file:$line includes $header (topology is plain data below the algorithms)";; esac
done < <(includes src/topology)

while IFS=: read -r file line header; do
  case $header in algorithms/*|transports/*|core/*|api/*|topology/*) bad "$file:$line includes $header (below the layers that use it)";; esac
done < <(includes src/device src/base src/common src/verify)

while IFS=: read -r file line header; do
  case $header in nccl.h|common/*|verify/*|harness/*) ;;
    device/*) [[ $file == perf/gpu_bench.cc ]] || bad "$file:$line includes $header (perf tools use nccl.h and the reference data only)";;
    *) bad "$file:$line includes $header (perf tools use nccl.h and the reference data only)";;
  esac
done < <(includes perf)

while IFS= read -r hit; do
  case ${hit%%:*} in src/device/*|perf/harness/perf_device.cc|perf/gpu_bench.cc|tests/*) ;; *) bad "$hit (CUDA headers belong to src/device)";; esac
done < <(grep -rln --include='*.h' --include='*.cc' -E '#include <(cuda|cuda_runtime|cuda_runtime_api)\.h>' src algorithms transports perf tools tests 2>/dev/null)

while IFS= read -r hit; do
  [[ $hit == src/topology/discover_hwloc.cc ]] || bad "$hit includes hwloc (only src/topology/discover_hwloc.cc may)"
done < <(grep -rl --include='*.h' --include='*.cc' '#include <hwloc' src algorithms transports tools 2>/dev/null)

while IFS= read -r hit; do
  case $hit in transports/ib/*|tests/verbs_emu/*|tests/unit/ib_test.cc) ;; *) bad "$hit includes libibverbs (only transports/ib may)";; esac
done < <(grep -rl --include='*.h' --include='*.cc' '#include <infiniband/' src algorithms transports tools tests perf integrations 2>/dev/null)

echo "layer check: includes that cross a layer on purpose:"
echo "  transports/cuda_ipc -> topology/local.h, topology/planner.h: peer-to-peer policy (NCCL_P2P_LEVEL) is a path class in the node's topology"
echo "  algorithms/ -> topology/planner.h: the tuner reads the plan's plain data (LinkCost, Plan)"
echo "  algorithms/device_direct -> device/gpu.h: device-memory algorithms enqueue kernels"
echo "  perf/gpu_bench.cc -> device/: it benchmarks the device layer's kernels themselves"
echo "  perf/harness/perf_device.cc -> cuda_runtime.h: the perf tools reach GPUs through their own CUDA runtime, as nccl-tests do"
if [ "$violations" -gt 0 ]; then
  echo "layer check: $violations violation(s)"
  exit 1
fi
echo "layer check: no violations"
