#!/usr/bin/env bash
# Installs the build into a scratch prefix and builds an NCCL client against it
# three ways: pkg-config (nccl.pc), find_package(Strata) and find_package(NCCL); each
# client links the installed libnccl.so.2 and runs a 1-rank all-reduce exactly.
#   tests/install_check.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/strata-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
fail() { echo "install check: $*" >&2; exit 1; }

libdir=$(dirname "$(find "$prefix" -name 'libnccl.so.2' | head -1)")
[ -d "$libdir" ] || fail "no libnccl.so.2 under $prefix"
for f in "$libdir"/libnccl.so "$libdir"/libnccl.so.2; do [ -L "$f" ] || fail "$f is not a link"; done
ls "$libdir"/libnccl.so.2.*.* >/dev/null || fail "no libnccl.so.2.<minor>.<patch>"
[ -f "$prefix/include/nccl.h" ] || fail "no include/nccl.h"
[ -x "$prefix/bin/strata-topo" ] || fail "no bin/strata-topo"
[ -f "$libdir/pkgconfig/nccl.pc" ] || fail "no nccl.pc"
[ -f "$libdir/cmake/Strata/StrataConfig.cmake" ] || fail "no StrataConfig.cmake"
[ -f "$libdir/cmake/NCCL/NCCLConfig.cmake" ] || fail "no NCCLConfig.cmake"
"$prefix/bin/strata-topo" --topo h100-sxm-8gpu >/dev/null || fail "the installed strata-topo does not run"
if [ -x "$build/bin/all_reduce_perf" ]; then
  [ -x "$prefix/bin/all_reduce_perf" ] || fail "no bin/all_reduce_perf"
  "$prefix/bin/all_reduce_perf" -b 8 -e 1K -f 4 -t 2 >/dev/null || fail "the installed all_reduce_perf does not run"
fi

cat >"$work/client.c" <<'C'
#include <stdio.h>
#include <nccl.h>
int main(void) {
  ncclComm_t comm;
  float buf[4] = {1, 2, 3, 4};
  if (ncclCommInitAll(&comm, 1, NULL) != ncclSuccess) return 1;
  if (ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, NULL) != ncclSuccess) return 2;
  ncclCommDestroy(comm);
  int version = 0;
  ncclGetVersion(&version);
  if (version != NCCL_VERSION_CODE || buf[3] != 4) return 3;
  printf("ok %d\n", version);
  return 0;
}
C
export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046
cc "$work/client.c" -o "$work/client_pc" $(pkg-config --cflags --libs nccl)
LD_LIBRARY_PATH=$libdir "$work/client_pc" >/dev/null || fail "the pkg-config client failed"
[ "$(pkg-config --modversion nccl)" = "$(sed -n 's/^Version: //p' "$libdir/pkgconfig/nccl.pc")" ] || fail "nccl.pc version"

for pkg in Strata NCCL; do
  mkdir -p "$work/$pkg"
  cp "$work/client.c" "$work/$pkg/"
  if [ $pkg = Strata ]; then link="Strata::nccl"; else link="NCCL::NCCL"; fi
  cat >"$work/$pkg/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.22)
project(client C)
find_package($pkg REQUIRED)
add_executable(client client.c)
target_link_libraries(client PRIVATE $link)
if("$pkg" STREQUAL "NCCL")  # the variables FindNCCL modules set, as PyTorch's uses them
  if(NOT NCCL_FOUND OR NOT EXISTS "\${NCCL_INCLUDE_DIRS}/nccl.h" OR NOT EXISTS "\${NCCL_LIBRARIES}")
    message(FATAL_ERROR "NCCL variables: '\${NCCL_INCLUDE_DIRS}' '\${NCCL_LIBRARIES}'")
  endif()
  add_executable(client_vars client.c)
  target_include_directories(client_vars PRIVATE \${NCCL_INCLUDE_DIRS})
  target_link_libraries(client_vars PRIVATE \${NCCL_LIBRARIES})
endif()
CM
  cmake -S "$work/$pkg" -B "$work/$pkg/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null || fail "find_package($pkg) failed"
  cmake --build "$work/$pkg/build" >/dev/null || fail "building against find_package($pkg) failed"
  LD_LIBRARY_PATH=$libdir "$work/$pkg/build/client" >/dev/null || fail "the find_package($pkg) client failed"
done
LD_LIBRARY_PATH=$libdir "$work/NCCL/build/client_vars" >/dev/null || fail "the NCCL_LIBRARIES client failed"
echo "install check: installed into a scratch prefix; pkg-config, find_package(Strata), find_package(NCCL) clients ran"
