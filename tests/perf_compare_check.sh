#!/usr/bin/env bash
# perf/compare.py end to end on one size: every row must carry both sides' rates, the
# ratio, the memory bound, the CMA bound (the probe's process_vm_readv rate > 0) and the
# range of the repetitions' ratios. The probe also prints what memory's first write and
# first process_vm_readv cost, and the second of each. The 2-rank all-gather's row also
# carries bare_exchange's time and both sides' times over it; bare_exchange checks
# its own outputs exactly and exits 1 when one is wrong.
# Usage: perf_compare_check.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1 build=$2
probe=$("$build/bin/membw_probe" 1 1) || { echo "perf_compare_check: membw_probe failed"; exit 1; }
awk '/^cma_gbps / { found = $2 > 0 } END { exit !found }' <<< "$probe" ||
  { echo "$probe"; echo "perf_compare_check: no process_vm_readv rate"; exit 1; }
awk '/^(first|second)_(write|cma)_ms_per_mib / { if ($2 > 0) n++ } END { exit n != 4 }' <<< "$probe" ||
  { echo "$probe"; echo "perf_compare_check: no first-touch costs"; exit 1; }
bare=$(timeout 120 "$build/bin/bare_exchange" 1 3) || { echo "$bare"; echo "perf_compare_check: bare_exchange failed"; exit 1; }
awk '/^(cma|slots|mapped)_us / { if ($2 > 0) n++ } END { exit n != 3 }' <<< "$bare" ||
  { echo "$bare"; echo "perf_compare_check: bare_exchange printed no three times"; exit 1; }
out=$(timeout 600 python3 "$src/perf/compare.py" --build "$build" --reps 1 --ranks 2 --colls all_gather,broadcast \
  -b 1M -e 1M 2>&1)
rc=$?
echo "$out" | tail -n 12
[ $rc -eq 0 ] || { echo "perf_compare_check: compare.py exited $rc"; exit 1; }
row='^ +1048576( +[0-9]+\.[0-9]+){4} +[0-9]+% +[0-9]+% +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9]{2}-[0-9]+\.[0-9]{2}'
rows=$(grep -Ec "$row\$" <<< "$out")
withBare=$(grep -Ec "$row +[0-9]+\.[0-9]( +[0-9]+\.[0-9]{2}){2}\$" <<< "$out")
[ "$rows" -eq 1 ] && [ "$withBare" -eq 1 ] ||
  { echo "perf_compare_check: $rows complete rows of 1 and $withBare with the bare exchange of 1"; exit 1; }
echo "perf_compare_check: 2 complete rows, one with the bare exchange"
