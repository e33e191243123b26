#!/usr/bin/env bash
# The GPU check, in two halves, so that a bare GPU machine (a CUDA driver, cmake,
# ninja and Python with PyTorch; no package registry, maybe no hwloc or GoogleTest)
# can run it:
#   scripts/gpu-check.sh pack   on a build machine: builds for sm_90 with nvcc found
#                               explicitly (configure must report the GPU path), and
#                               packs the binaries, libnccl.so.2 and the shared
#                               libraries they load into build-gpu/pack (at most 64 MiB);
#   scripts/gpu-check.sh run    on the GPU machine, with build-gpu/pack carried there:
#                               every step under `timeout` and the run's budget
#                               (GPU_CHECK_BUDGET, 420 s), STRATA_TIMEOUT=60, one
#                               summary; $OUT gets summary.txt and gpu-check-logs.tgz;
#                               a GPU test that skips while a GPU is visible fails
#                               (tests that need more GPUs than are visible are
#                               filtered out, and said so);
#   scripts/gpu-check.sh diag   short runs of single steps at NCCL_DEBUG=INFO (see do_diag).
# With no argument: pack, then run (a machine that has both). Exits non-zero when any
# step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
pack=${GPU_CHECK_PACK:-build-gpu/pack}

do_pack() {
  local nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
  [ -x "$nvcc" ] || { echo "gpu-check pack: no nvcc at $nvcc (set NVCC)"; return 1; }
  local log=build-gpu/configure.log
  mkdir -p build-gpu
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES=90 > "$log" 2>&1 || { cat "$log"; return 1; }
  grep -q "GPU path: CUDA" "$log" || { echo "gpu-check pack: configure did not enable CUDA"; return 1; }
  local tools=(all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf gpu_bench)
  cmake --build build-gpu --target nccl strata_reference gpu_test "${tools[@]}" || return 1
  rm -rf "$pack" && mkdir -p "$pack/bin" "$pack/lib"
  cp build-gpu/tests/gpu_test "$pack/bin/"
  for t in "${tools[@]}"; do cp "build-gpu/bin/$t" "$pack/bin/"; done
  cp -L build-gpu/lib/libnccl.so.2 build-gpu/lib/libstrata-reference.so "$pack/lib/"
  ln -sf libnccl.so.2 "$pack/lib/libnccl.so"
  # What they load beyond the C library and the loader (the GPU machine's distribution
  # may lack hwloc, GoogleTest's or a new enough libstdc++).
  for f in "$pack"/bin/* "$pack/lib/libnccl.so.2"; do
    LD_LIBRARY_PATH=$pack/lib ldd "$f" | awk '/=> \// {print $3}'
  done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | while read -r lib; do
    [ -e "$pack/lib/$(basename "$lib")" ] || cp -L "$lib" "$pack/lib/"
  done
  strip --strip-unneeded "$pack"/bin/* "$pack"/lib/*.so* 2> /dev/null
  cp scripts/torch_check.py integrations/torch/tests/reference_data.py "$pack/"
  local mib=$(( $(du -sb "$pack" | cut -f1) / 1048576 ))
  echo "gpu-check pack: $pack is $mib MiB: $(ls "$pack/bin" "$pack/lib" | tr '\n' ' ')"
  [ "$mib" -le 64 ] || { echo "gpu-check pack: over 64 MiB"; return 1; }
}

# Shared by run and diag: the pack on the library path, logs in a scratch folder
# ($OUT gets only summary.txt and one gpu-check-logs.tgz, so that every log comes back
# from a machine that returns only a few files), and step(), which bounds every command
# by its own limit and the run's budget.
setup() {
  [ -x "$pack/bin/gpu_test" ] || { echo "gpu-check: no $pack (run 'scripts/gpu-check.sh pack' and carry it)"; return 1; }
  out=${OUT:-/tmp/strata-gpu-check}
  logs=$(mktemp -d /tmp/gpu-check-logs.XXXXXX)
  mkdir -p "$out"
  pack=$(cd "$pack" && pwd)
  export LD_LIBRARY_PATH=$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} STRATA_TIMEOUT=60
  export STRATA_REFERENCE_LIB=$pack/lib/libstrata-reference.so
  summary=()
  failed=FAIL
  # The whole run stays within GPU_CHECK_BUDGET seconds (default 420): a step gets
  # the smaller of its own limit and what is left; one with under 10 s left is skipped.
  deadline=$((SECONDS + ${GPU_CHECK_BUDGET:-420}))
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$logs/gpu.txt" 2>&1 || true
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
  echo "GPU: $(cat "$logs/gpu.txt") ($gpus visible)"
  torch_lib=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__) + "/lib")' 2> /dev/null)
  nccl_lib=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0] + "/lib")' 2> /dev/null)
  return 0
}

step() {  # step NAME SECONDS COMMAND...: runs it under timeout, keeps its output, records the verdict
  local name=$1 limit=$2; shift 2
  local start=$SECONDS rc=0
  [ $((deadline - SECONDS)) -lt "$limit" ] && limit=$((deadline - SECONDS))
  if [ "$limit" -lt 10 ]; then summary+=("FAIL  $name: skipped, the run's budget is spent"); return; fi
  echo "== $name (limit $limit s)"
  if declare -F "$1" > /dev/null; then  # a function of this script: `timeout` runs it in a new bash
    timeout -k 5 "$limit" bash -c "$(declare -f "$1"); \"\$@\"" bash "$@" > "$logs/$name.log" 2>&1 || rc=$?
  else
    timeout -k 5 "$limit" "$@" > "$logs/$name.log" 2>&1 || rc=$?
  fi
  if [ $rc -eq 0 ]; then summary+=("PASS  $name ($((SECONDS - start)) s)")
  else summary+=("$failed  $name ($((SECONDS - start)) s, rc $rc): see $name.log"); fi
  tail -n 8 "$logs/$name.log"
}

# run_each BINARY FILTER: every test the filter selects, each in a process of its own;
# fails when any of them fails, or when the filter selects none.
run_each() {
  local bin=$1 suite="" t rc=0 ran=0 out status
  while IFS= read -r line; do
    if [[ $line != " "* ]]; then suite=${line%% *}; continue; fi
    t=${line#  }; t=${t%% *}
    out=$("$bin" --gtest_filter="$suite$t" 2>&1)
    status=$?
    grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|Failure|Which is|rank [0-9]+:' <<< "$out"
    ran=$((ran + 1))
    [ $status -eq 0 ] || { echo "run_each: $suite$t exited $status"; rc=1; }
  done < <("$bin" --gtest_list_tests --gtest_filter="$2" | grep -v '^Running main')
  [ $ran -gt 0 ] || { echo "run_each: the filter $2 selects no test"; rc=1; }
  return $rc
}

finish() {
  echo
  echo "== gpu-check $1 summary ($(cat "$logs/gpu.txt"), $gpus GPU(s)) =="
  printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
  grep -h -E "^(cudaMemcpy|gpuCopy|reduce|# target)" "$logs/gpu_bench.log" 2> /dev/null
  for f in "$logs"/*_perf_*rank*.log; do
    [ -f "$f" ] && echo "$(basename "$f" .log): $(grep -E 'Avg bus bandwidth' "$f" | tr -s ' ')"
  done
  # DeviceShared's targets for 2 ranks sharing the GPU (docs/gpu.md): 8 B <= 10 us, 256 MiB
  # busbw >= 75% of the bound (a quarter of gpu_bench's copy rate, read + written). The
  # sweep above (-b 8 -e 256M -f 32: 8 B, 256 B, 8 KiB, 256 KiB, 8 MiB, 256 MiB) has both rows.
  [ -f "$logs/all_reduce_perf_2ranks.log" ] && grep -E '^ +(8|268435456) ' "$logs/all_reduce_perf_2ranks.log" |
    sed 's/^/all_reduce 2 ranks, one GPU: /'
  cp "$logs/summary.txt" "$out/summary.txt"
  tar czf "$out/gpu-check-logs.tgz" -C "$logs" .
  echo "logs: $out/gpu-check-logs.tgz"
  ! printf '%s\n' "${summary[@]}" | grep -q '^FAIL'
}

# The NCCL symbols PyTorch's CUDA library needs that Strata's libnccl.so.2 lacks:
# `ldd -r` with Strata preloaded (in place of the wheel's NCCL) lists every one.
torch_symbols() {
  local lib=$torch_lib/libtorch_cuda.so
  [ -e "$lib" ] || { echo "no libtorch_cuda.so under $torch_lib"; return 1; }
  LD_PRELOAD="$pack/lib/libnccl.so.2" ldd -r "$lib" 2>&1 | grep -i "undefined symbol: p\?nccl" | tee "$logs/torch_missing_nccl.txt"
  [ ! -s "$logs/torch_missing_nccl.txt" ]
}

torch_step() {
  if [ -n "$torch_lib" ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2> /dev/null; then
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' > "$logs/torch.txt" 2>&1
    cat "$logs/torch.txt"
    if torch_symbols > "$logs/torch_symbols.log" 2>&1; then summary+=("PASS  torch_symbols: every nccl symbol libtorch_cuda.so needs is exported")
    else summary+=("FAIL  torch_symbols: see torch_symbols.log"); cat "$logs/torch_symbols.log"; fi
    step torch_distributed 60 env LD_PRELOAD="$pack/lib/libnccl.so.2" python3 "$pack/torch_check.py"
  else
    summary+=("FAIL  torch_distributed: PyTorch with CUDA is not importable")
  fi
}

do_run() {
  setup || return 1
  # Simulator-only tests are not GPU tests; tests that need a GPU per rank need 2+.
  local filter='-GpuSimulator.*:GpuAlignment.*'
  [ "$gpus" -ge 2 ] || filter="$filter:*ManyGpus*:*DeviceDriven*:Ranks/*"
  [ "$gpus" -ge 4 ] || filter="$filter:*4ranks"
  [ "$gpus" -ge 8 ] || filter="$filter:*8ranks"
  echo "gpu tests: --gtest_filter=$filter" > "$logs/filter.txt"
  # Fastest and most telling first: the kernels against the copy rate, the tests,
  # PyTorch, then the perf tools (each step also bounded by the run's budget).
  step gpu_bench 60 "$pack/bin/gpu_bench" 256 20
  # A process that has used CUDA cannot fork ranks that use it ("initialization
  # error"), so each test with processes runs in a gtest process of its own.
  local forks='*processes*:GpuLifetime.*'
  step gpu_tests 90 "$pack/bin/gpu_test" --gtest_filter="$filter:$forks"
  step gpu_tests_processes 60 run_each "$pack/bin/gpu_test" "$forks$filter"
  if grep -q '^\[  SKIPPED \]' "$logs"/gpu_tests*.log; then summary+=("FAIL  gpu_tests: a test skipped with a GPU visible"); fi
  torch_step
  for tool in all_reduce all_gather reduce_scatter; do
    for n in 1 2 4; do
      step "${tool}_perf_${n}ranks" 20 bash -c "'$pack/bin/${tool}_perf' -t $n -b 8 -e 256M -f 32 -n 5 -w 2 -c 1 |
        tee /dev/stderr | grep -q 'Out of bounds values : 0 OK'"
    done
  done
  # The peer on the same GPU: NVIDIA's NCCL from PyTorch's wheel under the same perf
  # tool (one rank: NCCL refuses two ranks on one GPU).
  if [ -e "$nccl_lib/libnccl.so.2" ]; then
    step nvidia_nccl_all_reduce_perf_1rank 20 env LD_LIBRARY_PATH="$nccl_lib:$LD_LIBRARY_PATH" \
      "$pack/bin/all_reduce_perf" -t 1 -b 8 -e 256M -f 32 -n 5 -w 2 -c 1
  fi
  # Every stream of the process on one hardware queue (Megatron's setting): ranks
  # sharing a GPU must not wait on the device for each other.
  step all_reduce_perf_2ranks_one_queue 30 env CUDA_DEVICE_MAX_CONNECTIONS=1 STRATA_TIMEOUT=15 \
    bash -c "'$pack/bin/all_reduce_perf' -t 2 -b 8 -e 16M -f 8 -n 3 -w 1 -c 1 | tee /dev/stderr |
      grep -q 'Out of bounds values : 0 OK'"
  finish run
}

# Short, loud runs of the steps most likely to hang or fail on a new GPU machine
# (PyTorch: its NCCL symbols and torch.distributed; 2 ranks on one GPU, directly and
# staged; capture and streams; one rank's all-reduce; the kernel bench; the remaining
# gpu tests): logs at NCCL_DEBUG=INFO, waits cut to STRATA_TIMEOUT=8 so each says what
# it waited for.
do_diag() {
  setup || return 1
  export STRATA_TIMEOUT=8
  torch_step
  step all_reduce_2ranks_info 25 env NCCL_DEBUG=INFO "$pack/bin/all_reduce_perf" -t 2 -b 8 -e 8 -n 1 -w 0 -c 1
  step all_reduce_2ranks_staged_info 25 env NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 \
    "$pack/bin/all_reduce_perf" -t 2 -b 8 -e 8 -n 1 -w 0 -c 1
  step gpu_tests_capture_streams 30 env NCCL_DEBUG=WARN "$pack/bin/gpu_test" --gtest_filter='GpuCapture.*:GpuStreams.*'
  step all_reduce_1rank 20 "$pack/bin/all_reduce_perf" -t 1 -b 8 -e 128M -f 16 -n 5 -w 2 -c 1
  step gpu_bench 30 "$pack/bin/gpu_bench" 256 10
  step gpu_tests_rest 90 env NCCL_DEBUG=WARN "$pack/bin/gpu_test" \
    --gtest_filter='-GpuSimulator.*:GpuAlignment.*:*ManyGpus*:*DeviceDriven*:Ranks/*:GpuCapture.*:GpuStreams.*'
  finish diag
}

case "${1:-all}" in
  pack) do_pack ;;
  run) do_run ;;
  diag) do_diag ;;
  all) do_pack && do_run ;;
  *) echo "usage: scripts/gpu-check.sh [pack|run|diag]"; exit 2 ;;
esac
