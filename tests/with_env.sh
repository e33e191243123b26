#!/usr/bin/env bash
# Runs a command under environment variables given as arguments before "--";
# "%3B" in a value stands for ';' (CMake cannot pass a ';' inside a test's
# environment or argument through its lists).
#
# When the command is a GoogleTest binary, the variant reports how many of its cases
# ran, and a variant in which no case ran (every case skipped, or a filter that
# matches nothing) does not pass: it is reported skipped (exit 77) when every case
# skipped for want of a GPU or RDMA hardware, and failed otherwise.
set -uo pipefail
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  export "${1//%3B/;}"
  shift
done
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ $rc -eq 0 ] || exit $rc
grep -q '^\[==========\] .* ran\.' "$log" || exit 0  # not a GoogleTest run
passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$log" | tail -1)
skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?, listed below:.*/\1/p' "$log" | tail -1)
ran=${passed:-0}
echo "with_env: ${ran} cases ran, ${skipped:-0} skipped"
[ "$ran" -gt 0 ] && exit 0
reasons=$(grep -A1 ': Skipped$' "$log" | grep -v -e ': Skipped$' -e '^--$' | sort | uniq -c)
if [ -z "$reasons" ]; then
  echo "with_env: no case ran: the filter matches no test"
  exit 1
fi
echo "with_env: no case ran; every case skipped:"
echo "$reasons"
if ! grep -v -q -E '^ *[0-9]+ (no GPU|needs [0-9]+ GPUs|no RDMA)' <<< "$reasons"; then
  echo "skipped: no GPU or RDMA device for any case"
  exit 77
fi
exit 1
