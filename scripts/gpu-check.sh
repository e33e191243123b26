#!/usr/bin/env bash
# The GPU check, in two halves, so that a bare GPU machine (a CUDA driver, cmake,
# ninja and Python with PyTorch; no package registry, maybe no hwloc or GoogleTest)
# can run it:
#   scripts/gpu-check.sh pack   on a build machine: builds for sm_90 with nvcc found
#                               explicitly (configure must report the GPU path), and
#                               packs the binaries, libnccl.so.2 and the shared
#                               libraries they load into build-gpu/pack (at most 64 MiB);
#   scripts/gpu-check.sh run    on the GPU machine, with build-gpu/pack carried there:
#                               every step under `timeout`, STRATA_TIMEOUT=60, logs
#                               under $OUT, one summary; a GPU test that skips while a
#                               GPU is visible fails (tests that need more GPUs than
#                               are visible are filtered out, and said so).
# With no argument: pack, then run (a machine that has both). Exits non-zero when any
# step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
pack=build-gpu/pack

do_pack() {
  local nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
  [ -x "$nvcc" ] || { echo "gpu-check pack: no nvcc at $nvcc (set NVCC)"; return 1; }
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES=90 > build-gpu.configure.log 2>&1 || { cat build-gpu.configure.log; return 1; }
  grep -q "GPU path: CUDA" build-gpu.configure.log || { echo "gpu-check pack: configure did not enable CUDA"; return 1; }
  local tools=(all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf gpu_bench)
  cmake --build build-gpu --target nccl gpu_test "${tools[@]}" || return 1
  rm -rf "$pack" && mkdir -p "$pack/bin" "$pack/lib"
  cp build-gpu/tests/gpu_test "$pack/bin/"
  for t in "${tools[@]}"; do cp "build-gpu/bin/$t" "$pack/bin/"; done
  cp -L build-gpu/lib/libnccl.so.2 "$pack/lib/"
  ln -sf libnccl.so.2 "$pack/lib/libnccl.so"
  # What they load beyond the C library and the loader (the GPU machine's distribution
  # may lack hwloc, GoogleTest's or a new enough libstdc++).
  for f in "$pack"/bin/* "$pack/lib/libnccl.so.2"; do
    LD_LIBRARY_PATH=$pack/lib ldd "$f" | awk '/=> \// {print $3}'
  done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | while read -r lib; do
    [ -e "$pack/lib/$(basename "$lib")" ] || cp -L "$lib" "$pack/lib/"
  done
  strip --strip-unneeded "$pack"/bin/* "$pack"/lib/*.so* 2> /dev/null
  cp scripts/torch_check.py "$pack/"
  local mib=$(( $(du -sb "$pack" | cut -f1) / 1048576 ))
  echo "gpu-check pack: $pack is $mib MiB: $(ls "$pack/bin" "$pack/lib" | tr '\n' ' ')"
  [ "$mib" -le 64 ] || { echo "gpu-check pack: over 64 MiB"; return 1; }
}

do_run() {
  [ -x "$pack/bin/gpu_test" ] || { echo "gpu-check run: no $pack (run 'scripts/gpu-check.sh pack' and carry it)"; return 1; }
  local out=${OUT:-/tmp/strata-gpu-check}
  mkdir -p "$out"
  export LD_LIBRARY_PATH=$PWD/$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} STRATA_TIMEOUT=60
  local summary=()
  local failed=FAIL
  step() {  # step NAME SECONDS COMMAND...: runs it under timeout, keeps its output, records the verdict
    local name=$1 limit=$2; shift 2
    local start=$SECONDS rc=0
    timeout -k 5 "$limit" "$@" > "$out/$name.log" 2>&1 || rc=$?
    if [ $rc -eq 0 ]; then summary+=("PASS  $name ($((SECONDS - start)) s)")
    else summary+=("$failed  $name ($((SECONDS - start)) s, rc $rc): see $out/$name.log"); fi
    tail -n 8 "$out/$name.log"
  }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1 || true
  local gpus
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
  echo "GPU: $(cat "$out/gpu.txt") ($gpus visible)"
  # Simulator-only tests are not GPU tests; tests that need a GPU per rank need 2+.
  local filter='-GpuSimulator.*:GpuAlignment.*'
  [ "$gpus" -ge 2 ] || filter="$filter:*ManyGpus*:*DeviceOneShot*:Ranks/*"
  [ "$gpus" -ge 4 ] || filter="$filter:*4ranks"
  [ "$gpus" -ge 8 ] || filter="$filter:*8ranks"
  echo "gpu tests: --gtest_filter=$filter" > "$out/filter.txt"
  step gpu_tests 240 "$pack/bin/gpu_test" --gtest_filter="$filter"
  if grep -q '^\[  SKIPPED \]' "$out/gpu_tests.log"; then summary+=("FAIL  gpu_tests: a test skipped with a GPU visible"); fi
  for tool in all_reduce all_gather reduce_scatter; do
    for n in 1 2 4; do
      step "${tool}_perf_${n}ranks" 60 bash -c "'$pack/bin/${tool}_perf' -t $n -b 8 -e 256M -f 8 -n 5 -w 2 -c 1 |
        tee /dev/stderr | grep -q 'Out of bounds values : 0 OK'"
    done
  done
  # Known defect (README): ranks sharing a GPU go through the proxy, which deadlocks
  # with one hardware queue; bounded here by STRATA_TIMEOUT and `timeout`.
  failed=KNOWN
  step all_reduce_perf_2ranks_one_queue 40 env CUDA_DEVICE_MAX_CONNECTIONS=1 STRATA_TIMEOUT=15 \
    "$pack/bin/all_reduce_perf" -t 2 -b 8 -e 1M -f 8 -n 3 -w 1 -c 1
  failed=FAIL
  step gpu_bench 60 "$pack/bin/gpu_bench" 256 20
  if python3 -c 'import torch, torch.distributed; assert torch.cuda.is_available()' 2> /dev/null; then
    step torch_distributed 120 env LD_PRELOAD="$PWD/$pack/lib/libnccl.so.2" python3 "$pack/torch_check.py"
  else
    summary+=("FAIL  torch_distributed: PyTorch with CUDA is not importable")
  fi
  echo
  echo "== gpu-check summary ($(cat "$out/gpu.txt"), $gpus GPU(s)) =="
  printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
  grep -h -E "^(cudaMemcpy|gpuCopy|reduce|# target)" "$out/gpu_bench.log" 2> /dev/null
  for f in "$out"/*_perf_*ranks.log; do
    [ -f "$f" ] && echo "$(basename "$f" .log): $(grep -E 'Avg bus bandwidth' "$f" | tr -s ' ')"
  done
  ! printf '%s\n' "${summary[@]}" | grep -q '^FAIL'
}

case "${1:-all}" in
  pack) do_pack ;;
  run) do_run ;;
  all) do_pack && do_run ;;
  *) echo "usage: scripts/gpu-check.sh [pack|run]"; exit 2 ;;
esac
