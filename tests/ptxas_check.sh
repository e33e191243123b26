#!/usr/bin/env bash
# The device-driven kernels must keep everything in registers and shared memory: no
# stack frame and no spills in any of their instantiations, for any architecture built
# (a thread's local memory is DRAM traffic in the inner loop). Reads ptxas' report
# that the build kept beside each kernel object (cmake/ptxas_report.sh: OBJECT.ptxas)
# and fails on any function with a stack frame or a spill, printing the table (a device
# function left out of line is listed by its own name: its call costs the kernel a
# stack frame).
# Usage: ptxas_check.sh OBJECT...
set -uo pipefail
bad=0
for obj in "$@"; do
  report=$obj.ptxas
  name=${obj##*/}
  if [ ! -s "$report" ]; then
    echo "ptxas_check: no ptxas report for $name ($report): built without cmake/ptxas_report.sh?"
    bad=1
    continue
  fi
  table=$(awk '
    /for .sm_[0-9]+a?./ { match($0, /sm_[0-9]+a?/); arch = substr($0, RSTART, RLENGTH) }
    /Function properties for/ { match($0, /_Z[A-Za-z0-9_]*/); fn = substr($0, RSTART, RLENGTH) }
    /bytes stack frame/ { printf "%s %s: %s\n", arch, fn, $0 }' "$report" | sed 's/  */ /g')
  entries=$(grep -c . <<< "$table")
  echo "${name%.o} ($(awk '{print $1}' <<< "$table" | sort -u | tr '\n' ' ')): $entries functions (kernels, and any function ptxas kept out of line)"
  echo "$table" | sed 's/^/  /'
  if grep -v -q " 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" <<< "$table"; then bad=1; fi
  [ "$entries" -gt 0 ] || { echo "ptxas_check: an empty report for $name"; bad=1; }
done
[ $bad -eq 0 ] && echo "ptxas_check: every kernel: 0 bytes of stack, 0 spills"
exit $bad
