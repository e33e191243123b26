#!/usr/bin/env bash
# The GPU checks, in one go on a machine with a GPU (under 5 minutes on one H200):
# builds with CUDA, runs the "gpu" tests, the all-reduce / all-gather /
# reduce-scatter perf tools on device buffers with 1, 2 and 4 ranks on one GPU,
# the kernels' bandwidth against a device-to-device copy, and, where PyTorch is
# installed, torch.distributed on backend "nccl" with Strata's libnccl.so.2
# preloaded. Prints a summary; exits non-zero when any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/strata-gpu-check}
mkdir -p "$out"
summary=()
step() {  # step NAME COMMAND...: runs it, keeps its output, records the verdict
  local name=$1; shift
  local start=$SECONDS
  if "$@" > "$out/$name.log" 2>&1; then summary+=("PASS  $name ($((SECONDS - start)) s)")
  else summary+=("FAIL  $name ($((SECONDS - start)) s): see $out/$name.log"); fi
  tail -n 15 "$out/$name.log"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1 || true
echo "GPU: $(cat "$out/gpu.txt")"

step build bash -c 'cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_CUDA=ON > /dev/null &&
  cmake --build build-gpu -j "$(nproc)"'
export LD_LIBRARY_PATH=$PWD/build-gpu/lib
step gpu_tests bash -c 'cd build-gpu && ctest -L gpu --output-on-failure --timeout 600'
for tool in all_reduce all_gather reduce_scatter; do
  for n in 1 2 4; do
    step "${tool}_perf_${n}ranks" bash -c "build-gpu/bin/${tool}_perf -t $n -b 8 -e 256M -f 8 -n 5 -w 2 -c 1 |
      tee /dev/stderr | grep -q 'Out of bounds values : 0 OK'"
  done
done
step gpu_bench build-gpu/bin/gpu_bench 256 20
if python3 -c 'import torch, torch.distributed; assert torch.cuda.is_available()' 2> /dev/null; then
  step torch_distributed env LD_PRELOAD="$PWD/build-gpu/lib/libnccl.so.2" python3 scripts/torch_check.py
else
  summary+=("SKIP  torch_distributed: PyTorch with CUDA is not installed")
fi

echo
echo "== gpu-check summary ($(cat "$out/gpu.txt")) =="
printf '%s\n' "${summary[@]}"
grep -h -E "^(cudaMemcpy|gpuCopy|reduce|# target)" "$out/gpu_bench.log" 2> /dev/null
for f in "$out"/*_perf_*ranks.log; do
  [ -f "$f" ] && echo "$(basename "$f" .log): $(grep -E 'Avg bus bandwidth' "$f" | tr -s ' ')"
done
! printf '%s\n' "${summary[@]}" | grep -q '^FAIL'
