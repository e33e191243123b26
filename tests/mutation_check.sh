#!/usr/bin/env bash
# The mutation stage: each deliberate fault (src/base/mutation.h) must make the tests
# that claim to catch it fail on wrong data: a mismatch they print ("element ... is
# ..., expected ..."), not an error of some other kind. Every line of the table below
# is one such claim; docs/testing.md shows the table with what each run printed.
#
# Usage: mutation_check.sh BUILD_DIR [MUTATION...]   (no names: every mutation)
# Exits 0 when every claim held, 1 when a fault survived a test that should catch it.
set -uo pipefail
build=$(cd "$1" && pwd)
shift
bin=$build/tests
python=${STRATA_TORCH_PYTHON_EXE:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)

# mutation | environment | command (run from the build directory) | what the failure
# must show (default: a data mismatch as the tests and perf tools report one)
read -r -d '' table <<'EOF'
ring_chunk_shift||tests/collectives_test --gtest_filter=Host/Collectives.ExactResults/threads_4ranks
ring_chunk_shift||tests/unit_tests --gtest_filter=Ranks/RingScheduleTest.*|ring_schedule_test.cc:[0-9]+: Failure
ring_chunk_shift|NCCL_ALGO=^DirectRead|bin/all_reduce_perf -t 3 -b 1M -e 1M -d float -o sum -n 1 -w 0 -c 1
reduce_scatter_rotate||tests/collectives_test --gtest_filter=Host/Collectives.ExactResults/processes_3ranks
reduce_scatter_rotate||bin/reduce_scatter_perf -t 4 -b 64K -e 64K -d int32 -o sum -n 1 -w 0 -c 1
slot_skip|NCCL_SHM_DISABLE=1|tests/collectives_test --gtest_filter=Host/Collectives.ExactResults/processes_4ranks
slot_skip|STRATA_PUT_BYTES=0|tests/collectives_test --gtest_filter=Host/Collectives.ExactResults/threads_2ranks
gather_swap||tests/collectives_test --gtest_filter=Host/Collectives.ExactResults/threads_3ranks
gather_swap||TORCH test_collectives.py 3
alltoall_untransposed||tests/collectives_test --gtest_filter=Host/Collectives.ExactResults/threads_2ranks
alltoall_untransposed||TORCH test_collectives.py 2
alltoall_untransposed||bin/alltoall_perf -t 4 -b 4K -e 4K -d float -n 1 -w 0 -c 1
tree_child_twice|NCCL_ALGO=allreduce:tree STRATA_TEST_COLLECTIVES=AllReduce|tests/collectives_test --gtest_filter=Host/Collectives.ExactResults/threads_4ranks
tree_child_twice|NCCL_ALGO=allreduce:tree STRATA_TEST_COLLECTIVES=AllReduce|tests/collectives_test --gtest_filter=Loopback/FakeNodes.ExactResults/2x2
kernel_relaxed_flag|STRATA_GPU_SIM=4 STRATA_GPU_SIM_STRICT=1 STRATA_GPU_SIM_WEAK=1 STRATA_GPU_SIM_JITTER=1|tests/gpu_test --gtest_filter=Spread/ManyGpus.ExactAcrossTheKernelsRounds/threads_4ranks
kernel_relaxed_flag|STRATA_GPU_SIM=1 STRATA_GPU_SIM_WEAK=1 STRATA_GPU_SIM_JITTER=1|tests/gpu_test --gtest_filter=PipeKernel.VirtualRanksOnOneGpu
kernel_skip_barrier|STRATA_GPU_SIM=1 STRATA_GPU_SIM_THREADS=4 STRATA_GPU_SIM_JITTER=1|tests/gpu_test --gtest_filter=PipeKernel.VirtualRanksOnOneGpu
kernel_skip_barrier|STRATA_GPU_SIM=4 STRATA_GPU_SIM_STRICT=1 STRATA_GPU_SIM_THREADS=4 STRATA_GPU_SIM_JITTER=1 STRATA_GPU_SIM_WEAK=1|tests/gpu_test --gtest_filter=Spread/ManyGpus.ExactAcrossTheKernelsRounds/threads_4ranks
kernel_skip_barrier|STRATA_GPU_SIM=4 STRATA_GPU_SIM_STRICT=1 STRATA_GPU_SIM_THREADS=4 STRATA_GPU_SIM_JITTER=1 STRATA_GPU_SIM_WEAK=1|tests/gpu_test --gtest_filter=Ranks/DeviceDrivenP2p.ARingExchangeCapturedOnceReplaysExactly/threads_4ranks
kernel_skip_acquire|STRATA_GPU_SIM=1 STRATA_GPU_SIM_WEAK=1|tests/gpu_test --gtest_filter=PipeKernel.VirtualRanksOnOneGpu
kernel_skip_acquire|STRATA_GPU_SIM=4 STRATA_GPU_SIM_STRICT=1 STRATA_GPU_SIM_WEAK=1|tests/gpu_test --gtest_filter=Spread/ManyGpus.ExactAcrossTheKernelsRounds/threads_4ranks
kernel_ll_one_flag|STRATA_GPU_SIM=4 STRATA_GPU_SIM_STRICT=1 STRATA_GPU_SIM_WEAK=1 STRATA_GPU_SIM_JITTER=1 NCCL_PROTO=LL|tests/gpu_test --gtest_filter=Ranks/DeviceDriven.AGraphCapturedOnceReplaysExactly/threads_4ranks
ib_no_fork_init||tests/ib_api_test --gtest_filter=IbFork.ChildrenForkedDuringTransfersChangeNothing|element [0-9]+ of [0-9]+ is .*expected|made no progress for [0-9]+ s
net_bounce_shift||tests/ib_api_test --gtest_filter=IbCounters.UnregisteredBuffersRegisterNothingAfterTheFirstOperation
net_bounce_shift|STRATA_GPU_SIM=1|tests/gpudirect_test --gtest_filter=GpuDirectRdma.SendRecvBetweenNodesMoveGpuToGpuThroughTheNic
ib_no_gdr_flush|STRATA_GPU_SIM=1|tests/gpudirect_test --gtest_filter=GpuDirectRdma.SendRecvBetweenNodesMoveGpuToGpuThroughTheNic
ib_own_mtu|NCCL_NET=IB STRATA_IBVERBS_LIB=lib/test-plugins/libstrata-verbs-emu.so STRATA_VERBS_EMU_MTU=mixed NCCL_IB_TIMEOUT=14|tests/collectives_test --gtest_filter=Loopback/FakeNodes.ExactResults/2x2|the connection with rank [0-9]+ failed: IB: .*transport retry counter exceeded
EOF

wanted=("$@")
survived=0
checked=0
cd "$build" || exit 2
mismatch="element [0-9]+ (of [0-9]+ )?is .*expected|Out of bounds values : [1-9][0-9]* FAILED|: got .*expected"
while IFS='|' read -r name envs cmd shows; do
  [ -n "$name" ] || continue
  if ((${#wanted[@]})) && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  if [[ "$cmd" == TORCH* ]]; then
    if [ ! -d "$build/python/strata_torch" ]; then
      echo "mutation $name: skipped (the PyTorch backend was not built): ${cmd#TORCH }"
      continue
    fi
    cmd="$python $here/../integrations/torch/tests/${cmd#TORCH }"
    envs="$envs PYTHONPATH=$build/python STRATA_REFERENCE_LIB=$build/lib/libstrata-reference.so OMP_NUM_THREADS=1"
  fi
  checked=$((checked + 1))
  # shellcheck disable=SC2086  # the environment and command are word lists
  out=$(env STRATA_MUTATION="$name" $envs timeout 300 $cmd 2>&1)
  rc=$?
  # The evidence: a mismatch reported as such (tests, PyTorch) or counted (perf tools).
  evidence=$(grep -m1 -E "${shows:-$mismatch}" <<< "$out")
  if [ $rc -ne 0 ] && [ -n "$evidence" ]; then
    echo "mutation $name: caught by: ${envs:+$envs }$cmd"
    echo "    ${evidence:0:300}"
  else
    survived=$((survived + 1))
    echo "mutation $name: NOT caught (exit $rc, no mismatch reported) by: ${envs:+$envs }$cmd"
    tail -n 5 <<< "$out" | sed 's/^/    /'
  fi
done <<< "$table"
echo "mutation stage: $checked runs, $((checked - survived)) caught the fault, $survived did not"
[ $checked -gt 0 ] && [ $survived -eq 0 ]
