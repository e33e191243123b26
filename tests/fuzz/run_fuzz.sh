#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed time (STRATA_FUZZ_SECONDS, default 60) from
# its committed seed corpus (tests/fuzz/corpus/<target>), on a scratch copy so the
# inputs it finds do not land in the source tree. A crash, leak, sanitizer report or
# timeout fails the test; the reproducer is left in the scratch directory, whose
# path is printed (add it to the corpus as a regression seed once fixed).
set -euo pipefail
target=$1 corpus=$2
seconds=${STRATA_FUZZ_SECONDS:-60}
work=$(mktemp -d "${TMPDIR:-/tmp}/strata-fuzz-$(basename "$target").XXXXXX")
cp -r "$corpus/." "$work/"
echo "fuzzing $(basename "$target") for ${seconds}s from $(ls "$work" | wc -l) seeds in $work"
cd "$work"
status=0
"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$work" 2>&1 |
  tee "$work.log" || status=${PIPESTATUS[0]}
# One line per target for the stage's summary (STRATA_FUZZ_SUMMARY: a file to append to).
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work.log" | tail -1)
line="$(basename "$target"): ${runs:-?} executions in ${seconds} s, exit $status"
echo "$line"
[ -n "${STRATA_FUZZ_SUMMARY:-}" ] && echo "$line" >>"$STRATA_FUZZ_SUMMARY"
rm -f "$work.log"
[ $status -eq 0 ] && rm -rf "$work"
exit $status
