#!/usr/bin/env bash
# The sanitizer and fuzzing stages of the test suite (scripts/run-tests.sh runs them
# after the main suite; STRATA_SANITIZERS=0 there skips them). Stages, in their own
# trees (build-<stage>), each building only what it runs:
#   asan         ASan and UBSan in one build (ubsan: UBSan alone): the unit suite, the
#                transport conformance suite, the lifetime tests (250 of their 1,000 abort
#                races: STRATA_TEST_ABORT_RACES), and
#                a short random stress (STRATA_STRESS_OPS=100: every collective, type and op,
#                algorithms forced at random, threads, processes and fake nodes, 4 and 8 ranks);
#                not the 100- and 128-rank ring simulations (one thread, pure arithmetic, 70 s
#                under ASan: the smaller ones run)
#   tsan         the same without forked processes (TSan does not follow fork), and the simulated
#                GPUs' collectives with ranks as threads (direct and staged through the host)
#   fuzz         every libFuzzer target for STRATA_FUZZ_SECONDS (default 20 here) each, with
#                ASan and UBSan, from its seed corpus (tests/fuzz/corpus)
# STRATA_SANITIZER_STAGES picks stages (default: asan tsan fuzz; ubsan is there to run alone).
set -euo pipefail
# STRATA_TEST_RESULTS: where each ctest run leaves its JUnit file (sanitizer-<stage>-<n>.xml)
results=${STRATA_TEST_RESULTS:-$PWD/build-sanitizer-results}
mkdir -p "$results"
runs=0
junit() {  # sets junit_args for the next ctest run
  runs=$((runs + 1))
  junit_args=(--no-tests=error --output-junit "$results/sanitizer-$stage-$runs.xml")
}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
cd "$(dirname "$0")/.."
stages=${STRATA_SANITIZER_STAGES:-asan tsan fuzz}
targets=(unit_tests core_tests task_tests topology_tests transport_conformance lifetime_test kept_call_test stress_test ib_tests
  socket_network_tests
  strata_verbs_emu)
fuzz_targets=$(sed -n 's/^  \(fuzz_[a-z_]*\):.*/\1/p' tests/fuzz/CMakeLists.txt)
for stage in $stages; do
  start=$SECONDS
  echo "== stage $stage"
  cmake --preset "$stage" >/dev/null
  if [ "$stage" = fuzz ]; then
    # shellcheck disable=SC2086
    cmake --build build-fuzz -j "$(nproc)" --target $fuzz_targets
    export STRATA_FUZZ_SECONDS=${STRATA_FUZZ_SECONDS:-20}
    export STRATA_FUZZ_SUMMARY=$PWD/build-fuzz/fuzz-summary.txt
    : >"$STRATA_FUZZ_SUMMARY"
    junit
    (cd build-fuzz && ctest -L fuzz -j "$(nproc)" --output-on-failure "${junit_args[@]}")
    sort "$STRATA_FUZZ_SUMMARY"
  else
    extra=()
    [ "$stage" = tsan ] && extra=(gpu_test)
    cmake --build "build-$stage" -j "$(nproc)" --target "${targets[@]}" "${extra[@]}"
    skip='^abi_|^dropin_|^Large/RingSchedule'  # header and ABI checks (compiled in the main suite), ring arithmetic
    # TSan: no forked processes (the simulated GPUs run below, as threads), and
    # not the IB network over the emulated NIC (a thread that stores into peers' memory as a DMA engine does)
    [ "$stage" = tsan ] && skip="$skip|/shm|/socket|processes|Processes|fakenodes|cuda_ipc|\\.sim|net_plugin|conformance\\.ib|IbNetwork|IbPuts"
    junit
    (cd "build-$stage" && ctest -j "$(nproc)" --output-on-failure --timeout 900 "${junit_args[@]}" -L 'unit|transport' -E "$skip")
    junit
    (cd "build-$stage" && STRATA_TEST_ABORT_RACES=250 ctest -j "$(nproc)" --output-on-failure --timeout 900 "${junit_args[@]}" \
      -R Lifetime -E "$skip")  # 1,000 races: 85 s under TSan
    # Kept calls: tasks rerun call after call, and deleted with their communicator.
    junit
    (cd "build-$stage" && ctest -j "$(nproc)" --output-on-failure --timeout 900 "${junit_args[@]}" -R '^Host/KeptCall' -E "$skip")
    ops=100  # ASan: 144 s with 150, 340 with 300; TSan: 6 minutes with 300
    # TSan: 4 ranks as threads, not 8 (the same code; 8 threads on two cores took 118 s)
    stress_skip=$skip
    [ "$stage" = tsan ] && stress_skip="$skip|threads8"
    junit
    (cd "build-$stage" && STRATA_STRESS=1 STRATA_STRESS_OPS=$ops STRATA_STRESS_EPOCH_OPS=100 \
      ctest -j 1 --output-on-failure --timeout 900 "${junit_args[@]}" -L stress -E "$stress_skip")
    # Simulated GPUs, strict, ranks as threads: about 3 minutes. Not the many-round
    # collectives across GPUs (84 s under TSan): PipeProtocol below runs the kernel's protocol.
    if [ "$stage" = tsan ]; then
      # Not 3 ranks on one GPU (2 and 4 run the same code), nor 2 ranks each on its own
      # GPU (4 do): 29 s.
      sim='OneGpu/GpuCollectives.*threads*:GpuSharing.*:GpuCapture.*:GpuStreams.*:GpuReduceOutputs.*:SharedGpu.*:GpuSimulator.AnEvent*'
      sim="$sim:-OneGpu/GpuCollectives.*threads_3ranks"
      (cd build-tsan && STRATA_GPU_SIM=1 STRATA_GPU_SIM_STRICT=1 timeout 900 tests/gpu_test --gtest_filter="$sim")
      (cd build-tsan && STRATA_GPU_SIM=1 STRATA_GPU_SIM_STRICT=1 NCCL_P2P_DISABLE=1 timeout 900 tests/gpu_test \
        --gtest_filter='OneGpu/GpuCollectives.*threads_2ranks')  # 4 ranks too: 42 s, the same code
      (cd build-tsan && STRATA_GPU_SIM=4 STRATA_GPU_SIM_STRICT=1 timeout 900 tests/gpu_test \
        --gtest_filter='Spread/ManyGpus.ExactResults*threads_4ranks:Ranks/DeviceDriven.*threads*:Ranks/DeviceDrivenP2p.*threads*:DeviceDrivenFaults.*:DeviceDrivenStreams.*:-DeviceDrivenFaults.APeerProcess*')  # that one forks
      # the protocols alone on host threads, weak memory included (not the *NeedsTheFence
      # and *NeedsTheAcquire tests: they run a protocol without its fence or acquire on
      # purpose, a race TSan reports)
      (cd build-tsan && timeout 600 tests/gpu_test \
        --gtest_filter='PipeProtocol.*:KernelP2pProtocol.*:-*NeedsTheFence:*NeedsTheAcquire:*Fails*')
    fi
  fi
  echo "== stage $stage: $((SECONDS - start)) s"
done
