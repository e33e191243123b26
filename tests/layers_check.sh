#!/usr/bin/env bash
# The layer check passes on this tree, and fails on a copy with one include that
# crosses a layer (so it cannot pass by checking nothing).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/check-layers.sh" "$root" || exit 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/src" "$root/algorithms" "$root/transports" "$root/perf" "$root/tools" "$root/tests" "$work/"
echo '#include "algorithms/ring/ring_task.h"' >> "$work/src/core/executor.cc"
echo '#include "core/communicator.h"' >> "$work/transports/shm/shm_transport.cc"
out=$("$root/scripts/check-layers.sh" "$work")
if [ $? -eq 0 ]; then echo "layers_check: an injected violation was not found"; exit 1; fi
grep -c VIOLATION <<< "$out" | grep -qx 2 || { echo "layers_check: expected 2 violations:"; echo "$out"; exit 1; }
echo "layers_check: the check finds injected violations"
