#!/usr/bin/env bash
# Runs one perf tool with checking on, every type and op and root, and fails
# unless it exits 0 with no wrong values.
# Usage: perf_check.sh threads|mpirun|mpirun-bulk|mpirun-private-N|scale-N TOOL
# mpirun-bulk: one float sum of 40 MiB, on private memory, past STRATA_CMA_BULK_BYTES
# (256 KiB) and DirectRead's 32 MiB, where the ring's writes between processes go
# through the slots.
set -uo pipefail
mode=$1 tool=$2
args=(-b 1K -e 256K -f 16 -d all -o all -r -1 -n 2 -w 1 -c 1)
# mpirun-private-N: N processes on private memory, 600 KiB to 9.6 MiB (odd sizes), where
# DirectRead's balanced reads (all-gather from 4 ranks; broadcast of 2) go through the
# slots; STRATA_PUT_BYTES set, so that oversubscribed ranks take DirectRead below 1 MiB too.
# scale-N: one thread driving N ranks (nccl-tests' -g N), small sizes, so that a
# cost that grows with the square or cube of the rank count shows as a timeout.
# NCCL_BUFFSIZE 64 KiB keeps an all-to-all's mesh of N - 1 links per rank small.
if [[ "$mode" == scale-* ]]; then
  out=$(NCCL_BUFFSIZE=65536 timeout 120 "$tool" -g "${mode#scale-}" -b 4K -e 64K -f 4 -n 2 -w 1 -c 1 2>&1)
elif [[ "$mode" == mpirun-private-* ]]; then
  out=$(timeout 300 mpirun --allow-run-as-root --oversubscribe -np "${mode#mpirun-private-}" \
    -x STRATA_PERF_PRIVATE_MEMORY=1 -x STRATA_PUT_BYTES=16384 "$tool" -b 600K -e 10M -f 4 -d all -r -1 -n 2 -w 1 -c 1 2>&1)
elif [ "$mode" = mpirun-bulk ]; then
  out=$(timeout 300 mpirun --allow-run-as-root --oversubscribe -np 3 -x STRATA_PERF_PRIVATE_MEMORY=1 "$tool" \
    -b 40M -e 40M -d float -o sum -n 2 -w 1 -c 1 2>&1)
elif [ "$mode" = mpirun ]; then
  out=$(timeout 300 mpirun --allow-run-as-root --oversubscribe -np 3 "$tool" "${args[@]}" 2>&1)
else
  out=$(timeout 300 "$tool" -t 3 "${args[@]}" 2>&1)
fi
rc=$?
echo "$out" | tail -n 8
[ $rc -eq 0 ] || { echo "perf_check: $tool exited $rc"; exit 1; }
# Here-strings, not pipes: with pipefail, `echo | grep -q` fails whenever grep exits
# before echo has written everything (SIGPIPE), which a long table makes likely.
grep -q "Out of bounds values : 0 OK" <<< "$out" || { echo "perf_check: wrong values"; exit 1; }
rows=$(grep -c '^ ' <<< "$out")
[ "$rows" -gt 0 ] || { echo "perf_check: no result rows"; exit 1; }
echo "perf_check: $rows rows, no wrong values"
