#!/usr/bin/env bash
# The main job: install what is missing, build, and run an all-reduce sweep over
# 4 local ranks on host memory, printed as nccl-tests prints it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/bin/all_reduce_perf -t 4 -b 8 -e 256M -f 2 -n 10 -c 1 "$@"
