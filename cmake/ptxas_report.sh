#!/bin/sh
# Compiler launcher for the CUDA kernels (CMake's CUDA_COMPILER_LAUNCHER): runs the
# compile it is given and keeps ptxas' report (-Xptxas=-v: registers, stack frame and
# spills of every function, per architecture) in OBJECT.ptxas beside the object it
# writes; everything else the compiler prints passes through.
out=
prev=
for arg in "$@"; do
  [ "$prev" = -o ] && out=$arg
  prev=$arg
done
log=$(mktemp) || exit 1
"$@" 2>"$log"
rc=$?
if [ -n "$out" ] && [ $rc -eq 0 ]; then
  grep -E '^ptxas info|bytes stack frame' "$log" >"$out.ptxas.tmp" && mv "$out.ptxas.tmp" "$out.ptxas" ||
    rm -f "$out.ptxas.tmp" "$out.ptxas"
fi
grep -v -E '^ptxas info|bytes stack frame' "$log" >&2
rm -f "$log"
exit $rc
