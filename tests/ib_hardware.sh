#!/usr/bin/env bash
# The fake-node matrix over real RDMA devices (label ib): runs where
# /sys/class/infiniband lists one, through libibverbs.so.1 itself (NCCL_NET=IB, so
# a run that fell back to TCP fails); skipped with the reason elsewhere.
set -euo pipefail
collectives_test=$1
shopt -s nullglob
devices=(/sys/class/infiniband/*)
if ((${#devices[@]} == 0)); then
  echo "skipped: no RDMA device in /sys/class/infiniband (the emulator variants cover the transport here)"
  exit 0
fi
echo "ib_hardware: devices ${devices[*]##*/}"
unset STRATA_IBVERBS_LIB
exec env NCCL_NET=IB "$collectives_test" --gtest_filter='*FakeNodes*'
