#!/usr/bin/env bash
# The test suite: install what is missing, build, and run every test this machine
# can run (ctest; slow tests labelled "stress" are left out unless STRATA_STRESS=1),
# then the sanitizer and fuzz stages (scripts/run-sanitizers.sh; STRATA_SANITIZERS=0
# skips them). Ends with one line: passed, failed and skipped per stage, the skips'
# reasons grouped (scripts/test_summary.py over ctest's JUnit files).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh || exit 1
scripts/build.sh || exit 1
results=$PWD/build/test-results
rm -rf "$results" && mkdir -p "$results"
exclude=()
[ "${STRATA_STRESS:-0}" = 1 ] || exclude=(-LE stress)
(cd build && ctest --output-on-failure --no-tests=error --timeout 900 --output-junit "$results/main.xml" \
  "${exclude[@]}" "$@")
rc=$?
sanitizers=0
if [ "${STRATA_SANITIZERS:-1}" != 0 ]; then
  STRATA_TEST_RESULTS=$results scripts/run-sanitizers.sh
  sanitizers=$?
fi
summary=(main="$results/main.xml")
for f in "$results"/sanitizer-*.xml; do
  [ -e "$f" ] || continue
  stage=${f##*/sanitizer-}
  summary+=("${stage%%-*}=$f")
done
python3 scripts/test_summary.py "${summary[@]}"
[ $rc -eq 0 ] && [ $sanitizers -eq 0 ]
