#!/usr/bin/env bash
# The test suite: install what is missing, build, and run every test this machine
# can run (ctest; slow tests labelled "stress" are left out unless STRATA_STRESS=1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
exclude=()
[ "${STRATA_STRESS:-0}" = 1 ] || exclude=(-LE stress)
ctest --output-on-failure --timeout 900 "${exclude[@]}" "$@"
cd ..
# ASan, UBSan and TSan over the unit, transport and lifetime suites, then every fuzz
# target for STRATA_FUZZ_SECONDS (scripts/run-sanitizers.sh); STRATA_SANITIZERS=0 skips them.
[ "${STRATA_SANITIZERS:-1}" = 0 ] || scripts/run-sanitizers.sh
