#!/usr/bin/env bash
# The planner on every preset and this machine, and NCCL_TOPO_FILE /
# NCCL_TOPO_DUMP_FILE in real runs. Usage: topo_check.sh STRATA_TOPO ALL_REDUCE_PERF PRESET_DIR
set -uo pipefail
topo=$1 perf=$2 presets=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
check() { echo "topo_check: FAIL: $*"; failed=1; }

# 1. Every preset and this machine, as tables and as JSON.
for t in "$presets"/*.xml ""; do
  name=${t:-this machine}
  args=(--nodes 2)
  [ -n "$t" ] && args+=(--topo "$t")
  "$topo" "${args[@]}" > "$work/out.txt" 2>&1 || { check "$name: strata-topo exited $?"; cat "$work/out.txt"; continue; }
  grep -q "== Predictions ==" "$work/out.txt" || check "$name: no prediction table"
  "$topo" "${args[@]}" --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
p = d["predictions"]
keys = {"collective", "bytes", "algorithm", "protocol", "algbw_gbps", "busbw_gbps"}
assert len(p) == 66 and all(keys <= set(e) for e in p), "bad predictions"
assert {e["bytes"] for e in p} == {8 * 8**i for i in range(11)}, "sizes are not 8 B .. 8 GiB"
' || check "$name: --json is not the expected object"
done

# 1b. A machine that hides its sysfs (containers): warnings, never a crash, and runs still work.
mkdir -p "$work/emptyroot"
HWLOC_FSROOT="$work/emptyroot" "$topo" > "$work/hidden.txt" 2>&1 || check "strata-topo on a hidden sysfs exited $?"
grep -q "warning: hwloc sees no GPU and no NIC" "$work/hidden.txt" || check "no warning for a hidden sysfs"
HWLOC_FSROOT="$work/emptyroot" timeout 120 "$perf" -t 2 -b 8 -e 8 -n 1 -w 0 > /dev/null 2>&1 || check "a run on a hidden sysfs failed"

# 2. A dump of this machine loads back and dumps identically.
"$topo" --dump "$work/local.xml" > /dev/null 2>&1 || check "strata-topo --dump failed"
"$topo" --topo "$work/local.xml" --dump "$work/again.xml" > /dev/null 2>&1 || check "the dump does not load back"
cmp -s "$work/local.xml" "$work/again.xml" || check "dump -> load -> dump differs"

# 3. A real run writes the node's topology, and reads it back.
NCCL_TOPO_DUMP_FILE="$work/run.xml" NCCL_DEBUG=INFO timeout 120 "$perf" -t 2 -b 8 -e 8 -n 1 -w 0 > "$work/run.txt" 2>&1 \
  || check "all_reduce_perf with NCCL_TOPO_DUMP_FILE failed"
grep -q "topology: written to $work/run.xml" "$work/run.txt" || check "no 'written to' line under NCCL_DEBUG=INFO"
NCCL_TOPO_FILE="$work/run.xml" timeout 120 "$perf" -t 2 -b 8 -e 8 -n 1 -w 0 > /dev/null 2>&1 || check "the run's dump does not load back"

# 4. A malformed file fails the run with its name and line.
printf '<system version="1">\n  <cpu numaid="0">\n</system>\n' > "$work/bad.xml"
if NCCL_TOPO_FILE="$work/bad.xml" timeout 120 "$perf" -t 2 -b 8 -e 8 -n 1 -w 0 > "$work/bad.txt" 2>&1; then
  check "a malformed NCCL_TOPO_FILE did not fail the run"
fi
grep -q "bad.xml:3: </system> closes <cpu> opened on line 2" "$work/bad.txt" || { check "the error does not name file and line"; tail -5 "$work/bad.txt"; }

# 5. NCCL_TOPO_FILE changes what a real run chooses: 2 (fake) nodes x 2 ranks, 256 KiB.
if command -v mpirun > /dev/null; then
  cat > "$work/node.sh" <<'EON'
#!/bin/bash
export NCCL_HOSTID=topo-check-node$((OMPI_COMM_WORLD_RANK / 2))
exec "$@"
EON
  chmod +x "$work/node.sh"
  choice() {
    NCCL_TOPO_FILE=$1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING NCCL_SOCKET_IFNAME=lo timeout 300 \
      mpirun --allow-run-as-root --oversubscribe -np 4 -x NCCL_TOPO_FILE -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS \
      -x NCCL_SOCKET_IFNAME -x LD_LIBRARY_PATH "$work/node.sh" "$perf" -b 256K -e 256K -n 1 -w 0 2>&1
  }
  plain=$(choice "") || check "the 2 x 2 run without a topology file failed"
  preset=$(choice "$presets/a100-sxm-8gpu.xml") || check "the 2 x 2 run with the A100 preset failed"
  # The TUNING line is strata-topo's prediction row: collective, size, algorithm, protocol, ...
  a=$(grep -m1 "\[0\] NCCL INFO AllReduce  *256 KiB" <<< "$plain" | awk '{print $8 "/" $9}')
  b=$(grep -m1 "\[0\] NCCL INFO AllReduce  *256 KiB" <<< "$preset" | awk '{print $8 "/" $9}')
  echo "topo_check: 256 KiB on 2 x 2 ranks: discovered -> $a; A100 preset -> $b"
  grep -q "topology: $presets/a100-sxm-8gpu.xml: 2 CPU(s), 8 GPU(s), 8 NIC port(s)" <<< "$preset" || check "no topology line for the preset"
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] || check "the preset did not change the choice"
else
  echo "topo_check: mpirun not found; skipping the 2 x 2 run"
fi

[ $failed -eq 0 ] && echo "topo_check: all checks passed"
exit $failed
