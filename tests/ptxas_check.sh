#!/usr/bin/env bash
# The device-driven kernels must keep everything in registers and shared memory: no
# stack frame and no spills in any of their instantiations (a thread's local memory
# is DRAM traffic in the inner loop). Compiles each kernel source for one GPU
# architecture with ptxas' report on and fails on any function with a stack frame or
# a spill, printing the table (a device function left out of line is listed by its own
# name: its call costs the kernel a stack frame).
# Usage: ptxas_check.sh NVCC SOURCE_DIR ARCH FILE...
set -uo pipefail
nvcc=$1 src=$2 arch=$3
shift 3
bad=0
for f in "$@"; do
  report=$("$nvcc" -std=c++17 -O3 -fmad=false -arch="sm_$arch" -Xptxas -v -I "$src/include" -I "$src/src" \
    -DSTRATA_NCCL_NO_CUDA_HEADERS -c "$src/$f" -o /dev/null 2>&1) || { echo "$report"; echo "ptxas_check: $f failed to compile"; exit 1; }
  table=$(awk '
    /Function properties for/ { match($0, /_Z[A-Za-z0-9_]*/); name = substr($0, RSTART, RLENGTH) }
    /bytes stack frame/ { printf "%s: %s\n", name, $0 }' <<< "$report" | sed 's/  */ /g')
  entries=$(grep -c . <<< "$table")
  echo "$f (sm_$arch): $entries functions (kernels, and any function ptxas kept out of line)"
  echo "$table" | sed 's/^/  /'
  if grep -v -q " 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" <<< "$table"; then bad=1; fi
  [ "$entries" -gt 0 ] || { echo "ptxas_check: no kernel report for $f"; bad=1; }
done
[ $bad -eq 0 ] && echo "ptxas_check: every kernel: 0 bytes of stack, 0 spills"
exit $bad
