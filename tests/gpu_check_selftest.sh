#!/usr/bin/env bash
# scripts/gpu-check.sh must fail when a step fails: a pack whose gpu_test fails every
# test makes the per-process step (run_each) FAIL and the run exit non-zero; the same
# pack with a gpu_test that passes makes that step PASS (the check can go either way).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

make_pack() {  # make_pack DIR EXIT_CODE
  mkdir -p "$1/bin" "$1/lib"
  cat > "$1/bin/gpu_test" <<SCRIPT
#!/usr/bin/env bash
case "\$*" in
  *--gtest_list_tests*) printf 'Fake/Planted.\n  processes_2ranks\n' ;;
  *) echo "[  RUN     ] Fake/Planted.processes_2ranks"; [ $2 -eq 0 ] && echo "[       OK ] planted" || echo "[  FAILED  ] planted"; exit $2 ;;
esac
SCRIPT
  printf '#!/bin/sh\nexit 0\n' > "$1/bin/gpu_bench"
  chmod +x "$1/bin/"*
}

run_check() {  # run_check PACK: the run's output; its exit code in $tmp/rc
  (cd "$root" && GPU_CHECK_PACK=$1 OUT=$tmp/out-$(basename "$1") GPU_CHECK_BUDGET=60 PATH=/usr/bin:/bin \
    scripts/gpu-check.sh run > "$tmp/log" 2>&1; echo $? > "$tmp/rc")
  cat "$tmp/log"
}

make_pack "$tmp/failing" 1
out=$(run_check "$tmp/failing")
rc=$(cat "$tmp/rc")
grep -q "^FAIL  gpu_tests_processes" <<< "$out" || { echo "$out"; echo "FAILED: a failing test did not fail gpu_tests_processes"; exit 1; }
[ "$rc" -ne 0 ] || { echo "FAILED: gpu-check exited 0 with a failing step"; exit 1; }
make_pack "$tmp/passing" 0
out=$(run_check "$tmp/passing")
grep -q "^PASS  gpu_tests_processes" <<< "$out" || { echo "$out"; echo "FAILED: a passing test did not pass gpu_tests_processes"; exit 1; }
echo "gpu-check: a planted failing test fails its step and the run (exit $rc); a passing one passes it"
